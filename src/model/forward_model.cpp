// Batch validation shared by the backends (see forward_model.h).
#include "model/forward_model.h"

namespace duet {

Status validate_forward_batch(const ForwardBatch& b, uint32_t vocab_size, uint32_t kv_block_size, uint32_t n_kv_blocks) {
  const size_t n = b.tokens.size();
  if (b.positions.size() != n || b.seq_ids.size() != n)
    return invalid_argument("batch has " + std::to_string(n) + " tokens but " + std::to_string(b.positions.size()) +
                            " positions and " + std::to_string(b.seq_ids.size()) + " sequence ids");
  for (size_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || static_cast<uint32_t>(b.tokens[i]) >= vocab_size)
      return invalid_argument("token id " + std::to_string(b.tokens[i]) + " not in [0, " + std::to_string(vocab_size) + ")");
    if (b.seq_ids[i] < 0 || static_cast<size_t>(b.seq_ids[i]) >= b.seqs.size())
      return invalid_argument("sequence id " + std::to_string(b.seq_ids[i]) + " not in [0, " + std::to_string(b.seqs.size()) + ")");
    const SeqKvView& s = b.seqs[b.seq_ids[i]];
    const uint64_t cap = uint64_t{s.n_blocks} * kv_block_size;
    if (b.positions[i] < 0 || static_cast<uint64_t>(b.positions[i]) >= cap)
      return invalid_argument("position " + std::to_string(b.positions[i]) + " outside the sequence's " + std::to_string(cap) +
                              " reserved KV slots");
  }
  for (const SeqKvView& s : b.seqs)
    for (uint32_t j = 0; j < s.n_blocks; ++j)
      if (s.blocks[j] < 0 || static_cast<uint32_t>(s.blocks[j]) >= n_kv_blocks)
        return invalid_argument("KV block id " + std::to_string(s.blocks[j]) + " not in [0, " + std::to_string(n_kv_blocks) + ")");
  for (int32_t r : b.output_rows)
    if (r < 0 || static_cast<size_t>(r) >= n)
      return invalid_argument("output row " + std::to_string(r) + " not in [0, " + std::to_string(n) + ")");
  return Status::ok();
}

}  // namespace duet
