// AVX2 + FMA + F16C dot products straight from quantized blocks (see quant_dot.h). The block
// loops follow ggml's x86 kernels: nibbles are widened to bytes, multiplied against the int8
// activation with maddubs (u8 x s8 -> s16 pairs), summed to int32 with madd, scaled by the two
// block scales and accumulated in float with FMA. One call = one weight row x one activation
// row; memory-bound at decode (weights stream once), so the loops keep one block in flight.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/simd_target.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

DUET_SIMD_TARGET_BEGIN(DUET_AVX2_ISA)

namespace duet {
namespace {

#define DUET_X86_PASS_ROWS 4
#include "kernels/cpu/quant_dot_x86.inc"

float dot_q4_0(int64_t n, const void* wv, const void* av) {
  const BlockQ4_0* w = static_cast<const BlockQ4_0*>(wv);
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / 32; ++i) {
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    const __m256i qx = _mm256_sub_epi8(nibbles32(w[i].qs), _mm256_set1_epi8(8));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
  }
  return hsum8(acc);
}

float dot_q4_1(int64_t n, const void* wv, const void* av) {
  const BlockQ4_1* w = static_cast<const BlockQ4_1*>(wv);
  const BlockQ8_1* a = static_cast<const BlockQ8_1*>(av);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    summs += h2f(w[i].m) * h2f(a[i].s);
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(h2f(w[i].d)), _mm256_set1_ps(h2f(a[i].d)));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_us8(nibbles32(w[i].qs), qy), acc);
  }
  return hsum8(acc) + summs;
}

float dot_q5_0(int64_t n, const void* wv, const void* av) {
  const BlockQ5_0* w = static_cast<const BlockQ5_0*>(wv);
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / 32; ++i) {
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    // A clear 5th bit means q - 16 < 0: OR-ing 0xf0 into the nibble gives that value in int8.
    const __m256i hi = _mm256_andnot_si256(bits32(w[i].qh), _mm256_set1_epi8(static_cast<char>(0xf0)));
    const __m256i qx = _mm256_or_si256(nibbles32(w[i].qs), hi);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
  }
  return hsum8(acc);
}

float dot_q5_1(int64_t n, const void* wv, const void* av) {
  const BlockQ5_1* w = static_cast<const BlockQ5_1*>(wv);
  const BlockQ8_1* a = static_cast<const BlockQ8_1*>(av);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    summs += h2f(w[i].m) * h2f(a[i].s);
    const __m256i hi = _mm256_and_si256(bits32(w[i].qh), _mm256_set1_epi8(0x10));
    const __m256i qx = _mm256_or_si256(nibbles32(w[i].qs), hi);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs));
    const __m256 d = _mm256_mul_ps(_mm256_set1_ps(h2f(w[i].d)), _mm256_set1_ps(h2f(a[i].d)));
    acc = _mm256_fmadd_ps(mul_sum_us8(qx, qy), d, acc);
  }
  return hsum8(acc) + summs;
}

float dot_q8_0(int64_t n, const void* wv, const void* av) {
  const BlockQ8_0* w = static_cast<const BlockQ8_0*>(wv);
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / 32; ++i) {
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs));
    acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
  }
  return hsum8(acc);
}

float dot_q4_K(int64_t n, const void* wv, const void* av) {
  const BlockQ4_K* w = static_cast<const BlockQ4_K*>(wv);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(av);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = a[i].d * h2f(w[i].d);
    const float dmin = -a[i].d * h2f(w[i].dmin);
    alignas(16) uint8_t sm[16];
    unpack_k_scales(w[i].scales, sm);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k_min_products(sm + 8, a[i].bsums)), acc_m);
    const uint8_t* q4 = w[i].qs;
    const int8_t* q8 = a[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < kQK_K / 64; ++j) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4 + 32 * j));
      const __m256i lo = _mm256_and_si256(bits, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * j));
      const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * j + 32));
      const __m256i p0 = _mm256_madd_epi16(_mm256_set1_epi16(sm[2 * j]), _mm256_maddubs_epi16(lo, y0));
      const __m256i p1 = _mm256_madd_epi16(_mm256_set1_epi16(sm[2 * j + 1]), _mm256_maddubs_epi16(hi, y1));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
  acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
  return hsum8(acc) + _mm_cvtss_f32(acc_m);
}

float dot_q5_K(int64_t n, const void* wv, const void* av) {
  const BlockQ5_K* w = static_cast<const BlockQ5_K*>(wv);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(av);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i mone = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;  // ggml keeps the min term of Q5_K in a scalar
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = a[i].d * h2f(w[i].d);
    const float dmin = -a[i].d * h2f(w[i].dmin);
    alignas(16) uint8_t sm[16];
    unpack_k_scales(w[i].scales, sm);
    const __m128i prod = k_min_products(sm + 8, a[i].bsums);
    const __m128i hs = _mm_hadd_epi32(_mm_hadd_epi32(prod, _mm_setzero_si128()), _mm_setzero_si128());
    summs = std::fma(dmin, static_cast<float>(_mm_extract_epi32(hs, 0)), summs);
    const uint8_t* q5 = w[i].qs;
    const int8_t* q8 = a[i].qs;
    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh));
    __m256i hmask = mone;
    __m256i sumi = _mm256_setzero_si256();
    int bit = 0;
    for (int j = 0; j < kQK_K / 64; ++j) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q5 + 32 * j));
      const __m256i lo = _mm256_add_epi8(_mm256_and_si256(bits, m4),
                                         _mm256_slli_epi16(_mm256_srli_epi16(_mm256_and_si256(hbits, hmask), bit++), 4));
      hmask = _mm256_slli_epi16(hmask, 1);
      const __m256i hi = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                         _mm256_slli_epi16(_mm256_srli_epi16(_mm256_and_si256(hbits, hmask), bit++), 4));
      hmask = _mm256_slli_epi16(hmask, 1);
      const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * j));
      const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * j + 32));
      const __m256i p0 = _mm256_madd_epi16(_mm256_set1_epi16(sm[2 * j]), _mm256_maddubs_epi16(lo, y0));
      const __m256i p1 = _mm256_madd_epi16(_mm256_set1_epi16(sm[2 * j + 1]), _mm256_maddubs_epi16(hi, y1));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum8(acc) + summs;
}

// ggml's current layout: the 6-bit values stay unsigned (0..63) through maddubs, and the -32
// offset comes off once per block as 32 * sum(scale * bsum), lane by lane (q8sclsub).
// kTiled: the integer super-block sum is folded in with one fma per block (DotVariant::kTiled).
template <bool kTiled>
float dot_q6_K(int64_t n, const void* wv, const void* av) {
  const BlockQ6_K* w = static_cast<const BlockQ6_K*>(wv);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(av);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m15 = _mm256_set1_epi8(15);
  __m256 acc = _mm256_setzero_ps();
  float facc = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = a[i].d * h2f(w[i].d);
    const uint8_t* ql = w[i].ql;
    const uint8_t* qh = w[i].qh;
    const int8_t* q8 = a[i].qs;
    const __m256i q8sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].bsums));
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales)));
    const __m256i q8sclsub = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales16), 5);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < kQK_K / 128; ++j) {
      const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * j));
      const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 64 * j + 32));
      const __m256i bh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + 32 * j));
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2);
      const __m256i h2 = _mm256_and_si256(bh, _mm256_set1_epi8(48));
      const __m256i h3 = _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(-64)), 2);
      const __m256i q0 = _mm256_or_si256(_mm256_and_si256(b1, m15), h0);
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(b2, m15), h1);
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15), h2);
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15), h3);
      const int8_t* y = q8 + 128 * j;
      __m256i p0 = _mm256_maddubs_epi16(q0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y)));
      __m256i p1 = _mm256_maddubs_epi16(q1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32)));
      __m256i p2 = _mm256_maddubs_epi16(q2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 64)));
      __m256i p3 = _mm256_maddubs_epi16(q3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 96)));
      const int8_t* sc = w[i].scales + 8 * j;
      p0 = _mm256_madd_epi16(q6_scale_pair(sc, 0), p0);
      p1 = _mm256_madd_epi16(q6_scale_pair(sc, 2), p1);
      p2 = _mm256_madd_epi16(q6_scale_pair(sc, 4), p2);
      p3 = _mm256_madd_epi16(q6_scale_pair(sc, 6), p3);
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p2, p3));
    }
    sumi = _mm256_sub_epi32(sumi, q8sclsub);
    if constexpr (kTiled) {
      facc = fma_ss(h2f(w[i].d) * static_cast<float>(hsum_epi32(sumi)), a[i].d, facc);
    } else {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
  }
  if constexpr (kTiled) return facc;
  return hsum8(acc);
}

inline float reduce_ggml(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {  // GGML_F32x8_REDUCE
  s0 = _mm256_add_ps(s0, s2);
  s1 = _mm256_add_ps(s1, s3);
  s0 = _mm256_add_ps(s0, s1);
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

inline __m256 load_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline __m256 load_f32(const float* p) { return _mm256_loadu_ps(p); }

// ggml_vec_dot_f32 (float sum) and ggml_vec_dot_f16 (double sum).
float dot_f32(int64_t n, const void* wv, const void* av) {
  const float* w = static_cast<const float*>(wv);
  const float* a = static_cast<const float*>(av);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32) {
    s0 = _mm256_fmadd_ps(load_f32(w + i), load_f32(a + i), s0);
    s1 = _mm256_fmadd_ps(load_f32(w + i + 8), load_f32(a + i + 8), s1);
    s2 = _mm256_fmadd_ps(load_f32(w + i + 16), load_f32(a + i + 16), s2);
    s3 = _mm256_fmadd_ps(load_f32(w + i + 24), load_f32(a + i + 24), s3);
  }
  float s = reduce_ggml(s0, s1, s2, s3);
  for (int64_t i = np; i < n; ++i) s += w[i] * a[i];
  return s;
}

float dot_f16(int64_t n, const void* wv, const void* av) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  const uint16_t* a = static_cast<const uint16_t*>(av);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32) {
    s0 = _mm256_fmadd_ps(load_f16(w + i), load_f16(a + i), s0);
    s1 = _mm256_fmadd_ps(load_f16(w + i + 8), load_f16(a + i + 8), s1);
    s2 = _mm256_fmadd_ps(load_f16(w + i + 16), load_f16(a + i + 16), s2);
    s3 = _mm256_fmadd_ps(load_f16(w + i + 24), load_f16(a + i + 24), s3);
  }
  double s = reduce_ggml(s0, s1, s2, s3);
  for (int64_t i = np; i < n; ++i) s += static_cast<double>(h2f(w[i]) * h2f(a[i]));
  return static_cast<float>(s);
}

// ggml_vec_dot_bf16, AVX2 flavour: products added (not fused) into four accumulators.
float dot_bf16(int64_t n, const void* wv, const void* av) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  const uint16_t* a = static_cast<const uint16_t*>(av);
  __m256 c1 = _mm256_setzero_ps(), c2 = c1, c3 = c1, c4 = c1;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    c1 = _mm256_add_ps(_mm256_mul_ps(load_bf16(w + i), load_bf16(a + i)), c1);
    c2 = _mm256_add_ps(_mm256_mul_ps(load_bf16(w + i + 8), load_bf16(a + i + 8)), c2);
    c3 = _mm256_add_ps(_mm256_mul_ps(load_bf16(w + i + 16), load_bf16(a + i + 16)), c3);
    c4 = _mm256_add_ps(_mm256_mul_ps(load_bf16(w + i + 24), load_bf16(a + i + 24)), c4);
  }
  c1 = _mm256_add_ps(_mm256_add_ps(c1, c3), _mm256_add_ps(c2, c4));
  double s = hsum8(c1);
  for (; i < n; ++i) s += static_cast<double>(bf16_to_f32(w[i]) * bf16_to_f32(a[i]));
  return static_cast<float>(s);
}

// tinyBLAS: a single 8-lane fused chain; n is a multiple of 8.
template <typename T, __m256 (*kLoad)(const T*)>
float dot_tinyblas(int64_t n, const void* wv, const void* av) {
  const T* w = static_cast<const T*>(wv);
  const T* a = static_cast<const T*>(av);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(kLoad(w + i), kLoad(a + i), acc);
  return hsum8(acc);
}


// Q4_K in the order of llama.cpp's repacked x86 kernels (see quant_dot.cpp): exact integer
// sums per super-block (gemv, kPairsPerStep = 4) or per pair of sub-blocks (gemm, 1).
template <int kPairsPerStep>
float dot_q4_K_repacked(int64_t n, const void* wv, const void* av) {
  const BlockQ4_K* w = static_cast<const BlockQ4_K*>(wv);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(av);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = h2f(w[i].d) * a[i].d;
    const float dmin = h2f(w[i].dmin) * a[i].d;
    alignas(16) uint8_t sm[16];
    unpack_k_scales(w[i].scales, sm);
    alignas(16) int32_t mins[4];  // per pair j: m_2j * B_2j + m_2j+1 * B_2j+1
    _mm_store_si128(reinterpret_cast<__m128i*>(mins), k_min_products(sm + 8, a[i].bsums));
    __m256i sumi = _mm256_setzero_si256();
    int imin = 0;
    for (int j = 0; j < kQK_K / 64; ++j) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs + 32 * j));
      const __m256i lo = _mm256_and_si256(bits, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 64 * j));
      const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 64 * j + 32));
      const __m256i p0 = _mm256_madd_epi16(_mm256_set1_epi16(sm[2 * j]), _mm256_maddubs_epi16(lo, y0));
      const __m256i p1 = _mm256_madd_epi16(_mm256_set1_epi16(sm[2 * j + 1]), _mm256_maddubs_epi16(hi, y1));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
      imin += mins[j];
      if ((j + 1) % kPairsPerStep == 0) {
        acc = std::fma(static_cast<float>(hsum_i32(sumi)), d, acc);
        acc_min = std::fma(static_cast<float>(imin), dmin, acc_min);
        sumi = _mm256_setzero_si256();
        imin = 0;
      }
    }
  }
  return acc - acc_min;
}

struct Fp8Table {
  alignas(64) float v[256];
  Fp8Table() {
    for (int i = 0; i < 256; ++i) v[i] = fp8_e4m3_to_f32(static_cast<uint8_t>(i));
  }
};

float dot_fp8(int64_t n, const void* wv, const void* av) {
  static const Fp8Table table;
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  const float* a = static_cast<const float*>(av);
  __m256 s0 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + i)));
    s0 = _mm256_fmadd_ps(_mm256_i32gather_ps(table.v, idx, 4), _mm256_loadu_ps(a + i), s0);
  }
  float s = hsum8(s0);
  for (; i < n; ++i) s += table.v[w[i]] * a[i];
  return s;
}


}  // namespace

namespace detail {

VecDotFn vec_dot_avx2(DType w, DotVariant v) {
  if (v == DotVariant::kTiled) return w == DType::kQ6_K ? dot_q6_K<true> : nullptr;  // others: generic
  if (v == DotVariant::kTinyBlas) {
    if (w == DType::kF32) return dot_tinyblas<float, load_f32>;
    if (w == DType::kF16) return dot_tinyblas<uint16_t, load_f16>;
    if (w == DType::kBF16) return dot_tinyblas<uint16_t, load_bf16>;
  }
  if (w == DType::kQ4_K && v == DotVariant::kRepackGemv) return dot_q4_K_repacked<4>;
  if (w == DType::kQ4_K && v == DotVariant::kRepackGemm) return dot_q4_K_repacked<1>;
  switch (w) {
    case DType::kF32: return dot_f32;
    case DType::kF16: return dot_f16;
    case DType::kBF16: return dot_bf16;
    case DType::kF8_E4M3: return dot_fp8;
    case DType::kQ4_0: return dot_q4_0;
    case DType::kQ4_1: return dot_q4_1;
    case DType::kQ5_0: return dot_q5_0;
    case DType::kQ5_1: return dot_q5_1;
    case DType::kQ8_0: return dot_q8_0;
    case DType::kQ4_K: return dot_q4_K;
    case DType::kQ5_K: return dot_q5_K;
    case DType::kQ6_K: return dot_q6_K<false>;
    default: return nullptr;
  }
}

VecDotMultiFn vec_dot_multi_avx2(DType w, DotVariant v) { return multi_kernel(w, v); }

// ggml's x86 quantize_row_q8_0 / q8_1: scale 127 / amax, round half to even.
// ggml's quantize_row_q8_K (reference code): per 256 values the first value of largest magnitude
// maps to -127, codes round half to even and stop at 127; bsums = sums of 16 codes.
static void quantize_q8_K_avx2(const float* x, BlockQ8_K* y, int64_t nb) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
    __m256 mx = _mm256_setzero_ps();
    for (int k = 0; k < kQK_K; k += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(mx, 1), _mm256_castps256_ps128(mx));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0.0f) {
      std::memset(y + b, 0, sizeof(BlockQ8_K));
      continue;
    }
    float vmax = 0.0f;  // the first value with |v| == amax, as the scalar scan's strict > finds it
    const __m256 am = _mm256_set1_ps(amax);
    for (int k = 0; k < kQK_K; k += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), am, _CMP_EQ_OQ));
      if (hit) {
        vmax = x[k + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float inv = -127.0f / vmax;
    const __m256 mul = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-128), hi = _mm256_set1_epi32(127);
    BlockQ8_K* out = y + b;
    for (int k = 0; k < kQK_K; k += 32) {
      __m256i q[4];
      for (int u = 0; u < 4; ++u) {
        const __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * u), mul));  // MXCSR: nearest even
        q[u] = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
      }
      __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->qs + k), p);
      // Sums of the two groups of 16 codes: byte pairs, then quads, then lanes 0-3 and 4-7.
      __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p), _mm256_set1_epi16(1));
      s = _mm256_hadd_epi32(s, s);
      s = _mm256_hadd_epi32(s, s);
      out->bsums[k / 16] = static_cast<int16_t>(_mm256_extract_epi32(s, 0));
      out->bsums[k / 16 + 1] = static_cast<int16_t>(_mm256_extract_epi32(s, 4));
    }
    out->d = 1.0f / inv;
  }
}

bool quantize_activation_avx2(DType act, const float* x, void* y, int64_t n) {
  if (act == DType::kQ8_K) {
    if (n % kQK_K != 0) return false;
    quantize_q8_K_avx2(x, static_cast<BlockQ8_K*>(y), n / kQK_K);
    return true;
  }
  if (act != DType::kQ8_0 && act != DType::kQ8_1) return false;
  if (n % 32 != 0) return false;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < n / 32; ++i, x += 32) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 mx = _mm256_andnot_ps(sign, v0);
    mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v1));
    mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v2));
    mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(mx, 1), _mm256_castps256_ps128(mx));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const __m256 mul = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    int8_t* qs;
    if (act == DType::kQ8_0) {
      BlockQ8_0* b = static_cast<BlockQ8_0*>(y) + i;
      b->d = _cvtss_sh(d, 0);
      qs = b->qs;
    } else {
      BlockQ8_1* b = static_cast<BlockQ8_1*>(y) + i;
      b->d = _cvtss_sh(d, 0);
      // s = d * sum(q): the int sum of the rounded values.
      const __m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_hadd_epi32(s4, s4);
      s4 = _mm_hadd_epi32(s4, s4);
      b->s = _cvtss_sh(d * static_cast<float>(_mm_cvtsi128_si32(s4)), 0);
      qs = b->qs;
    }
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), i0);
  }
  return true;
}

}  // namespace detail
}  // namespace duet

DUET_SIMD_TARGET_END
