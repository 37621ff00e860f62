// KvStore (see kv_store.h).
#include "model/kv_store.h"

#include "base/check.h"

namespace duet {

Result<KvStore> KvStore::create(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim, uint32_t kv_block_size,
                                uint32_t n_kv_blocks, DType dtype, uint64_t max_bytes) {
  if (dtype != DType::kF16 && dtype != DType::kF32)
    return invalid_argument("KV cache type " + std::string(dtype_name(dtype)) + " is not supported (F16, F32)");
  if (kv_block_size == 0 || n_kv_blocks == 0) return invalid_argument("KV cache needs kv_block_size > 0 and n_kv_blocks > 0");
  const uint64_t eb = dtype == DType::kF16 ? 2 : 4;
  uint64_t per_layer = eb;
  for (uint64_t f : {uint64_t{n_kv_heads}, uint64_t{head_dim}, uint64_t{kv_block_size}, uint64_t{n_kv_blocks}})
    if (!checked_mul(per_layer, f, &per_layer)) return invalid_argument("KV cache size overflows");
  uint64_t total;
  if (!checked_mul(per_layer, 2ull * n_layers, &total) || total > max_bytes)
    return invalid_argument("KV cache of " + std::to_string(n_kv_blocks) + " blocks x " + std::to_string(kv_block_size) +
                            " tokens needs more than the " + std::to_string(max_bytes >> 20) + " MiB limit");
  KvStore s;
  s.n_kv_heads_ = n_kv_heads;
  s.head_dim_ = head_dim;
  s.kv_block_size_ = kv_block_size;
  s.n_kv_blocks_ = n_kv_blocks;
  s.dtype_ = dtype;
  s.layer_bytes_ = per_layer;
  s.layers_.resize(n_layers);
  for (auto& l : s.layers_) {
    l.k.reset(static_cast<uint8_t*>(std::calloc(per_layer, 1)));
    l.v.reset(static_cast<uint8_t*>(std::calloc(per_layer, 1)));
    if (!l.k || !l.v) return io_error("out of memory allocating a KV cache of " + std::to_string(total >> 20) + " MiB");
  }
  return s;
}

PagedKvLayer KvStore::layer(uint32_t i) {
  DUET_CHECK_MSG(i < layers_.size(), "layer %u of %zu", i, layers_.size());
  PagedKvLayer l;
  l.dtype = dtype_;
  l.k = layers_[i].k.get();
  l.v = layers_[i].v.get();
  l.kv_block_size = kv_block_size_;
  l.n_kv_heads = n_kv_heads_;
  l.head_dim = head_dim_;
  return l;
}

}  // namespace duet
