// Gated activations on the GPU (launch_gated_activation; contract in ops.h, numerics as
// kernels/cpu/activation.h). SiLU uses ggml's expf with the CPU's fused multiply-adds on the
// first n & ~7 elements and expf on the tail, like the CPU, so it matches bit for bit. GELU uses
// tanhf (<= 2 ulp from glibc's tanh); in kF16Table mode input and result are rounded to F16 as
// ggml's table, so a result is the table's entry or (rarely, at an F16 rounding boundary) its
// neighbour. Runs on the caller's stream; no allocation, no synchronisation.
#include <cuda_fp16.h>

#include "base/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace duet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kGeluCoef = 0.044715f;

// act(g) * u for mode 0 (SiLU), 1 (GELU tanh, float32), 2 (GELU through ggml's F16 table).
// tail: the element lies past the last multiple of 8 of the whole tensor, where the CPU (and
// ggml) uses expf instead of the vectorised exponential.
__device__ __forceinline__ float gated_value(int mode, float g, float u, bool tail) {
  if (mode == 0) {  // SiLU
    const float e = tail ? expf(-g) : detail::ggml_expf_dev(0.0f - g);
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u);
  }
  if (mode == 1) return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kGeluCoef * g * g))) * u;
  if (g <= -10.0f) return 0.0f;
  if (g >= 10.0f) return __fmul_rn(g, u);
  const float x = __half2float(__float2half_rn(g));
  const float y = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * __fmaf_rn(kGeluCoef * x, x, 1.0f)));
  return __fmul_rn(__half2float(__float2half_rn(y)), u);
}

// One thread per element (grid-stride) of n_rows x n: gate/up rows ldi apart, out rows ldo apart
// (out may equal gate when ldo == ldi). Memory-bound: 12 bytes per element.
__global__ void gated_activation_kernel(int mode, const float* gate, const float* up, int64_t ldi, int64_t n,
                                        float* out, int64_t ldo, int64_t total) {
  const int64_t n8 = total & ~int64_t{7};
  for (int64_t e = blockIdx.x * int64_t{kThreads} + threadIdx.x; e < total; e += int64_t{gridDim.x} * kThreads) {
    const int64_t r = e / n, i = e - r * n;
    out[r * ldo + i] = gated_value(mode, gate[r * ldi + i], up[r * ldi + i], e >= n8);
  }
}

// One warp per 32 values of one row: the values of gated_activation_kernel, quantized in
// registers (detail::quantize_group_q8) into xq [n_rows][n], xm [n_rows][n / 32]. n % 32 == 0.
__global__ void gated_activation_q8_kernel(int mode, const float* gate, const float* up, int64_t ldi, int64_t n,
                                           int64_t n_rows, int8_t* xq, float4* xm) {
  detail::pdl_trigger();
  detail::pdl_wait();
  const int64_t groups = n / 32;
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (gw >= n_rows * groups) return;  // uniform per warp
  const int64_t r = gw / groups, g = gw - r * groups, i = g * 32 + lane;
  const int64_t n8 = (n_rows * n) & ~int64_t{7};
  const float v = gated_value(mode, gate[r * ldi + i], up[r * ldi + i], r * n + i >= n8);
  detail::quantize_group_q8(v, lane, xq + r * n + g * 32, xm + r * groups + g);
}

int mode_of(Activation act, GeluMode gelu) { return act == Activation::kSilu ? 0 : (gelu == GeluMode::kExact ? 1 : 2); }

}  // namespace

void launch_gated_activation(Activation act, GeluMode gelu, const float* gate, const float* up, float* out, int64_t n,
                             cudaStream_t stream) {
  launch_gated_activation_rows(act, gelu, gate, up, n, 1, n, out, n, stream);
}

void launch_gated_activation_rows(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                  int64_t n_rows, int64_t n, float* out, int64_t ldo, cudaStream_t stream) {
  const int64_t total = n_rows * n;
  if (total <= 0) return;
  gated_activation_kernel<<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(mode_of(act, gelu), gate, up, ldi,
                                                                                      n, out, ldo, total);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_gated_activation_q8(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                int64_t n_rows, int64_t n, int8_t* xq, float4* xm, bool pdl, cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  DUET_CHECK_MSG(n % 32 == 0, "gated_activation_q8: %lld values per row, not a multiple of 32", static_cast<long long>(n));
  const int64_t threads = n_rows * n;  // one per value
  detail::launch_maybe_pdl(gated_activation_q8_kernel, dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), 0,
                           stream, pdl, mode_of(act, gelu), gate, up, ldi, n, n_rows, xq, xm);
}

}  // namespace duet::cuda
