// kvcache/: BlockPool and BlockTable as tables of scenarios (allocation order, exhaustion with
// rollback, reference counts, truncation).
#include <gtest/gtest.h>

#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/block_table.h"

namespace duet {
namespace {

TEST(BlockPool, AllocatesLowestFirstAndReusesFreed) {
  BlockPool pool(4);
  EXPECT_EQ(pool.n_free(), 4u);
  EXPECT_EQ(*pool.allocate(), 0);
  EXPECT_EQ(*pool.allocate(), 1);
  EXPECT_EQ(*pool.allocate(), 2);
  pool.release(1);
  EXPECT_EQ(*pool.allocate(), 1);  // the freed block comes back first
  EXPECT_EQ(*pool.allocate(), 3);
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.n_free(), 0u);
}

TEST(BlockPool, RefCountsKeepSharedBlocks) {
  BlockPool pool(2);
  const int32_t b = *pool.allocate();
  pool.retain(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 1u);  // still held once
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 2u);
  EXPECT_EQ(pool.ref_count(b), 0);
}

TEST(BlockPoolDeath, ReleasingAFreeBlockAborts) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.release(0), "release of block 0");
  EXPECT_DEATH(pool.retain(5), "retain of block 5");
}

struct TableStep {
  enum Op { kReserve, kTruncate } op;
  uint32_t n_tokens;
  bool ok;                       // expected result of reserve
  std::vector<int32_t> blocks;   // expected table afterwards
  uint32_t free_after;           // expected free blocks in the pool
};

TEST(BlockTable, Scenarios) {
  // kv_block_size 4, pool of 5 blocks.
  const TableStep steps[] = {
      {TableStep::kReserve, 1, true, {0}, 4},
      {TableStep::kReserve, 4, true, {0}, 4},            // still one block
      {TableStep::kReserve, 5, true, {0, 1}, 3},
      {TableStep::kReserve, 13, true, {0, 1, 2, 3}, 1},
      {TableStep::kReserve, 25, false, {0, 1, 2, 3}, 1},  // needs 7 blocks: rolled back
      {TableStep::kReserve, 20, true, {0, 1, 2, 3, 4}, 0},
      {TableStep::kTruncate, 9, true, {0, 1, 2}, 2},
      {TableStep::kTruncate, 8, true, {0, 1}, 3},
      {TableStep::kReserve, 8, true, {0, 1}, 3},
      {TableStep::kTruncate, 0, true, {}, 5},
  };
  BlockPool pool(5);
  BlockTable table(4);
  for (size_t i = 0; i < std::size(steps); ++i) {
    const TableStep& s = steps[i];
    if (s.op == TableStep::kReserve) {
      EXPECT_EQ(table.reserve(s.n_tokens, pool), s.ok) << "step " << i;
    } else {
      table.truncate(s.n_tokens, pool);
    }
    EXPECT_EQ(table.blocks(), s.blocks) << "step " << i;
    EXPECT_EQ(pool.n_free(), s.free_after) << "step " << i;
  }
}

TEST(BlockTable, SlotMapping) {
  BlockPool pool(8);
  BlockTable a(3), b(3);
  ASSERT_TRUE(a.reserve(2, pool));
  ASSERT_TRUE(b.reserve(4, pool));  // interleaved allocation: a has block 0, b has 1 and 2
  ASSERT_TRUE(a.reserve(7, pool));  // a gets 3 and 4
  EXPECT_EQ(a.blocks(), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(a.block_of(0), 0);
  EXPECT_EQ(a.block_of(4), 3);
  EXPECT_EQ(a.offset_of(4), 1u);
  EXPECT_EQ(a.block_of(6), 4);
  EXPECT_EQ(b.block_of(3), 2);
  EXPECT_EQ(a.capacity(), 9u);
  a.release_all(pool);
  b.release_all(pool);
  EXPECT_EQ(pool.n_free(), 8u);
}

}  // namespace
}  // namespace duet
