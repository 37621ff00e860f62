// BlockPool (see block_pool.h).
#include "kvcache/block_pool.h"

#include "base/check.h"

namespace duet {

BlockPool::BlockPool(uint32_t n_blocks) : ref_(n_blocks, 0) {
  free_.reserve(n_blocks);
  for (uint32_t i = n_blocks; i > 0; --i) free_.push_back(static_cast<int32_t>(i - 1));
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  int32_t id = free_.back();
  free_.pop_back();
  ref_[id] = 1;
  return id;
}

void BlockPool::retain(int32_t id) {
  DUET_CHECK_MSG(id >= 0 && id < static_cast<int32_t>(ref_.size()) && ref_[id] > 0,
                 "retain of block %d (n_blocks %zu, ref %d)", id, ref_.size(),
                 id >= 0 && id < static_cast<int32_t>(ref_.size()) ? ref_[id] : -1);
  ++ref_[id];
}

void BlockPool::release(int32_t id) {
  DUET_CHECK_MSG(id >= 0 && id < static_cast<int32_t>(ref_.size()) && ref_[id] > 0,
                 "release of block %d (n_blocks %zu, ref %d)", id, ref_.size(),
                 id >= 0 && id < static_cast<int32_t>(ref_.size()) ? ref_[id] : -1);
  if (--ref_[id] == 0) free_.push_back(id);
}

int32_t BlockPool::ref_count(int32_t id) const {
  DUET_CHECK_MSG(id >= 0 && id < static_cast<int32_t>(ref_.size()), "block %d of %zu", id, ref_.size());
  return ref_[id];
}

}  // namespace duet
