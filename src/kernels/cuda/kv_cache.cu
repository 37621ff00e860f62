// KV-cache writes on the GPU (launch_kv_write; contract in ops.h, layout as kernels/cpu/attention.h:
// [block][kv_head][slot][head_dim], F16 rounded to nearest even like f32_to_f16, or F32).
// Runs on the caller's stream; no allocation, no synchronisation.
#include <cuda_fp16.h>

#include "base/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace duet::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (token, kv head, pair of elements): K and V rows (float, ldk / ldv apart) go to
// the slot of (seq_ids[t], positions[t]) through the block table. head_dim even.
// Memory-bound: 8 bytes read and 4 (F16) or 8 written per element pair of K and of V.
template <typename T>
__global__ void kv_write_kernel(T* kc, T* vc, int kv_block_size, int n_kv_heads, int head_dim, int n_tokens,
                                const int32_t* positions, const int32_t* seq_ids, const int32_t* block_tables,
                                int max_blocks, const float* k, int64_t ldk, const float* v, int64_t ldv) {
  const int pairs = head_dim / 2;
  const int64_t per_token = static_cast<int64_t>(n_kv_heads) * pairs;
  const int64_t total = per_token * n_tokens;
  for (int64_t e = blockIdx.x * int64_t{kThreads} + threadIdx.x; e < total; e += int64_t{gridDim.x} * kThreads) {
    const int t = static_cast<int>(e / per_token);
    const int64_t rem = e - t * per_token;
    const int h = static_cast<int>(rem / pairs), d = 2 * static_cast<int>(rem - static_cast<int64_t>(h) * pairs);
    const int pos = positions[t];
    const int32_t block = block_tables[static_cast<int64_t>(seq_ids[t]) * max_blocks + pos / kv_block_size];
    const int64_t off = ((static_cast<int64_t>(block) * n_kv_heads + h) * kv_block_size + pos % kv_block_size) * head_dim + d;
    const float2 kx = *reinterpret_cast<const float2*>(k + t * ldk + static_cast<int64_t>(h) * head_dim + d);
    const float2 vx = *reinterpret_cast<const float2*>(v + t * ldv + static_cast<int64_t>(h) * head_dim + d);
    if constexpr (sizeof(T) == 2) {
      *reinterpret_cast<__half2*>(kc + off) = __floats2half2_rn(kx.x, kx.y);
      *reinterpret_cast<__half2*>(vc + off) = __floats2half2_rn(vx.x, vx.y);
    } else {
      *reinterpret_cast<float2*>(kc + off) = kx;
      *reinterpret_cast<float2*>(vc + off) = vx;
    }
  }
}

}  // namespace

void launch_kv_write(const PagedKvCache& kv, const AttentionBatch& batch, const float* k, int64_t ldk, const float* v,
                     int64_t ldv, cudaStream_t stream) {
  if (batch.n_tokens <= 0) return;
  DUET_CHECK_MSG(kv.head_dim % 2 == 0 && ldk % 2 == 0 && ldv % 2 == 0, "kv_write needs even head_dim/ldk/ldv, got %d/%lld/%lld",
                 kv.head_dim, static_cast<long long>(ldk), static_cast<long long>(ldv));
  const int64_t total = static_cast<int64_t>(batch.n_tokens) * kv.n_kv_heads * (kv.head_dim / 2);
  const unsigned grid = detail::grid_for(total, kThreads);
  if (kv.dtype == DType::kF16) {
    kv_write_kernel<__half><<<grid, kThreads, 0, stream>>>(
        static_cast<__half*>(kv.k), static_cast<__half*>(kv.v), kv.kv_block_size, kv.n_kv_heads, kv.head_dim,
        batch.n_tokens, batch.positions, batch.seq_ids, batch.block_tables, batch.max_blocks, k, ldk, v, ldv);
  } else {
    DUET_CHECK_MSG(kv.dtype == DType::kF32, "KV cache dtype must be F16 or F32, got %d", static_cast<int>(kv.dtype));
    kv_write_kernel<float><<<grid, kThreads, 0, stream>>>(
        static_cast<float*>(kv.k), static_cast<float*>(kv.v), kv.kv_block_size, kv.n_kv_heads, kv.head_dim,
        batch.n_tokens, batch.positions, batch.seq_ids, batch.block_tables, batch.max_blocks, k, ldk, v, ldv);
  }
  DUET_CUDA_CHECK_LAUNCH();
}

}  // namespace duet::cuda
