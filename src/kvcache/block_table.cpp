// BlockTable (see block_table.h).
#include "kvcache/block_table.h"

#include "base/check.h"

namespace duet {

BlockTable::BlockTable(uint32_t kv_block_size) : kv_block_size_(kv_block_size) {
  DUET_CHECK_MSG(kv_block_size > 0, "kv_block_size %u", kv_block_size);
}

bool BlockTable::reserve(uint32_t n_tokens, BlockPool& pool) {
  if (n_tokens <= n_tokens_) return true;
  const uint64_t need = (static_cast<uint64_t>(n_tokens) + kv_block_size_ - 1) / kv_block_size_;
  const size_t had = blocks_.size();
  while (blocks_.size() < need) {
    auto id = pool.allocate();
    if (!id) {
      for (size_t i = had; i < blocks_.size(); ++i) pool.release(blocks_[i]);
      blocks_.resize(had);
      return false;
    }
    blocks_.push_back(*id);
  }
  n_tokens_ = n_tokens;
  return true;
}

void BlockTable::truncate(uint32_t n_tokens, BlockPool& pool) {
  if (n_tokens >= n_tokens_) return;
  const size_t keep = (static_cast<uint64_t>(n_tokens) + kv_block_size_ - 1) / kv_block_size_;
  for (size_t i = keep; i < blocks_.size(); ++i) pool.release(blocks_[i]);
  blocks_.resize(keep);
  n_tokens_ = n_tokens;
}

}  // namespace duet
