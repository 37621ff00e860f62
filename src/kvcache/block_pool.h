// BlockPool: the KV-cache block ids [0, n_blocks) of one cache, a free list and a reference
// count per block (a block shared by several sequences, e.g. a common prefix, is freed when the
// last holder releases it). Pure bookkeeping: it owns no K/V storage (model/kv_store.h does).
// Not thread-safe: one owner (the scheduler or a Session) mutates it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace duet {

class BlockPool {
 public:
  explicit BlockPool(uint32_t n_blocks);

  uint32_t n_blocks() const { return static_cast<uint32_t>(ref_.size()); }
  uint32_t n_free() const { return static_cast<uint32_t>(free_.size()); }

  // Lowest-numbered free blocks come out first on a fresh pool (deterministic ids for tests);
  // nullopt when every block is in use.
  std::optional<int32_t> allocate();
  void retain(int32_t id);   // one more holder of an allocated block
  void release(int32_t id);  // one holder fewer; the block is free again at zero
  int32_t ref_count(int32_t id) const;

 private:
  std::vector<int32_t> ref_;
  std::vector<int32_t> free_;  // a stack: back() is allocated next
};

}  // namespace duet
