// RoPE on the GPU (launch_rope; contract in ops.h, styles and angles as kernels/cpu/rope.h).
// The angle of pair i is built like the CPU's cache: float(pos) multiplied i times by
// base^(-2/head_dim) (computed on the host with the CPU's std::pow), divided by freq_factors[i];
// the rotation uses the same fused multiply-adds. Only cosf/sinf differ from glibc (<= 2 ulp).
// Runs on the caller's stream; no allocation, no synchronisation.
#include <cmath>

#include <cuda_fp16.h>

#include "base/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace duet::cuda {
namespace {

constexpr int kThreads = 128;

// One thread per (token, frequency i < head_dim / 2), looping over the n_heads heads so the
// angle and its sine/cosine are computed once per token. x: float rows `ld` apart, heads
// head_dim apart; positions: n_tokens int32. Memory-bound at prefill sizes (8 bytes/element),
// launch-bound at decode.
__global__ void rope_kernel(float* x, int64_t ld, int n_tokens, int n_heads, int head_dim, const int32_t* positions,
                            float theta_scale, const float* freq_factors, bool neox) {
  const int half = head_dim / 2;
  const int64_t total = static_cast<int64_t>(n_tokens) * half;
  for (int64_t e = blockIdx.x * int64_t{kThreads} + threadIdx.x; e < total; e += int64_t{gridDim.x} * kThreads) {
    const int t = static_cast<int>(e / half), i = static_cast<int>(e - static_cast<int64_t>(t) * half);
    float theta = static_cast<float>(positions[t]);
    for (int j = 0; j < i; ++j) theta = __fmul_rn(theta, theta_scale);  // the CPU's repeated product
    const float a = freq_factors ? __fdiv_rn(theta, freq_factors[i]) : theta;
    const float c = cosf(a), s = sinf(a);
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    float* row = x + static_cast<int64_t>(t) * ld;
    for (int h = 0; h < n_heads; ++h) {
      float* v = row + static_cast<int64_t>(h) * head_dim;
      const float x0 = v[i0], x1 = v[i1];
      v[i0] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
      v[i1] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
    }
  }
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  return v;
}

// launch_qkv_rope_cache: one warp per (token, head) over the n_heads Q, n_kv_heads K and
// n_kv_heads V heads of each token; lane l holds the rotation pairs l, l + 32, ... (neox: elements
// i and i + head_dim / 2; normal: 2i and 2i + 1), at most kMaxPairs of them (head_dim <= 256).
// Each op is the one of the separate kernels (add_bias_kernel, rms_norm_warp_kernel, rope_kernel,
// scale_kernel, kv_write_kernel) in the same order with the same roundings; only the double sum of
// the per-head norm is associated differently. Launch-bound at decode sizes (one launch instead
// of up to nine); memory-bound for prompts (read 4, write 4 or 2 bytes per element).
constexpr int kMaxPairs = 4;
template <typename T>
__global__ void qkv_rope_cache_kernel(QkvRopeParams p, T* kc, T* vc, int kv_block_size, int n_kv_heads, int cache_hd,
                                      int n_tokens, const int32_t* positions, const int32_t* seq_ids,
                                      const int32_t* block_tables, int max_blocks, float theta_scale) {
  if (p.l2_prefetch_bytes > 0) {  // the side job: one 128-byte line a thread and round
    const char* base = static_cast<const char*>(p.l2_prefetch);
    const int64_t lines = (p.l2_prefetch_bytes + 127) / 128;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < lines;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(base + i * 128));
  }
  const int heads = p.n_heads + 2 * n_kv_heads;
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  const bool live = gw < static_cast<int64_t>(n_tokens) * heads;  // uniform per warp
  const int t = live ? static_cast<int>(gw / heads) : 0, h = live ? static_cast<int>(gw - static_cast<int64_t>(t) * heads) : 0;
  const int kind = h < p.n_heads ? 0 : (h < p.n_heads + n_kv_heads ? 1 : 2);  // q, k, v
  const int hh = kind == 0 ? h : (kind == 1 ? h - p.n_heads : h - p.n_heads - n_kv_heads);
  const int hd = p.head_dim, half = hd / 2;
  const bool neox = p.rope_style == RopeStyle::kNeox;
  const float* bias = kind == 0 ? p.bq : (kind == 1 ? p.bk : p.bv);
  if (bias) bias += static_cast<int64_t>(hh) * hd;
  const float* nw = kind == 0 ? p.q_norm : (kind == 1 ? p.k_norm : nullptr);
  // Everything that does not depend on q, k, v comes before the programmatic-launch wait, off the
  // path from the q/k/v product to attention: biases, norm weights, the rotation angles (position
  // and host constants only), the cache slot (block tables). The float operations are those of
  // the separate kernels, in their order (see above).
  int i0[kMaxPairs], i1[kMaxPairs];
  float b0[kMaxPairs], b1[kMaxPairs], n0[kMaxPairs], n1[kMaxPairs], cs[kMaxPairs], sn[kMaxPairs];
  const int pos = live ? positions[t] : 0;
  float theta = static_cast<float>(pos);
  int done = 0;  // multiplications applied to theta so far (the CPU's repeated product)
#pragma unroll
  for (int j = 0; j < kMaxPairs; ++j) {
    const int pi = lane + 32 * j;
    i0[j] = neox ? pi : 2 * pi;
    i1[j] = neox ? pi + half : 2 * pi + 1;
    b0[j] = b1[j] = 0.0f;
    n0[j] = n1[j] = 1.0f;
    cs[j] = 1.0f;
    sn[j] = 0.0f;
    if (live && pi < half) {
      if (bias) b0[j] = bias[i0[j]], b1[j] = bias[i1[j]];
      if (nw) n0[j] = nw[i0[j]], n1[j] = nw[i1[j]];
      if (kind != 2) {
        for (; done < pi; ++done) theta = __fmul_rn(theta, theta_scale);
        const float a = p.freq_factors ? __fdiv_rn(theta, p.freq_factors[pi]) : theta;
        cs[j] = cosf(a);
        sn[j] = sinf(a);
      }
    }
  }
  T* dst_kv = nullptr;
  if (live && kind != 0) {
    const int32_t block = block_tables[static_cast<int64_t>(seq_ids[t]) * max_blocks + pos / kv_block_size];
    dst_kv = (kind == 1 ? kc : vc) +
             ((static_cast<int64_t>(block) * n_kv_heads + hh) * kv_block_size + pos % kv_block_size) * cache_hd;
  }
  detail::pdl_wait();
  // The dependent (decode attention, when launched programmatically: DUET_ATTN_PDL) is let in only
  // now, once the q/k/v product is done: triggered at the start, its large grid would be
  // scheduled while the product still runs and hold SM slots the product's blocks need.
  detail::pdl_trigger();
  if (!live) return;
  const float* src = kind == 0 ? p.q + t * p.ldq : (kind == 1 ? p.k + t * p.ldk : p.v + t * p.ldv);
  src += static_cast<int64_t>(hh) * hd;
  float x0[kMaxPairs], x1[kMaxPairs];
#pragma unroll
  for (int j = 0; j < kMaxPairs; ++j) {
    const int pi = lane + 32 * j;
    x0[j] = x1[j] = 0.0f;
    if (pi < half) {
      x0[j] = src[i0[j]];
      x1[j] = src[i1[j]];
      if (bias) {
        x0[j] += b0[j];
        x1[j] += b1[j];
      }
    }
  }
  if (nw) {
    double sum = 0;
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (lane + 32 * j < half) sum += static_cast<double>(x0[j] * x0[j]) + static_cast<double>(x1[j] * x1[j]);
    sum = warp_sum_d(sum);
    const float scale = 1.0f / sqrtf(static_cast<float>(sum / static_cast<double>(hd)) + p.eps);
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j) {
      x0[j] = (x0[j] * scale) * n0[j];
      x1[j] = (x1[j] * scale) * n1[j];
    }
  }
  if (kind != 2) {
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j) {
      if (lane + 32 * j < half) {
        const float a0 = x0[j], a1 = x1[j];
        x0[j] = __fmaf_rn(a0, cs[j], -__fmul_rn(a1, sn[j]));
        x1[j] = __fmaf_rn(a0, sn[j], __fmul_rn(a1, cs[j]));
      }
    }
  }
  if (kind == 0) {
    float* dst = p.q_out + t * p.ldq_out + static_cast<int64_t>(hh) * p.q_head_stride;
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (lane + 32 * j < half) {
        dst[i0[j]] = p.q_scale != 1.0f ? x0[j] * p.q_scale : x0[j];
        dst[i1[j]] = p.q_scale != 1.0f ? x1[j] * p.q_scale : x1[j];
      }
    return;
  }
#pragma unroll
  for (int j = 0; j < kMaxPairs; ++j)
    if (lane + 32 * j < half) {
      if constexpr (sizeof(T) == 2) {
        dst_kv[i0[j]] = __float2half_rn(x0[j]);
        dst_kv[i1[j]] = __float2half_rn(x1[j]);
      } else {
        dst_kv[i0[j]] = x0[j];
        dst_kv[i1[j]] = x1[j];
      }
    }
  for (int i = hd + lane; i < cache_hd; i += 32) dst_kv[i] = T(0.0f);
}

}  // namespace

void launch_qkv_rope_cache(const QkvRopeParams& p, const PagedKvCache& kv, const AttentionBatch& batch, bool pdl,
                           cudaStream_t stream) {
  if (batch.n_tokens <= 0) return;
  DUET_CHECK_MSG(p.head_dim >= 2 && p.head_dim % 2 == 0 && p.head_dim <= 2 * 32 * kMaxPairs && p.head_dim <= kv.head_dim &&
                     p.q_head_stride >= p.head_dim,
                 "qkv_rope_cache: head_dim %d (cache %d, q stride %d)", p.head_dim, kv.head_dim, p.q_head_stride);
  const float theta_scale = std::pow(p.rope_base, -2.0f / static_cast<float>(p.head_dim));
  const int64_t warps = static_cast<int64_t>(batch.n_tokens) * (p.n_heads + 2 * kv.n_kv_heads);
  const dim3 grid(static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads));
  if (kv.dtype == DType::kF16) {
    detail::launch_maybe_pdl(qkv_rope_cache_kernel<__half>, grid, dim3(kThreads), 0, stream, pdl, p,
                             static_cast<__half*>(kv.k), static_cast<__half*>(kv.v), kv.kv_block_size, kv.n_kv_heads,
                             kv.head_dim, batch.n_tokens, batch.positions, batch.seq_ids, batch.block_tables,
                             batch.max_blocks, theta_scale);
  } else {
    DUET_CHECK_MSG(kv.dtype == DType::kF32, "KV cache dtype must be F16 or F32, got %d", static_cast<int>(kv.dtype));
    detail::launch_maybe_pdl(qkv_rope_cache_kernel<float>, grid, dim3(kThreads), 0, stream, pdl, p,
                             static_cast<float*>(kv.k), static_cast<float*>(kv.v), kv.kv_block_size, kv.n_kv_heads,
                             kv.head_dim, batch.n_tokens, batch.positions, batch.seq_ids, batch.block_tables,
                             batch.max_blocks, theta_scale);
  }
}

void launch_rope(float* x, int64_t ld, int n_tokens, int n_heads, int head_dim, const int32_t* positions, float base,
                 const float* freq_factors, RopeStyle style, cudaStream_t stream) {
  if (n_tokens <= 0 || n_heads <= 0 || head_dim < 2) return;
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(head_dim));
  const int64_t total = static_cast<int64_t>(n_tokens) * (head_dim / 2);
  rope_kernel<<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(x, ld, n_tokens, n_heads, head_dim, positions,
                                                                         theta_scale, freq_factors,
                                                                         style == RopeStyle::kNeox);
  DUET_CUDA_CHECK_LAUNCH();
}

}  // namespace duet::cuda
