// AVX2 + FMA + F16C variants of the vector helpers (see simd_ops.h).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/simd_ops.h"
#include "kernels/cpu/simd_target.h"

DUET_SIMD_TARGET_BEGIN(DUET_AVX2_ISA)

namespace duet::detail {

bool axpy_f16_avx2(int64_t n, float a, const uint16_t* x, float* y) {
  if (n % 8 != 0) return false;
  const __m256 va = _mm256_set1_ps(a);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, xv, _mm256_loadu_ps(y + i)));
  }
  return true;
}

bool axpy_f32_avx2(int64_t n, float a, const float* x, float* y) {
  if (n % 8 != 0) return false;
  const __m256 va = _mm256_set1_ps(a);
  for (int64_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  return true;
}

}  // namespace duet::detail

DUET_SIMD_TARGET_END
