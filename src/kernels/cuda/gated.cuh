// The gated activation's value, act(g) * u, shared by the element-wise kernels (activation.cu) and
// the gate/up product that can apply it itself (quant_mma.cu's gated instances), so that both
// round alike. Numerics as kernels/cpu/activation.h: SiLU uses ggml's expf with the CPU's fused
// multiply-adds on the first n & ~7 elements of the tensor and expf on the tail, like the CPU, so
// it matches bit for bit; GELU uses tanhf (<= 2 ulp from glibc's tanh); in the F16-table mode
// input and result are rounded to F16 as ggml's table.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

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

// act(g) * u of four consecutive elements, the first at index e of the tensor (n8 as above).
__device__ __forceinline__ float4 gated_value4(int mode, float4 g, float4 u, int64_t e, int64_t n8) {
  return make_float4(gated_value(mode, g.x, u.x, e >= n8), gated_value(mode, g.y, u.y, e + 1 >= n8),
                     gated_value(mode, g.z, u.z, e + 2 >= n8), gated_value(mode, g.w, u.w, e + 3 >= n8));
}

// Four floats rounded to F16 (nearest) as one 8-byte word, in memory order.
__device__ __forceinline__ uint2 half4_bits(float4 o) {
  const __half2 a = __floats2half2_rn(o.x, o.y), b = __floats2half2_rn(o.z, o.w);
  uint2 bits;
  memcpy(&bits.x, &a, 4);
  memcpy(&bits.y, &b, 4);
  return bits;
}

}  // namespace duet::cuda::detail
