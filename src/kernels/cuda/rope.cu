// RoPE on the GPU (launch_rope; contract in ops.h, styles and angles as kernels/cpu/rope.h).
// The angle of pair i is built like the CPU's cache: float(pos) multiplied i times by
// base^(-2/head_dim) (computed on the host with the CPU's std::pow), divided by freq_factors[i];
// the rotation uses the same fused multiply-adds. Only cosf/sinf differ from glibc (<= 2 ulp).
// Runs on the caller's stream; no allocation, no synchronisation.
#include <cmath>

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

}  // namespace

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
