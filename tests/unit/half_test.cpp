// Scalar float conversions: exhaustive where the domain is small, round-to-nearest-even checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tensor/dtype.h"
#include "tensor/half.h"

namespace duet {
namespace {

TEST(Half, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(Half, F16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);            // rounds to inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(Half, Fp8E4M3RoundTripsEveryValue) {
  for (uint32_t v = 0; v < 256; ++v) {
    float f = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(f), v) << v;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f32_to_fp8_e4m3(1e9f), 0x7e);   // saturates
  EXPECT_EQ(f32_to_fp8_e4m3(-1e9f), 0xfe);
}

TEST(Half, Bf16) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000)), 0x3f82);
}

TEST(Half, Bf16ToF16CountsOverflow) {
  // 1.0, 65280 (F16-exact), 65536 (past F16: inf, counted), -1e5 (counted), +inf and NaN (kept,
  // not counted), 2^-30 (below F16's smallest subnormal: 0), unaligned source.
  const uint16_t in[] = {0x3f80, 0x477f, 0x4780, 0xc7c3, 0x7f80, 0x7fc0, 0x3080};
  uint8_t bytes[1 + sizeof(in)];
  std::memcpy(bytes + 1, in, sizeof(in));
  uint16_t out[7];
  EXPECT_EQ(bf16_to_f16_n(bytes + 1, out, 7), 2u);
  EXPECT_EQ(out[0], 0x3c00);
  EXPECT_EQ(f16_to_f32(out[1]), 65280.0f);
  EXPECT_EQ(out[2], 0x7c00);
  EXPECT_EQ(out[3], 0xfc00);
  EXPECT_EQ(out[4], 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_f32(out[5])));
  EXPECT_EQ(out[6], 0x0000);
  EXPECT_EQ(bf16_to_f16_n(bytes + 1, out, 2), 0u);  // the first two fit
  // The bound agrees with f32_to_f16 itself: 65519.996 is the last float to round to 65504.
  EXPECT_FALSE(f16_overflows(std::nextafter(65520.0f, 0.0f)));
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_TRUE(f16_overflows(65520.0f));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_TRUE(f16_overflows(-1e30f));
  EXPECT_FALSE(f16_overflows(INFINITY));
}

TEST(DType, TableSizes) {
  EXPECT_EQ(dtype_info(DType::kQ4_K).type_size, 144u);
  EXPECT_EQ(dtype_info(DType::kQ4_K).block_size, 256u);
  EXPECT_EQ(*row_bytes(DType::kQ8_0, 64), 68u);
  EXPECT_FALSE(row_bytes(DType::kQ8_0, 48).has_value());
  EXPECT_FALSE(dtype_info(4u).has_value());  // removed GGML id
  EXPECT_EQ(*dtype_from_name("q4_k"), DType::kQ4_K);
}

}  // namespace
}  // namespace duet
