// The gated activation's value, act(g) * u, shared by the element-wise kernels (activation.cu) and
// the gate/up product that can apply it itself (quant_mma.cu's gated instances), so that both
// round alike. Numerics as kernels/cpu/activation.h: SiLU uses ggml's expf with the CPU's fused
// multiply-adds on the first n & ~7 elements of the tensor and expf on the tail, like the CPU, so
// it matches bit for bit; GELU uses tanhf (<= 2 ulp from glibc's tanh); in the F16-table mode
// input and result are rounded to F16 as ggml's table.
#pragma once

#include <cuda_fp16.h>

#include "kernels/cpu/activation.h"
#include "kernels/cuda/common.cuh"

namespace duet::cuda::detail {

// The mode argument of gated_value: 0 SiLU, 1 GELU tanh (float32), 2 GELU through ggml's F16 table.
inline int gated_mode(Activation act, GeluMode gelu) {
  return act == Activation::kSilu ? 0 : (gelu == GeluMode::kExact ? 1 : 2);
}

// act(g) * u. tail: the element lies past the last multiple of 8 of the whole tensor, where the
// CPU (and ggml) uses expf instead of the vectorised exponential.
__device__ __forceinline__ float gated_value(int mode, float g, float u, bool tail) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kGeluCoef = 0.044715f;
  if (mode == 0) {  // SiLU
    const float e = tail ? expf(-g) : ggml_expf_dev(0.0f - g);
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u);
  }
  if (mode == 1) return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kGeluCoef * g * g))) * u;
  if (g <= -10.0f) return 0.0f;
  if (g >= 10.0f) return __fmul_rn(g, u);
  const float x = __half2float(__float2half_rn(g));
  const float y = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * __fmaf_rn(kGeluCoef * x, x, 1.0f)));
  return __fmul_rn(__half2float(__float2half_rn(y)), u);
}

}  // namespace duet::cuda::detail
