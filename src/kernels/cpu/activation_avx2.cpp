// AVX2 gated activations, eight lanes at a time (see activation.h): SwiGLU as ggml_v_silu(gate) *
// up, GEGLU through the F16 table.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/simd_target.h"

DUET_SIMD_TARGET_BEGIN(DUET_AVX2_ISA)
#include "kernels/cpu/expf_avx2.h"

namespace duet::detail {

bool swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  if (n % 8 != 0) return false;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 e = avx2::v_expf_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
    const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, e));
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
