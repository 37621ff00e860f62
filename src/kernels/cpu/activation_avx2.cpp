// AVX2 gated activations, eight lanes at a time (see activation.h): SwiGLU as ggml_v_silu(gate) *
// up, GEGLU through the F16 table.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/simd_target.h"

DUET_SIMD_TARGET_BEGIN(DUET_AVX2_ISA)

namespace duet::detail {
namespace {

inline __m256 v_expf(__m256 x) {  // ggml_v_expf (AVX2), as in attention_avx2.cpp
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256i c = _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
  const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                     _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256i d = _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
  return _mm256_or_ps(
      _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
      _mm256_andnot_ps(_mm256_castsi256_ps(d),
                       _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                                    _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

}  // namespace

bool swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  if (n % 8 != 0) return false;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, v_expf(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  return true;
}

int64_t geglu_table_avx2(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 u = _mm256_loadu_ps(up + i);
    // F16 index (round to nearest even, as ggml's FP32_TO_FP16), 32-bit gather of the entry.
    const __m256i idx = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
    const __m256i e = _mm256_and_si256(_mm256_i32gather_epi32(reinterpret_cast<const int*>(table), idx, 2),
                                       _mm256_set1_epi32(0xffff));
    const __m256i e16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(e, _mm256_setzero_si256()), 0x08);
    const __m256 t = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(e16)), u);
    // g <= -10: 0; g >= 10: g * up; otherwise table(g) * up.
    __m256 r = _mm256_blendv_ps(t, _mm256_mul_ps(g, u), _mm256_cmp_ps(g, hi, _CMP_GE_OQ));
    r = _mm256_andnot_ps(_mm256_cmp_ps(g, lo, _CMP_LE_OQ), r);
    _mm256_storeu_ps(out + i, r);
  }
  return n8;
}

}  // namespace duet::detail

DUET_SIMD_TARGET_END
