// Batch validation shared by the backends, and the default greedy forward (see forward_model.h).
#include "model/forward_model.h"

#include <algorithm>

#include "kernels/cpu/sampling.h"

namespace duet {

Status ForwardModel::forward_greedy(const ForwardBatch& batch, int32_t* tokens) {
  const size_t vocab = hparams().vocab_size, n_out = batch.output_rows.size();
  greedy_logits_.resize(n_out * vocab);
  DUET_RETURN_IF_ERROR(forward(batch, greedy_logits_.data()));
  for (size_t i = 0; i < n_out; ++i) tokens[i] = argmax(greedy_logits_.data() + i * vocab, static_cast<int64_t>(vocab));
  return Status::ok();
}

Status resolve_cache_geometry(const HParams& hp, CacheGeometry* g) {
  if (g->kv_block_size == 0 || g->kv_block_size > 4096)
    return invalid_argument("kv_block_size " + std::to_string(g->kv_block_size) + " not in 1..4096");
  if (g->max_context == 0) g->max_context = std::min<uint32_t>(hp.context_length ? hp.context_length : 4096, 4096);
  if (g->max_seqs == 0) g->max_seqs = 1;
  if (g->n_kv_blocks == 0) {
    const uint64_t per_seq = (uint64_t{g->max_context} + g->kv_block_size - 1) / g->kv_block_size;
    const uint64_t n = per_seq * g->max_seqs;
    if (n > (1u << 30)) return invalid_argument("KV cache of " + std::to_string(n) + " blocks is too large");
    g->n_kv_blocks = static_cast<uint32_t>(n);
  }
  return Status::ok();
}

std::vector<uint8_t> default_sliding_layers(const HParams& hp) {
  std::vector<uint8_t> s(hp.n_layers, 0);
  for (uint32_t i = 0; i < hp.n_layers; ++i)
    s[i] = hp.arch == Arch::kGemma3 && hp.sliding_window_pattern > 0 && (i + 1) % hp.sliding_window_pattern != 0;
  return s;
}

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
