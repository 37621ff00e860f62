// Paged attention (see attention.h): the driver, the lane-order reductions, and scalar kernels
// (std::fma keeps each lane's fused multiply-adds identical to the SIMD ones). Keys are visited
// block by block through the block table; inside a block a head's keys are contiguous rows.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "tensor/half.h"

namespace duet {
namespace {

inline float hsum8_tree(const float* a) {  // tinyBLAS hsum / the softmax chunk sum
  const float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
  return (t0 + t2) + (t1 + t3);
}

inline float reduce32_ggml(const float* s0, const float* s1, const float* s2, const float* s3) {
  // GGML_F32x8_REDUCE of four accumulators: (s0 + s2) + (s1 + s3), low + high halves, two hadds.
  float x[8];
  for (int l = 0; l < 8; ++l) x[l] = (s0[l] + s2[l]) + (s1[l] + s3[l]);
  const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
  return (t0 + t1) + (t2 + t3);
}

template <typename T>
inline float ld(const T* p, int64_t i) {
  if constexpr (sizeof(T) == 2) return f16_to_f32(p[i]);
  else return p[i];
}

template <typename T>
void scores_generic(AttnOrder order, int64_t hd, const void* kv, size_t stride, int64_t n, const void* qv, float scale,
                    float* out) {
  const T* q = static_cast<const T*>(qv);
  for (int64_t r = 0; r < n; ++r) {
    const T* k = static_cast<const T*>(kv) + r * stride;
    float dot;
    if (order == AttnOrder::kBatch) {
      float acc[8] = {};
      for (int64_t c = 0; c < hd; c += 8)
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(ld(k, c + l), ld(q, c + l), acc[l]);
      dot = hsum8_tree(acc);
    } else {
      float acc[4][8] = {};
      const int64_t np = hd & ~int64_t{31};
      for (int64_t c = 0; c < np; c += 32)
        for (int a = 0; a < 4; ++a)
          for (int l = 0; l < 8; ++l) acc[a][l] = std::fma(ld(k, c + 8 * a + l), ld(q, c + 8 * a + l), acc[a][l]);
      double s = reduce32_ggml(acc[0], acc[1], acc[2], acc[3]);
      for (int64_t c = np; c < hd; ++c) s += static_cast<double>(ld(k, c) * ld(q, c));
      dot = static_cast<float>(s);
    }
    out[r] = dot * scale;
  }
}

template <typename T>
void accumulate_generic(int64_t hd, const void* vv, size_t stride, int64_t n, int64_t j0, int lanes, const float* p,
                        float* acc) {
  for (int64_t r = 0; r < n; ++r) {
    const T* v = static_cast<const T*>(vv) + r * stride;
    float* a = acc + ((j0 + r) % lanes) * hd;
    const float w = p[r];
    for (int64_t d = 0; d < hd; ++d) a[d] = std::fma(ld(v, d), w, a[d]);
  }
}

void exp_sub_generic(const float* x, float max, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ggml_expf(x[i] - max);
}

void normalize_generic(float* p, int64_t n, float inv, bool round_f16) {
  for (int64_t j = 0; j < n; ++j) {
    p[j] *= inv;
    if (round_f16) p[j] = f16_to_f32(f32_to_f16(p[j]));
  }
}

void reduce_lanes_generic(const float* acc, int lanes, int64_t hd, float* out) {
  for (int64_t d = 0; d < hd; ++d) {
    float a[32];
    for (int l = 0; l < lanes; ++l) a[l] = acc[l * hd + d];
    out[d] = lanes == 8 ? hsum8_tree(a) : reduce32_ggml(a, a + 8, a + 16, a + 24);
  }
}

const detail::AttnKernels kGenericF16{scores_generic<uint16_t>, accumulate_generic<uint16_t>, exp_sub_generic,
                                      normalize_generic, reduce_lanes_generic};
const detail::AttnKernels kGenericF32{scores_generic<float>, accumulate_generic<float>, exp_sub_generic,
                                      normalize_generic, reduce_lanes_generic};

const detail::AttnKernels& kernels_for(DType t) {
  if (cpu_features().level >= SimdLevel::kAvx2) {
    const detail::AttnKernels* k = t == DType::kF16 ? detail::attn_kernels_avx2_f16() : detail::attn_kernels_avx2_f32();
    if (k) return *k;
  }
  return t == DType::kF16 ? kGenericF16 : kGenericF32;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

float ggml_expf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = bits(z) << 23;
  const float k = from_bits(e + bits(1.0f));
  const bool c = std::fabs(n) > 126.0f;
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!c) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = from_bits(g + 0x7f000000u);
  const float s2 = from_bits(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

void kv_write(const PagedKvLayer& kv, const int32_t* block_table, int64_t pos, const float* k, const float* v) {
  const int32_t block = block_table[pos / kv.kv_block_size];
  const int64_t slot = pos % kv.kv_block_size;
  for (int64_t h = 0; h < kv.n_kv_heads; ++h) {
    const size_t off = kv.slot_offset(block, h, slot);
    const float* kh = k + h * kv.head_dim;
    const float* vh = v + h * kv.head_dim;
    if (kv.dtype == DType::kF16) {
      uint16_t* kd = static_cast<uint16_t*>(kv.k) + off;
      uint16_t* vd = static_cast<uint16_t*>(kv.v) + off;
      for (int64_t i = 0; i < kv.head_dim; ++i) {
        kd[i] = f32_to_f16(kh[i]);
        vd[i] = f32_to_f16(vh[i]);
      }
    } else {
      std::memcpy(static_cast<float*>(kv.k) + off, kh, kv.head_dim * 4);
      std::memcpy(static_cast<float*>(kv.v) + off, vh, kv.head_dim * 4);
    }
  }
}

size_t attention_scratch_floats(int64_t head_dim, int64_t group, int64_t n_keys) {
  return static_cast<size_t>(group * head_dim + group * n_keys + 32 * head_dim + 8);
}

void attention_paged(const PagedKvLayer& kv, const int32_t* block_table, int64_t kv_head, int64_t k_begin,
                     int64_t k_end, const float* q, int64_t group, float scale, AttnOrder order, float* out,
                     float* scratch) {
  const int64_t hd = kv.head_dim;
  const int64_t n_keys = k_end - k_begin;
  const bool f16 = kv.dtype == DType::kF16;
  const detail::AttnKernels& K = kernels_for(kv.dtype);
  float* qbuf = scratch;                   // group x head_dim (F16 bits or floats)
  float* scores = qbuf + group * hd;       // group x n_keys
  float* acc = scores + group * n_keys;    // lanes x head_dim
  const size_t qrow_bytes = hd * (f16 ? 2 : 4);
  if (f16) {
    uint16_t* qh = reinterpret_cast<uint16_t*>(qbuf);
    for (int64_t i = 0; i < group * hd; ++i) qh[i] = f32_to_f16(q[i]);
  } else {
    std::memcpy(qbuf, q, group * hd * 4);
  }
  const size_t eb = kv.elem_bytes();
  const uint8_t* kbase = static_cast<const uint8_t*>(kv.k);
  const uint8_t* vbase = static_cast<const uint8_t*>(kv.v);
  // Visits the keys block by block: fn(first position, count, row pointer).
  auto for_blocks = [&](const uint8_t* base, auto&& fn) {
    for (int64_t p = k_begin; p < k_end;) {
      const int32_t block = block_table[p / kv.kv_block_size];
      const int64_t slot0 = p % kv.kv_block_size;
      const int64_t n = std::min<int64_t>(kv.kv_block_size - slot0, k_end - p);
      fn(p, n, base + kv.slot_offset(block, kv_head, slot0) * eb);
      p += n;
    }
  };
  for (int64_t g = 0; g < group; ++g) {
    const uint8_t* qg = reinterpret_cast<const uint8_t*>(qbuf) + g * qrow_bytes;
    float* s = scores + g * n_keys;
    for_blocks(kbase, [&](int64_t p, int64_t n, const uint8_t* rows) {
      K.scores(order, hd, rows, static_cast<size_t>(hd), n, qg, scale, s + (p - k_begin));
    });
    // Softmax: exponentials, then their sum over 8-key chunks aligned to absolute positions
    // (the chunks llama.cpp's padded rows are summed in), each chunk summed as a tree.
    float mx = -INFINITY;
    for (int64_t j = 0; j < n_keys; ++j) mx = std::max(mx, s[j]);
    K.exp_sub(s, mx, s, n_keys);
    double sum = 0;
    for (int64_t c = k_begin & ~int64_t{7}; c < k_end; c += 8) {
      float lane[8];
      for (int l = 0; l < 8; ++l) {
        const int64_t j = c + l;
        lane[l] = j >= k_begin && j < k_end ? s[j - k_begin] : 0.0f;
      }
      sum += static_cast<double>(hsum8_tree(lane));
    }
    K.normalize(s, n_keys, static_cast<float>(1.0 / sum), f16);
    // Weighted sum of values, lane = absolute position mod 8 (tinyBLAS) or mod 32 (vec_dot).
    const int lanes = order == AttnOrder::kBatch ? 8 : 32;
    std::memset(acc, 0, static_cast<size_t>(lanes) * hd * 4);
    for_blocks(vbase, [&](int64_t p, int64_t n, const uint8_t* rows) {
      K.accumulate(hd, rows, static_cast<size_t>(hd), n, p, lanes, s + (p - k_begin), acc);
    });
    K.reduce_lanes(acc, lanes, hd, out + g * hd);
  }
}

}  // namespace duet
