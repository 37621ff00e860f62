// AVX2 + FMA + F16C kernels of the paged attention (see attention.h): scores with tinyBLAS's or
// ggml_vec_dot_f16's lane order, lane-split FMA accumulation of value rows, and ggml_v_expf.
// Each lane performs exactly the operations of the scalar kernels in attention.cpp.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/simd_target.h"

DUET_SIMD_TARGET_BEGIN(DUET_AVX2_ISA)
#include "kernels/cpu/expf_avx2.h"

namespace duet {
namespace {

template <typename T>
inline __m256 load8(const T* p) {
  if constexpr (sizeof(T) == 2) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  else return _mm256_loadu_ps(p);
}

inline float hsum_tb(__m256 x) {  // tinyBLAS hsum
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline float reduce_ggml(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {  // GGML_F32x8_REDUCE
  s0 = _mm256_add_ps(s0, s2);
  s1 = _mm256_add_ps(s1, s3);
  s0 = _mm256_add_ps(s0, s1);
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

template <typename T>
float scalar(const T* p, int64_t i) {
  if constexpr (sizeof(T) == 2) return _cvtsh_ss(p[i]);
  else return p[i];
}

// One key's score in tinyBLAS order (a single 8-lane chain); four keys at a time so that the
// four independent chains hide the FMA latency (each key's arithmetic is unchanged).
template <typename T>
void scores_batch(int64_t hd, const T* k, size_t stride, int64_t n, const T* q, float scale, float* out) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) {
    const T* k0 = k + r * stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t c = 0; c < hd; c += 8) {
      const __m256 qv = load8(q + c);
      a0 = _mm256_fmadd_ps(load8(k0 + c), qv, a0);
      a1 = _mm256_fmadd_ps(load8(k0 + stride + c), qv, a1);
      a2 = _mm256_fmadd_ps(load8(k0 + 2 * stride + c), qv, a2);
      a3 = _mm256_fmadd_ps(load8(k0 + 3 * stride + c), qv, a3);
    }
    out[r] = hsum_tb(a0) * scale;
    out[r + 1] = hsum_tb(a1) * scale;
    out[r + 2] = hsum_tb(a2) * scale;
    out[r + 3] = hsum_tb(a3) * scale;
  }
  for (; r < n; ++r) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; c += 8) acc = _mm256_fmadd_ps(load8(k + r * stride + c), load8(q + c), acc);
    out[r] = hsum_tb(acc) * scale;
  }
}

template <typename T>
void scores(AttnOrder order, int64_t hd, const void* kv, size_t stride, int64_t n, const void* qv, float scale,
            float* out) {
  const T* q = static_cast<const T*>(qv);
  if (order == AttnOrder::kBatch) {
    scores_batch(hd, static_cast<const T*>(kv), stride, n, q, scale, out);
    return;
  }
  for (int64_t r = 0; r < n; ++r) {
    const T* k = static_cast<const T*>(kv) + r * stride;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const int64_t np = hd & ~int64_t{31};
    for (int64_t c = 0; c < np; c += 32) {
      s0 = _mm256_fmadd_ps(load8(k + c), load8(q + c), s0);
      s1 = _mm256_fmadd_ps(load8(k + c + 8), load8(q + c + 8), s1);
      s2 = _mm256_fmadd_ps(load8(k + c + 16), load8(q + c + 16), s2);
      s3 = _mm256_fmadd_ps(load8(k + c + 24), load8(q + c + 24), s3);
    }
    double s = reduce_ggml(s0, s1, s2, s3);
    for (int64_t c = np; c < hd; ++c) s += static_cast<double>(scalar(k, c) * scalar(q, c));
    out[r] = static_cast<float>(s) * scale;
  }
}

template <typename T>
void accumulate(int64_t hd, const void* vv, size_t stride, int64_t n, int64_t j0, int lanes, const float* p,
                float* acc) {
  for (int64_t r = 0; r < n; ++r) {
    const T* v = static_cast<const T*>(vv) + r * stride;
    float* a = acc + ((j0 + r) % lanes) * hd;
    const __m256 w = _mm256_set1_ps(p[r]);
    for (int64_t d = 0; d < hd; d += 8) _mm256_storeu_ps(a + d, _mm256_fmadd_ps(load8(v + d), w, _mm256_loadu_ps(a + d)));
  }
}

void exp_sub(const float* x, float max, float* y, int64_t n) {
  const __m256 m = _mm256_set1_ps(max);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, detail::avx2::v_expf_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), m)));
  if (i < n) {
    float tmp[8] = {};
    for (int64_t k = i; k < n; ++k) tmp[k - i] = x[k] - max;
    float res[8];
    _mm256_storeu_ps(res, detail::avx2::v_expf_avx2(_mm256_loadu_ps(tmp)));
    for (int64_t k = i; k < n; ++k) y[k] = res[k - i];
  }
}

void normalize(float* p, int64_t n, float inv, bool round_f16) {
  const __m256 v = _mm256_set1_ps(inv);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(p + j), v);
    if (round_f16) x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(p + j, x);
  }
  for (; j < n; ++j) {
    p[j] *= inv;
    if (round_f16) p[j] = _cvtsh_ss(_cvtss_sh(p[j], _MM_FROUND_TO_NEAREST_INT));
  }
}

// Vectorized over d: lane l of the kernel's accumulator is row l of acc.
void reduce_lanes(const float* acc, int lanes, int64_t hd, float* out) {
  auto row = [&](int l, int64_t d) { return _mm256_loadu_ps(acc + l * hd + d); };
  for (int64_t d = 0; d < hd; d += 8) {
    __m256 r;
    if (lanes == 8) {  // ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3))
      const __m256 t0 = _mm256_add_ps(row(4, d), row(0, d)), t1 = _mm256_add_ps(row(5, d), row(1, d));
      const __m256 t2 = _mm256_add_ps(row(6, d), row(2, d)), t3 = _mm256_add_ps(row(7, d), row(3, d));
      r = _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3));
    } else {  // x_l = (s0 + s2) + (s1 + s3); ((x0 + x4) + (x1 + x5)) + ((x2 + x6) + (x3 + x7))
      __m256 x[8];
      for (int l = 0; l < 8; ++l)
        x[l] = _mm256_add_ps(_mm256_add_ps(row(l, d), row(16 + l, d)), _mm256_add_ps(row(8 + l, d), row(24 + l, d)));
      const __m256 t0 = _mm256_add_ps(x[0], x[4]), t1 = _mm256_add_ps(x[1], x[5]);
      const __m256 t2 = _mm256_add_ps(x[2], x[6]), t3 = _mm256_add_ps(x[3], x[7]);
      r = _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3));
    }
    _mm256_storeu_ps(out + d, r);
  }
}

const detail::AttnKernels kF16{scores<uint16_t>, accumulate<uint16_t>, exp_sub, normalize, reduce_lanes};
const detail::AttnKernels kF32{scores<float>, accumulate<float>, exp_sub, normalize, reduce_lanes};

}  // namespace

namespace detail {
const AttnKernels* attn_kernels_avx2_f16() { return &kF16; }
const AttnKernels* attn_kernels_avx2_f32() { return &kF32; }
}  // namespace detail

}  // namespace duet

DUET_SIMD_TARGET_END
