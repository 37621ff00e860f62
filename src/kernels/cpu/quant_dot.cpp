// Scalar (generic) dot products straight from quantized blocks, activation quantizers, and the
// per-level dispatch (see quant_dot.h). The integer formulas follow ggml's generic code, so the
// SIMD variants can be checked against these to float rounding of the block sums.
#include "kernels/cpu/quant_dot.h"

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

// Round half to even, as _mm256_round_ps(_MM_FROUND_TO_NEAREST_INT) does.
inline int round_even(float v) { return static_cast<int>(std::nearbyint(v)); }

void quantize_q8_0_x86(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) y[i].qs[j] = static_cast<int8_t>(round_even(x[j] * id));
  }
}

void quantize_q8_1_x86(const float* x, BlockQ8_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_f16(d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      y[i].qs[j] = static_cast<int8_t>(round_even(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = f32_to_f16(d * static_cast<float>(sum));
  }
}

// ---- scalar integer dot products ----

float dot_q4_0(int64_t n, const void* wv, const void* av) {
  const BlockQ4_0* w = static_cast<const BlockQ4_0*>(wv);
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    int s = 0;
    for (int j = 0; j < 16; ++j)
      s += ((w[i].qs[j] & 0x0f) - 8) * a[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + 16];
    sum += static_cast<float>(s) * f16_to_f32(w[i].d) * f16_to_f32(a[i].d);
  }
  return sum;
}

float dot_q4_1(int64_t n, const void* wv, const void* av) {
  const BlockQ4_1* w = static_cast<const BlockQ4_1*>(wv);
  const BlockQ8_1* a = static_cast<const BlockQ8_1*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += (w[i].qs[j] & 0x0f) * a[i].qs[j] + (w[i].qs[j] >> 4) * a[i].qs[j + 16];
    sum += f16_to_f32(w[i].d) * f16_to_f32(a[i].d) * static_cast<float>(s) + f16_to_f32(w[i].m) * f16_to_f32(a[i].s);
  }
  return sum;
}

template <typename B>
inline int q5(const B& b, uint32_t qh, int j) {
  int lo = j < 16 ? (b.qs[j] & 0x0f) : (b.qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1) << 4);
}

float dot_q5_0(int64_t n, const void* wv, const void* av) {
  const BlockQ5_0* w = static_cast<const BlockQ5_0*>(wv);
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    uint32_t qh;
    std::memcpy(&qh, w[i].qh, 4);
    int s = 0;
    for (int j = 0; j < 32; ++j) s += (q5(w[i], qh, j) - 16) * a[i].qs[j];
    sum += static_cast<float>(s) * f16_to_f32(w[i].d) * f16_to_f32(a[i].d);
  }
  return sum;
}

float dot_q5_1(int64_t n, const void* wv, const void* av) {
  const BlockQ5_1* w = static_cast<const BlockQ5_1*>(wv);
  const BlockQ8_1* a = static_cast<const BlockQ8_1*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    uint32_t qh;
    std::memcpy(&qh, w[i].qh, 4);
    int s = 0;
    for (int j = 0; j < 32; ++j) s += q5(w[i], qh, j) * a[i].qs[j];
    sum += f16_to_f32(w[i].d) * f16_to_f32(a[i].d) * static_cast<float>(s) + f16_to_f32(w[i].m) * f16_to_f32(a[i].s);
  }
  return sum;
}

float dot_q8_0(int64_t n, const void* wv, const void* av) {
  const BlockQ8_0* w = static_cast<const BlockQ8_0*>(wv);
  const BlockQ8_0* a = static_cast<const BlockQ8_0*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / 32; ++i) {
    int s = 0;
    for (int j = 0; j < 32; ++j) s += w[i].qs[j] * a[i].qs[j];
    sum += static_cast<float>(s) * f16_to_f32(w[i].d) * f16_to_f32(a[i].d);
  }
  return sum;
}

// ---- K-quants: exact integer sums per super-block, then float combination ----

// One super-block against its Q8_K activation block: isum = sum over sub-blocks of
// scale * dot(q, a) (any fixed offset of q folded in), summs = sum of min * bsum (types with mins).
struct KSums {
  int isum = 0;
  int summs = 0;
};

KSums sums_q2_K(const BlockQ2_K& w, const BlockQ8_K& a) {
  KSums r;
  for (int j = 0; j < 16; ++j) r.summs += (w.scales[j] >> 4) * a.bsums[j];
  for (int e0 = 0; e0 < kQK_K; e0 += 16) {  // sub-block of 16 elements
    int s = 0;
    for (int e = e0; e < e0 + 16; ++e) s += a.qs[e] * ((w.qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3);
    r.isum += (w.scales[e0 / 16] & 0x0f) * s;
  }
  return r;
}

inline int q3_K_scale(const uint8_t* sc, int j) {
  int lo = j < 8 ? (sc[j] & 0x0f) : (sc[j - 8] >> 4);
  int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

KSums sums_q3_K(const BlockQ3_K& w, const BlockQ8_K& a) {
  KSums r;
  for (int e0 = 0; e0 < kQK_K; e0 += 16) {
    int s = 0;
    for (int e = e0; e < e0 + 16; ++e) {
      const int lo = (w.qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const int h = (w.hmask[e % 32] >> (e / 32)) & 1;
      s += a.qs[e] * (lo - (h ? 0 : 4));
    }
    r.isum += q3_K_scale(w.scales, e0 / 16) * s;
  }
  return r;
}

inline void k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 0x3f;
    *m = s[j + 4] & 0x3f;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30);
    *m = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

template <bool kQ5>
KSums sums_q45_K(const std::conditional_t<kQ5, BlockQ5_K, BlockQ4_K>& w, const BlockQ8_K& a) {
  KSums r;
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    k_scale_min(w.scales, s, &sc, &m);
    r.summs += m * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
    const uint8_t* q = w.qs + (s / 2) * 32;
    int dot = 0;
    for (int l = 0; l < 32; ++l) {
      int v = (s % 2) ? (q[l] >> 4) : (q[l] & 0x0f);
      if constexpr (kQ5) v |= ((w.qh[l] >> s) & 1) << 4;
      dot += v * a.qs[s * 32 + l];
    }
    r.isum += sc * dot;
  }
  return r;
}

KSums sums_q6_K(const BlockQ6_K& w, const BlockQ8_K& a) {
  KSums r;
  for (int e0 = 0; e0 < kQK_K; e0 += 16) {
    int s = 0;
    for (int e = e0; e < e0 + 16; ++e) {
      const int h = e / 128, q = e % 128;
      const int lo = (w.ql[h * 64 + q % 64] >> (4 * (q / 64))) & 0x0f;
      const int hi = (w.qh[h * 32 + q % 32] >> (2 * (q / 32))) & 3;
      s += a.qs[e] * ((lo | (hi << 4)) - 32);
    }
    r.isum += w.scales[e0 / 16] * s;
  }
  return r;
}

template <typename B> struct KTraits;
template <> struct KTraits<BlockQ2_K> { static constexpr bool kMin = true; static KSums sums(const BlockQ2_K& w, const BlockQ8_K& a) { return sums_q2_K(w, a); } };
template <> struct KTraits<BlockQ3_K> { static constexpr bool kMin = false; static KSums sums(const BlockQ3_K& w, const BlockQ8_K& a) { return sums_q3_K(w, a); } };
template <> struct KTraits<BlockQ4_K> { static constexpr bool kMin = true; static KSums sums(const BlockQ4_K& w, const BlockQ8_K& a) { return sums_q45_K<false>(w, a); } };
template <> struct KTraits<BlockQ5_K> { static constexpr bool kMin = true; static KSums sums(const BlockQ5_K& w, const BlockQ8_K& a) { return sums_q45_K<true>(w, a); } };
template <> struct KTraits<BlockQ6_K> { static constexpr bool kMin = false; static KSums sums(const BlockQ6_K& w, const BlockQ8_K& a) { return sums_q6_K(w, a); } };

template <typename B>
float dmin_of(const B& w) {
  if constexpr (KTraits<B>::kMin) return f16_to_f32(w.dmin);
  else return 0.0f;
}

// The vec_dot order: per super-block d_a * d_w * isum - d_a * dmin_w * summs, summed in float.
template <typename B>
float dot_k(int64_t n, const void* wv, const void* av) {
  const B* w = static_cast<const B*>(wv);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const KSums s = KTraits<B>::sums(w[i], a[i]);
    if constexpr (KTraits<B>::kMin) {
      const float d = a[i].d * f16_to_f32(w[i].d), dmin = a[i].d * dmin_of(w[i]);
      sum += d * static_cast<float>(s.isum) - dmin * static_cast<float>(s.summs);
    } else {
      sum += f16_to_f32(w[i].d) * a[i].d * static_cast<float>(s.isum);
    }
  }
  return sum;
}

// ggml's tiled K-quant matmul (ggml-cpu/tiled, batches of >= 8 rows): per super-block
// r = d_w * isum (minus dmin_w * summs, fused), then acc = fma(r, d_a, acc).
template <typename B>
float dot_k_tiled(int64_t n, const void* wv, const void* av) {
  const B* w = static_cast<const B*>(wv);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(av);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const KSums s = KTraits<B>::sums(w[i], a[i]);
    float r = f16_to_f32(w[i].d) * static_cast<float>(s.isum);
    if constexpr (KTraits<B>::kMin) r = std::fma(-dmin_of(w[i]), static_cast<float>(s.summs), r);
    acc = std::fma(r, a[i].d, acc);
  }
  return acc;
}

// ---- float types, in the lane order of ggml's AVX2 kernels (exact on any machine) ----

// GGML_F32x8_REDUCE of four 8-lane accumulators.
inline float reduce_ggml(const float (&s)[4][8]) {
  float x[8];
  for (int l = 0; l < 8; ++l) x[l] = (s[0][l] + s[2][l]) + (s[1][l] + s[3][l]);
  const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
  return (t0 + t1) + (t2 + t3);
}
inline float hsum8_tree(const float* a) {  // hsum_float_8 / tinyBLAS hsum
  const float t0 = a[4] + a[0], t1 = a[5] + a[1], t2 = a[6] + a[2], t3 = a[7] + a[3];
  return (t0 + t2) + (t1 + t3);
}

template <typename T>
inline float load_as_float(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, float>) return p[i];
  else if constexpr (std::is_same_v<T, uint16_t>) return f16_to_f32(p[i]);
}
inline float bf16_at(const uint16_t* p, int64_t i) { return bf16_to_f32(p[i]); }

// ggml_vec_dot_f32: float accumulation, leftovers added in float.
float dot_f32(int64_t n, const void* wv, const void* av) {
  const float* w = static_cast<const float*>(wv);
  const float* a = static_cast<const float*>(av);
  float acc[4][8] = {};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) acc[j][l] = std::fma(w[i + 8 * j + l], a[i + 8 * j + l], acc[j][l]);
  float s = reduce_ggml(acc);
  for (int64_t i = np; i < n; ++i) s += w[i] * a[i];
  return s;
}

// ggml_vec_dot_f16: double accumulation of the reduced lanes and of the leftover products.
float dot_f16(int64_t n, const void* wv, const void* av) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  const uint16_t* a = static_cast<const uint16_t*>(av);
  float acc[4][8] = {};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l)
        acc[j][l] = std::fma(f16_to_f32(w[i + 8 * j + l]), f16_to_f32(a[i + 8 * j + l]), acc[j][l]);
  double s = reduce_ggml(acc);
  for (int64_t i = np; i < n; ++i) s += static_cast<double>(f16_to_f32(w[i]) * f16_to_f32(a[i]));
  return static_cast<float>(s);
}

// ggml_vec_dot_bf16 (AVX2 flavour): unfused multiply then add, four accumulators.
float dot_bf16(int64_t n, const void* wv, const void* av) {
  const uint16_t* w = static_cast<const uint16_t*>(wv);
  const uint16_t* a = static_cast<const uint16_t*>(av);
  float c[4][8] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) c[j][l] = bf16_at(w, i + 8 * j + l) * bf16_at(a, i + 8 * j + l) + c[j][l];
  float g[8];
  for (int l = 0; l < 8; ++l) g[l] = (c[0][l] + c[2][l]) + (c[1][l] + c[3][l]);
  double s = hsum8_tree(g);
  for (; i < n; ++i) s += static_cast<double>(bf16_at(w, i) * bf16_at(a, i));
  return static_cast<float>(s);
}

// tinyBLAS: one 8-lane fused chain over the row, then its hsum; n must be a multiple of 8
// (callers fall back to the vec_dot order otherwise).
template <int kKind>  // 0 f32, 1 f16, 2 bf16
float dot_tinyblas(int64_t n, const void* wv, const void* av) {
  float acc[8] = {};
  for (int64_t i = 0; i < n; i += 8)
    for (int l = 0; l < 8; ++l) {
      float x, y;
      if constexpr (kKind == 0) {
        x = static_cast<const float*>(wv)[i + l];
        y = static_cast<const float*>(av)[i + l];
      } else if constexpr (kKind == 1) {
        x = f16_to_f32(static_cast<const uint16_t*>(wv)[i + l]);
        y = f16_to_f32(static_cast<const uint16_t*>(av)[i + l]);
      } else {
        x = bf16_to_f32(static_cast<const uint16_t*>(wv)[i + l]);
        y = bf16_to_f32(static_cast<const uint16_t*>(av)[i + l]);
      }
      acc[l] = std::fma(x, y, acc[l]);
    }
  return hsum8_tree(acc);
}

// Q4_K as llama.cpp's repacked x86 kernels compute it: per output, exact integer sums of
// scale * dot (and min * bsum) over a super-block (gemv) or over each pair of sub-blocks (gemm),
// each folded into a float accumulator with one fused multiply-add by d_w * d_a (dmin_w * d_a).
template <int kSubBlocksPerStep>
float dot_q4_K_repacked(int64_t n, const void* wv, const void* av) {
  const BlockQ4_K* w = static_cast<const BlockQ4_K*>(wv);
  const BlockQ8_K* a = static_cast<const BlockQ8_K*>(av);
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(w[i].d) * a[i].d;
    const float dmin = f16_to_f32(w[i].dmin) * a[i].d;
    for (int s0 = 0; s0 < 8; s0 += kSubBlocksPerStep) {
      int isum = 0, imin = 0;
      for (int s = s0; s < s0 + kSubBlocksPerStep; ++s) {
        int sc, m;
        k_scale_min(w[i].scales, s, &sc, &m);
        const uint8_t* q = w[i].qs + (s / 2) * 32;
        int dot = 0;
        for (int l = 0; l < 32; ++l) dot += ((s % 2) ? (q[l] >> 4) : (q[l] & 0x0f)) * a[i].qs[s * 32 + l];
        isum += sc * dot;
        imin += m * (a[i].bsums[2 * s] + a[i].bsums[2 * s + 1]);
      }
      acc = std::fma(static_cast<float>(isum), d, acc);
      acc_min = std::fma(static_cast<float>(imin), dmin, acc_min);
    }
  }
  return acc - acc_min;
}

// FP8 rows without a scale (the caller multiplies); the activation is F32.
float dot_fp8(int64_t n, const void* wv, const void* av) {
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  const float* a = static_cast<const float*>(av);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(fp8_e4m3_to_f32(w[i])) * a[i];
  return static_cast<float>(s);
}

}  // namespace

DType activation_type(DType w) {
  switch (w) {
    case DType::kQ4_0: case DType::kQ5_0: case DType::kQ8_0: return DType::kQ8_0;
    case DType::kQ4_1: case DType::kQ5_1: return DType::kQ8_1;
    case DType::kQ2_K: case DType::kQ3_K: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return DType::kQ8_K;
    case DType::kF16: return DType::kF16;
    case DType::kBF16: return DType::kBF16;
    default: return DType::kF32;
  }
}

bool has_vec_dot(DType w) { return detail::vec_dot_generic(w, DotVariant::kVecDot) != nullptr; }

void quantize_activation(DType w, const float* x, void* y, int64_t n) {
  const DType act = activation_type(w);
  if (cpu_features().level >= SimdLevel::kAvx2 && detail::quantize_activation_avx2(act, x, y, n)) return;
  switch (act) {
    case DType::kQ8_0:
      DUET_CHECK_MSG(n % 32 == 0, "n=%lld", static_cast<long long>(n));
      quantize_q8_0_x86(x, static_cast<BlockQ8_0*>(y), n / 32);
      return;
    case DType::kQ8_1:
      DUET_CHECK_MSG(n % 32 == 0, "n=%lld", static_cast<long long>(n));
      quantize_q8_1_x86(x, static_cast<BlockQ8_1*>(y), n / 32);
      return;
    case DType::kQ8_K: quantize_row_q8_K(x, y, n); return;
    case DType::kF16: {
      uint16_t* h = static_cast<uint16_t*>(y);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(x[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* h = static_cast<uint16_t*>(y);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
      return;
    }
    default: std::memcpy(y, x, n * sizeof(float)); return;
  }
}

namespace detail {
VecDotFn vec_dot_generic(DType w, DotVariant v) {
  if (v == DotVariant::kTinyBlas) {
    if (w == DType::kF32) return dot_tinyblas<0>;
    if (w == DType::kF16) return dot_tinyblas<1>;
    if (w == DType::kBF16) return dot_tinyblas<2>;
  }
  if (v == DotVariant::kTiled) {
    switch (w) {
      case DType::kQ2_K: return dot_k_tiled<BlockQ2_K>;
      case DType::kQ3_K: return dot_k_tiled<BlockQ3_K>;
      case DType::kQ4_K: return dot_k_tiled<BlockQ4_K>;
      case DType::kQ5_K: return dot_k_tiled<BlockQ5_K>;
      case DType::kQ6_K: return dot_k_tiled<BlockQ6_K>;
      default: break;
    }
  }
  if (w == DType::kQ4_K && v == DotVariant::kRepackGemv) return dot_q4_K_repacked<8>;
  if (w == DType::kQ4_K && v == DotVariant::kRepackGemm) return dot_q4_K_repacked<2>;
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
    case DType::kQ2_K: return dot_k<BlockQ2_K>;
    case DType::kQ3_K: return dot_k<BlockQ3_K>;
    case DType::kQ4_K: return dot_k<BlockQ4_K>;
    case DType::kQ5_K: return dot_k<BlockQ5_K>;
    case DType::kQ6_K: return dot_k<BlockQ6_K>;
    default: return nullptr;
  }
}
}  // namespace detail

VecDotFn vec_dot_fn_at(DType w, SimdLevel level, DotVariant v) {
  switch (level) {
    case SimdLevel::kAvx512: return detail::vec_dot_avx512(w, v);
    case SimdLevel::kAvx2: return detail::vec_dot_avx2(w, v);
    case SimdLevel::kGeneric: return detail::vec_dot_generic(w, v);
  }
  return nullptr;
}

VecDotFn vec_dot_fn(DType w, DotVariant v) {
  for (int l = static_cast<int>(cpu_features().level); l >= 0; --l)
    if (VecDotFn f = vec_dot_fn_at(w, static_cast<SimdLevel>(l), v)) return f;
  return nullptr;
}

VecDotMultiFn vec_dot_multi_fn(DType w, DotVariant v) {
  if (cpu_features().level >= SimdLevel::kAvx512)
    if (VecDotMultiFn f = detail::vec_dot_multi_avx512(w, v)) return f;
  if (cpu_features().level >= SimdLevel::kAvx2) return detail::vec_dot_multi_avx2(w, v);
  return nullptr;
}

bool activation_block_scales(DType act, const void* row, int64_t n, float* scales) {
  if (act == DType::kQ8_0) {
    const BlockQ8_0* b = static_cast<const BlockQ8_0*>(row);
    for (int64_t i = 0; i < n / 32; ++i) {
      scales[2 * i] = f16_to_f32(b[i].d);
      scales[2 * i + 1] = 0.0f;
    }
    return true;
  }
  if (act == DType::kQ8_1) {
    const BlockQ8_1* b = static_cast<const BlockQ8_1*>(row);
    for (int64_t i = 0; i < n / 32; ++i) {
      scales[2 * i] = f16_to_f32(b[i].d);
      scales[2 * i + 1] = f16_to_f32(b[i].s);
    }
    return true;
  }
  return false;
}

double vec_dot_dequant(DType w, int64_t n, const void* w_row, const void* a_row) {
  std::vector<float> x(n), y(n);
  dequantize_row(w, w_row, x.data(), n);
  dequantize_row(activation_type(w), a_row, y.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return s;
}

float vec_dot_fp8(int64_t n, const uint8_t* w_row, const float* a_row, const float* scales, int64_t group) {
  const VecDotFn f = vec_dot_fn(DType::kF8_E4M3);
  float s = 0;
  for (int64_t c = 0, g = 0; c < n; c += group, ++g) {
    const int64_t len = n - c < group ? n - c : group;
    s += f(len, w_row + c, a_row + c) * scales[g];
  }
  return s;
}

}  // namespace duet
