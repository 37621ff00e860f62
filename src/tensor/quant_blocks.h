// Quantized block layouts, defined once for CPU and CUDA code (plain structs, no methods, so
// they compile under nvcc too). Byte-compatible with GGUF files written by llama.cpp.
// Halves are stored as raw uint16_t bits; convert with tensor/half.h.
#pragma once

#include <cstdint>

namespace duet {

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK8_1 = 32;
constexpr int kQK_K = 256;        // super-block size of the K-quants
constexpr int kKScaleSize = 12;   // packed 6-bit scales+mins of Q4_K/Q5_K

struct BlockQ4_0 {  // x = d * (q - 8)
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];  // element j in low nibble of qs[j], element j+16 in high nibble
};
struct BlockQ4_1 {  // x = d * q + m
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
struct BlockQ5_0 {  // x = d * (q - 16), q = nibble | (bit << 4)
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
struct BlockQ8_1 {  // s = d * sum(qs)
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_1];
};
struct BlockQ2_K {  // 16 sub-blocks of 16; scales: low nibble scale, high nibble min
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {  // 16 sub-blocks of 16, 6-bit signed scales (offset 32)
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
struct BlockQ4_K {  // 8 sub-blocks of 32, 6-bit scales and mins
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {  // 16 sub-blocks of 16, int8 scales, q in [-32, 31]
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {  // activation-side block for K-quant dot products
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace duet
