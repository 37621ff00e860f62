// KvStore: the physical K/V memory of the paged cache, one K and one V buffer per layer of
// n_kv_blocks blocks x kv_block_size slots (layout in kernels/cpu/attention.h). Which block
// belongs to which sequence is kvcache/'s business (BlockPool, BlockTable); this class only owns
// the bytes. F16 by default, F32 for exactness checks. Written by the forward pass only.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/attention.h"
#include "tensor/dtype.h"

namespace duet {

class KvStore {
 public:
  // Fails on a type other than F16/F32 or when the buffers would exceed max_bytes.
  static Result<KvStore> create(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim, uint32_t kv_block_size,
                                uint32_t n_kv_blocks, DType dtype, uint64_t max_bytes = 64ull << 30);

  uint32_t n_kv_blocks() const { return n_kv_blocks_; }
  uint32_t kv_block_size() const { return kv_block_size_; }
  DType dtype() const { return dtype_; }
  uint64_t total_bytes() const { return static_cast<uint64_t>(layers_.size()) * 2 * layer_bytes_; }
  PagedKvLayer layer(uint32_t i);

 private:
  uint32_t n_kv_heads_ = 0, head_dim_ = 0, kv_block_size_ = 0, n_kv_blocks_ = 0;
  DType dtype_ = DType::kF16;
  uint64_t layer_bytes_ = 0;
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;  // calloc'd: pages are touched on use
  struct Buffers {
    Buffer k, v;
  };
  std::vector<Buffers> layers_;
};

}  // namespace duet
