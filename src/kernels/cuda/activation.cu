// Gated activations on the GPU (launch_gated_activation; contract in ops.h, numerics as
// kernels/cpu/activation.h). SiLU uses ggml's expf with the CPU's fused multiply-adds on the
// first n & ~7 elements and expf on the tail, like the CPU, so it matches bit for bit. GELU uses
// tanhf (<= 2 ulp from glibc's tanh); in kF16Table mode input and result are rounded to F16 as
// ggml's table, so a result is the table's entry or (rarely, at an F16 rounding boundary) its
// neighbour. Runs on the caller's stream; no allocation, no synchronisation.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace duet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kGeluCoef = 0.044715f;

// One thread per element (grid-stride); gate, up, out: n floats, out may equal gate.
// Memory-bound: 12 bytes per element.
__global__ void gated_activation_kernel(int mode, const float* gate, const float* up, float* out, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const float g = gate[i], u = up[i];
    float r;
    if (mode == 0) {  // SiLU
      const float e = i < n8 ? detail::ggml_expf_dev(0.0f - g) : expf(-g);
      r = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u);
    } else if (mode == 1) {  // GELU tanh, float32
      r = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kGeluCoef * g * g))) * u;
    } else {  // GELU through ggml's F16 table
      if (g <= -10.0f) {
        r = 0.0f;
      } else if (g >= 10.0f) {
        r = __fmul_rn(g, u);
      } else {
        const float x = __half2float(__float2half_rn(g));
        const float y = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * __fmaf_rn(kGeluCoef * x, x, 1.0f)));
        r = __fmul_rn(__half2float(__float2half_rn(y)), u);
      }
    }
    out[i] = r;
  }
}

}  // namespace

void launch_gated_activation(Activation act, GeluMode gelu, const float* gate, const float* up, float* out, int64_t n,
                             cudaStream_t stream) {
  if (n <= 0) return;
  const int mode = act == Activation::kSilu ? 0 : (gelu == GeluMode::kExact ? 1 : 2);
  gated_activation_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(mode, gate, up, out, n);
  DUET_CUDA_CHECK_LAUNCH();
}

}  // namespace duet::cuda
