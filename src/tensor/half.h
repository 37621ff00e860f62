// Scalar conversions between float and the 8/16-bit float formats (F16, BF16, FP8 E4M3).
// Header-only and host/device neutral. Rounding: round-to-nearest-even everywhere, matching
// numpy's astype(float16), ggml's GGML_FP32_TO_BF16 and the OCP FP8 E4M3 ("fn") spec.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace duet {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000 | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // Subnormal: value = mant * 2^-24, exact in float.
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return sign | 0x7e00 | static_cast<uint16_t>((ax >> 13) & 0x3ff);  // nan
  if (ax >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65536 -> inf
  if (ax < 0x38800000) {                       // below smallest normal half: subnormal or zero
    if (ax < 0x33000000) return sign;          // < 2^-25 rounds to zero (2^-25 itself ties to 0)
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e;  // aligns to units of 2^-24
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  uint32_t q = ax - 0x38000000;  // rebias exponent: 127 -> 15
  uint32_t rem = q & 0x1fff;
  q >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) ++q;
  return sign | static_cast<uint16_t>(q);
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// Whether f32_to_f16 turns a finite f into an infinity: |f| >= 65520 rounds past F16's largest
// finite value, 65504.
inline bool f16_overflows(float f) { return std::isfinite(f) && std::fabs(f) >= 65520.0f; }

// n BF16 values (2 bytes each, any alignment) to F16, rounded to nearest even. Returns how many
// finite inputs became infinities (f16_overflows): the caller's cue that F16 cannot hold the
// tensor. Infinite and NaN inputs stay what they are.
inline size_t bf16_to_f16_n(const uint8_t* src, uint16_t* dst, size_t n) {
  size_t overflow = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, src + 2 * i, 2);
    const float v = bf16_to_f32(b);
    overflow += f16_overflows(v);
    dst[i] = f32_to_f16(v);
  }
  return overflow;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t n = f32_bits(f);
  if ((n & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((n >> 16) | 64);  // quiet nan
  return static_cast<uint16_t>((static_cast<uint64_t>(n) + (0x7fff + ((n >> 16) & 1))) >> 16);
}

// FP8 E4M3 (fn): bias 7, no infinities, 0x7f/0xff are NaN, max finite 448.
inline float fp8_e4m3_to_f32(uint8_t v) {
  uint32_t sign = static_cast<uint32_t>(v & 0x80) << 24;
  uint32_t exp = (v >> 3) & 0xf;
  uint32_t mant = v & 0x7;
  if (exp == 0xf && mant == 0x7) return f32_from_bits(sign | 0x7fc00000);
  if (exp == 0) {
    float r = static_cast<float>(mant) * 0.001953125f;  // mant * 2^-9
    return sign ? -r : r;
  }
  return f32_from_bits(sign | ((exp + 120) << 23) | (mant << 20));
}

// Saturating: |f| beyond 448 becomes +-448 (what FP8 quantizers do after scaling); NaN stays NaN.
inline uint8_t f32_to_fp8_e4m3(float f) {
  uint32_t x = f32_bits(f);
  uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80);
  uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return sign | 0x7f;
  if (ax >= 0x43e00000) return sign | 0x7e;  // >= 448
  if (ax < 0x3c800000) {  // below 2^-6: subnormal range, units of 2^-9
    float a = f32_from_bits(ax) * 512.0f;  // exact scaling by a power of two
    float r = std::nearbyint(a);           // default rounding mode: ties to even
    return sign | static_cast<uint8_t>(r);  // r == 8 encodes the smallest normal, as it should
  }
  uint32_t q = ax - (120u << 23);  // rebias 127 -> 7
  uint32_t rem = q & 0xfffff;
  q >>= 20;
  if (rem > 0x80000 || (rem == 0x80000 && (q & 1))) ++q;
  if (q > 0x7e) q = 0x7e;
  return sign | static_cast<uint8_t>(q);
}

}  // namespace duet
