// Reference dequantize for every DType and the simple (non-K) quantizers. Each formula is written
// in the same float32 operation order as ggml's reference code (and gguf-py, which mirrors it) so
// results are bit-exact; this file must be compiled without FP contraction (see CMakeLists.txt).
#include "tensor/quantize.h"

#include <cmath>
#include <cstring>

#include "base/check.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace duet {
namespace {

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK4_0) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = d * static_cast<float>((b[i].qs[j] & 0x0f) - 8);
      y[j + kQK4_0 / 2] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK4_1) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = d * static_cast<float>(b[i].qs[j] & 0x0f) + m;
      y[j + kQK4_1 / 2] = d * static_cast<float>(b[i].qs[j] >> 4) + m;
    }
  }
}

template <typename B>
inline int q5_value(const B& b, int j) {  // 5-bit value of element j of a Q5_0/Q5_1 block
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  int lo = j < 16 ? (b.qs[j] & 0x0f) : (b.qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1) << 4);
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK5_0) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK5_0; ++j) y[j] = d * static_cast<float>(q5_value(b[i], j) - 16);
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK5_1) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < kQK5_1; ++j) y[j] = d * static_cast<float>(q5_value(b[i], j)) + m;
  }
}

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void dequant_q8_1(const BlockQ8_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_1) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// Element e of a K super-block (256 values) sits in 32-byte lanes: lane = e % 32, and the group
// index (e / 32) selects which bits of which byte hold it; each function spells that mapping out.
void dequant_q2_K(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const int s = e / 16;
      const float dl = d * static_cast<float>(b[i].scales[s] & 0x0f);
      const float ml = dmin * static_cast<float>(b[i].scales[s] >> 4);
      const int q = (b[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      y[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

int q3_K_scale(const uint8_t* sc, int j) {  // 6-bit scale j of 16, minus 32
  int lo = j < 8 ? (sc[j] & 0x0f) : (sc[j - 8] >> 4);
  int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

void dequant_q3_K(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = f16_to_f32(b[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * static_cast<float>(q3_K_scale(b[i].scales, e / 16));
      const int lo = (b[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const int h = (b[i].hmask[e % 32] >> (e / 32)) & 1;
      y[e] = dl * static_cast<float>(lo - (h ? 0 : 4));  // high bit clear means offset -4
    }
  }
}

void k_scale_min(const uint8_t* s, int j, int* sc, int* m) {  // 6-bit scale/min j of 8
  if (j < 4) {
    *sc = s[j] & 0x3f;
    *m = s[j + 4] & 0x3f;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 2) & 0x30);
    *m = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

void dequant_q4_K(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      k_scale_min(b[i].scales, s, &sc, &m);
      const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
      const uint8_t* q = b[i].qs + (s / 2) * 32;
      for (int l = 0; l < 32; ++l) {
        const int v = (s % 2) ? (q[l] >> 4) : (q[l] & 0x0f);
        y[s * 32 + l] = ds * static_cast<float>(v) - dm;
      }
    }
  }
}

void dequant_q5_K(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int s = 0; s < 8; ++s) {
      int sc, m;
      k_scale_min(b[i].scales, s, &sc, &m);
      const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
      const uint8_t* q = b[i].qs + (s / 2) * 32;
      for (int l = 0; l < 32; ++l) {
        const int v = ((s % 2) ? (q[l] >> 4) : (q[l] & 0x0f)) | (((b[i].qh[l] >> s) & 1) << 4);
        y[s * 32 + l] = ds * static_cast<float>(v) - dm;
      }
    }
  }
}

void dequant_q6_K(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = f16_to_f32(b[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, r = e % 128;
      const int lo = (b[i].ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
      const int hi = (b[i].qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
      const float ds = d * static_cast<float>(b[i].scales[e / 16]);
      y[e] = ds * static_cast<float>((lo | (hi << 4)) - 32);
    }
  }
}

void dequant_q8_K(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K)
    for (int j = 0; j < kQK_K; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
}

// Index of the first element with the largest magnitude (numpy argmax of abs).
int argmax_abs(const float* x, int n) {
  int best = 0;
  float amax = std::fabs(x[0]);
  for (int j = 1; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      best = j;
    }
  return best;
}

void quant_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK4_0) {
    const float d = x[argmax_abs(x, kQK4_0)] / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      int q0 = static_cast<int>(std::trunc(x[j] * id + 8.5f));
      int q1 = static_cast<int>(std::trunc(x[j + kQK4_0 / 2] * id + 8.5f));
      q0 = q0 < 0 ? 0 : (q0 > 15 ? 15 : q0);
      q1 = q1 < 0 ? 0 : (q1 > 15 ? 15 : q1);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

template <typename B, int kMaxQ>
void quant_min_max(const float* x, B* y, int64_t nb, uint8_t* q) {  // shared by Q4_1 / Q5_1
  for (int64_t i = 0; i < nb; ++i, x += 32, q += 32) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; ++j) {
      mn = x[j] < mn ? x[j] : mn;
      mx = x[j] > mx ? x[j] : mx;
    }
    const float d = (mx - mn) / static_cast<float>(kMaxQ);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mn);
    for (int j = 0; j < 32; ++j) {
      int v = static_cast<int>(std::trunc((x[j] - mn) * id + 0.5f));
      q[j] = static_cast<uint8_t>(v < 0 ? 0 : (v > kMaxQ ? kMaxQ : v));
    }
  }
}

template <typename B>
void pack_q5(B* y, const uint8_t* q) {  // q: 32 five-bit values
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) y->qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j + 16] << 4));
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(y->qh, &qh, 4);
}

void quant_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t i = 0; i < nb; ++i, x += kQK5_0) {
    const float d = x[argmax_abs(x, kQK5_0)] / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) {
      int v = static_cast<int>(std::trunc(x[j] * id + 16.5f));
      q[j] = static_cast<uint8_t>(v < 0 ? 0 : (v > 31 ? 31 : v));
    }
    pack_q5(&y[i], q);
  }
}

void quant_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quant_q8_1(const float* x, BlockQ8_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK8_1) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_1; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK8_1; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].d = f32_to_f16(d);
    y[i].s = f32_to_f16(static_cast<float>(sum) * d);
  }
}

}  // namespace

bool can_dequantize(DType t) {
  switch (t) {
    case DType::kI8: case DType::kI16: case DType::kI32: case DType::kI64: case DType::kF64:
      return false;
    default:
      return true;
  }
}

bool can_quantize(DType t) { return can_dequantize(t); }

void dequantize_row(DType t, const void* src, float* y, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  DUET_CHECK_MSG(n % info.block_size == 0, "n=%lld not a multiple of %u", (long long)n,
                 info.block_size);
  const int64_t nb = n / info.block_size;
  switch (t) {
    case DType::kF32: std::memcpy(y, src, n * 4); return;
    case DType::kF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::kF8_E4M3: {
      const uint8_t* h = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = fp8_e4m3_to_f32(h[i]);
      return;
    }
    case DType::kQ4_0: dequant_q4_0(static_cast<const BlockQ4_0*>(src), y, nb); return;
    case DType::kQ4_1: dequant_q4_1(static_cast<const BlockQ4_1*>(src), y, nb); return;
    case DType::kQ5_0: dequant_q5_0(static_cast<const BlockQ5_0*>(src), y, nb); return;
    case DType::kQ5_1: dequant_q5_1(static_cast<const BlockQ5_1*>(src), y, nb); return;
    case DType::kQ8_0: dequant_q8_0(static_cast<const BlockQ8_0*>(src), y, nb); return;
    case DType::kQ8_1: dequant_q8_1(static_cast<const BlockQ8_1*>(src), y, nb); return;
    case DType::kQ2_K: dequant_q2_K(static_cast<const BlockQ2_K*>(src), y, nb); return;
    case DType::kQ3_K: dequant_q3_K(static_cast<const BlockQ3_K*>(src), y, nb); return;
    case DType::kQ4_K: dequant_q4_K(static_cast<const BlockQ4_K*>(src), y, nb); return;
    case DType::kQ5_K: dequant_q5_K(static_cast<const BlockQ5_K*>(src), y, nb); return;
    case DType::kQ6_K: dequant_q6_K(static_cast<const BlockQ6_K*>(src), y, nb); return;
    case DType::kQ8_K: dequant_q8_K(static_cast<const BlockQ8_K*>(src), y, nb); return;
    default: DUET_CHECK_MSG(false, "dequantize: unsupported type %s", dtype_name(t).data());
  }
}

void quantize_row(DType t, const float* x, void* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  DUET_CHECK_MSG(n % info.block_size == 0, "n=%lld not a multiple of %u", (long long)n,
                 info.block_size);
  const int64_t nb = n / info.block_size;
  uint8_t q[32 * 64];
  switch (t) {
    case DType::kF32: std::memcpy(dst, x, n * 4); return;
    case DType::kF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(x[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
      return;
    }
    case DType::kF8_E4M3: {
      uint8_t* h = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp8_e4m3(x[i]);
      return;
    }
    case DType::kQ4_0: quant_q4_0(x, static_cast<BlockQ4_0*>(dst), nb); return;
    case DType::kQ4_1:
    case DType::kQ5_1: {
      // Chunks of 64 blocks through a small stack buffer of unpacked values.
      for (int64_t i0 = 0; i0 < nb; i0 += 64) {
        const int64_t cnt = nb - i0 < 64 ? nb - i0 : 64;
        if (t == DType::kQ4_1) {
          BlockQ4_1* y = static_cast<BlockQ4_1*>(dst) + i0;
          quant_min_max<BlockQ4_1, 15>(x + i0 * 32, y, cnt, q);
          for (int64_t b = 0; b < cnt; ++b)
            for (int j = 0; j < 16; ++j)
              y[b].qs[j] = static_cast<uint8_t>(q[b * 32 + j] | (q[b * 32 + j + 16] << 4));
        } else {
          BlockQ5_1* y = static_cast<BlockQ5_1*>(dst) + i0;
          quant_min_max<BlockQ5_1, 31>(x + i0 * 32, y, cnt, q);
          for (int64_t b = 0; b < cnt; ++b) pack_q5(&y[b], q + b * 32);
        }
      }
      return;
    }
    case DType::kQ5_0: quant_q5_0(x, static_cast<BlockQ5_0*>(dst), nb); return;
    case DType::kQ8_0: quant_q8_0(x, static_cast<BlockQ8_0*>(dst), nb); return;
    case DType::kQ8_1: quant_q8_1(x, static_cast<BlockQ8_1*>(dst), nb); return;
    case DType::kQ2_K: quantize_row_q2_K(x, dst, n); return;
    case DType::kQ3_K: quantize_row_q3_K(x, dst, n); return;
    case DType::kQ4_K: quantize_row_q4_K(x, dst, n); return;
    case DType::kQ5_K: quantize_row_q5_K(x, dst, n); return;
    case DType::kQ6_K: quantize_row_q6_K(x, dst, n); return;
    case DType::kQ8_K: quantize_row_q8_K(x, dst, n); return;
    default: DUET_CHECK_MSG(false, "quantize: unsupported type %s", dtype_name(t).data());
  }
}

// File weight e is nibble (e >> 5) & 1 of qs byte 32 (e >> 6) + (e & 31), so both halves of the
// new byte 16p + i come from nibble s = (p >> 1) & 1 of file bytes 32 (p >> 2) + 16 (p & 1) + i
// (weight 16p + i) and 64 bytes further (weight 128 + 16p + i).
void repack_q4_K_for_gpu(const void* src, void* dst) {
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  std::memcpy(out, in, 16);  // d, dmin, scales[12]
  const uint8_t* qs = in + 16;
  for (int p = 0; p < 8; ++p) {
    const int s = 4 * ((p >> 1) & 1);
    const uint8_t* lo = qs + 32 * (p >> 2) + 16 * (p & 1);
    const uint8_t* hi = lo + 64;
    for (int i = 0; i < 16; ++i)
      out[16 + 16 * p + i] =
          static_cast<uint8_t>(((lo[i] >> s) & 0x0f) | (((hi[i] >> s) & 0x0f) << 4));
  }
}

}  // namespace duet
