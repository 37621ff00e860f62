// BlockTable: one sequence's map from logical KV blocks (position / kv_block_size) to physical
// block ids of a BlockPool. Reserving slots for more tokens allocates blocks; releasing gives
// them back. Pure bookkeeping, no storage; one owner mutates it (not thread-safe).
#pragma once

#include <cstdint>
#include <vector>

#include "kvcache/block_pool.h"

namespace duet {

class BlockTable {
 public:
  explicit BlockTable(uint32_t kv_block_size);

  uint32_t kv_block_size() const { return kv_block_size_; }
  uint32_t n_tokens() const { return n_tokens_; }  // slots reserved
  uint32_t capacity() const { return static_cast<uint32_t>(blocks_.size()) * kv_block_size_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }

  // Covers positions [0, n_tokens). Allocates what is missing from pool; on exhaustion returns
  // false and leaves the table (and the pool) as they were. Never shrinks.
  bool reserve(uint32_t n_tokens, BlockPool& pool);
  // Keeps positions [0, n_tokens) and releases whole blocks beyond them.
  void truncate(uint32_t n_tokens, BlockPool& pool);
  void release_all(BlockPool& pool) { truncate(0, pool); }

  int32_t block_of(uint32_t pos) const { return blocks_[pos / kv_block_size_]; }
  uint32_t offset_of(uint32_t pos) const { return pos % kv_block_size_; }

 private:
  uint32_t kv_block_size_;
  uint32_t n_tokens_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace duet
