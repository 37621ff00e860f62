// Vector helpers (see simd_ops.h): scalar code and dispatch.
#include "kernels/cpu/simd_ops.h"

#include "kernels/cpu/cpu_features.h"
#include "tensor/half.h"

namespace duet {

void axpy_f16(int64_t n, float a, const uint16_t* x, float* y) {
  if (cpu_features().level >= SimdLevel::kAvx2 && detail::axpy_f16_avx2(n, a, x, y)) return;
  for (int64_t i = 0; i < n; ++i) y[i] += a * f16_to_f32(x[i]);
}

void axpy_f32(int64_t n, float a, const float* x, float* y) {
  if (cpu_features().level >= SimdLevel::kAvx2 && detail::axpy_f32_avx2(n, a, x, y)) return;
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void add_f32(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace duet
