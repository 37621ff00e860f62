// Parity table for the quantized dot products: for every weight type, random rows are quantized
// with the reference quantizer, then each SIMD level's dot product (every summation-order
// variant) must equal the dequantized
// double-precision reference to float rounding of the block sums; the generic integer code must
// too. Also checks the activation quantizers round like ggml's x86 code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_dot.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<uint8_t> quantized(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(*row_bytes(t, x.size()));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

struct Case {
  DType w;
  int64_t n;
};

class QuantDotTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantDotTest, EveryLevelMatchesDequantizedReference) {
  const Case c = GetParam();
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const auto wf = gaussian(c.n, seed);
    const auto af = gaussian(c.n, seed + 100, seed == 5 ? 50.0f : 1.0f);
    const auto wq = quantized(c.w, wf);
    std::vector<uint8_t> aq(*row_bytes(activation_type(c.w), c.n));
    quantize_activation(c.w, af.data(), aq.data(), c.n);
    const double ref = vec_dot_dequant(c.w, c.n, wq.data(), aq.data());
    double mag = 0;  // scale of the rounding error: sum of |products|
    {
      std::vector<float> x(c.n), y(c.n);
      dequantize_row(c.w, wq.data(), x.data(), c.n);
      dequantize_row(activation_type(c.w), aq.data(), y.data(), c.n);
      for (int64_t i = 0; i < c.n; ++i) mag += std::fabs(static_cast<double>(x[i]) * y[i]);
    }
    if (activation_type(c.w) == DType::kQ8_1) {
      // ggml uses the block's F16 sum s = f16(d * sum(q)) for the min term: allow its rounding.
      const size_t wb = dtype_info(c.w).type_size;
      for (int64_t b = 0; b < c.n / 32; ++b) {
        uint16_t m;
        std::memcpy(&m, wq.data() + b * wb + 2, 2);
        const auto* ab = reinterpret_cast<const BlockQ8_1*>(aq.data()) + b;
        mag += std::fabs(f16_to_f32(m) * f16_to_f32(ab->s)) * (1.0 / 1024) / 2e-6;
      }
    }
    for (SimdLevel l : {SimdLevel::kGeneric, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
      if (l > cpu_features().level) continue;
      for (DotVariant v : {DotVariant::kVecDot, DotVariant::kTinyBlas, DotVariant::kRepackGemv,
                           DotVariant::kRepackGemm, DotVariant::kTiled}) {
        if (v == DotVariant::kTinyBlas && c.n % 8 != 0) continue;  // tinyBLAS needs whole vectors
        VecDotFn f = vec_dot_fn_at(c.w, l, v);
        if (!f) continue;
        const double got = f(c.n, wq.data(), aq.data());
        EXPECT_NEAR(got, ref, 2e-6 * mag + 1e-30) << dtype_name(c.w) << " n=" << c.n << " level=" << simd_level_name(l)
                                                  << " variant=" << static_cast<int>(v) << " seed=" << seed;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, QuantDotTest,
    ::testing::Values(Case{DType::kF32, 96}, Case{DType::kF32, 1000}, Case{DType::kF16, 64}, Case{DType::kF16, 1003},
                      Case{DType::kBF16, 512}, Case{DType::kBF16, 37}, Case{DType::kQ4_0, 1024}, Case{DType::kQ4_1, 576},
                      Case{DType::kQ5_0, 640}, Case{DType::kQ5_1, 1024}, Case{DType::kQ8_0, 2048},
                      Case{DType::kQ2_K, 512}, Case{DType::kQ3_K, 512}, Case{DType::kQ4_K, 1024}, Case{DType::kQ5_K, 768},
                      Case{DType::kQ6_K, 2048}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return std::string(dtype_name(i.param.w)) + "_" + std::to_string(i.param.n);
    });

TEST(QuantDot, Fp8RowWithGroupScales) {
  const int64_t n = 300;
  auto wf = gaussian(n, 7);
  std::vector<uint8_t> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = f32_to_fp8_e4m3(wf[i] * 100.0f);
  auto a = gaussian(n, 8);
  const float scales[3] = {0.01f, 0.02f, 0.5f};
  double ref = 0;
  for (int64_t i = 0; i < n; ++i) ref += static_cast<double>(fp8_e4m3_to_f32(w[i])) * scales[i / 128] * a[i];
  EXPECT_NEAR(vec_dot_fp8(n, w.data(), a.data(), scales, 128), ref, 1e-4 * std::fabs(ref) + 1e-4);
}

TEST(QuantDot, ActivationQ8_0RoundsHalfToEvenLikeGgmlX86) {
  // amax 127 -> id = 1: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0 (ties to even, not away).
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 0.5f;
  x[2] = 1.5f;
  x[3] = 2.5f;
  x[4] = -0.5f;
  BlockQ8_0 b;
  quantize_activation(DType::kQ4_0, x.data(), &b, 32);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 0);
  EXPECT_EQ(b.qs[2], 2);
  EXPECT_EQ(b.qs[3], 2);
  EXPECT_EQ(b.qs[4], 0);
  EXPECT_EQ(f16_to_f32(b.d), f16_to_f32(f32_to_f16(1.0f)));
  BlockQ8_1 b1;
  quantize_activation(DType::kQ4_1, x.data(), &b1, 32);
  EXPECT_EQ(f16_to_f32(b1.s), 131.0f);  // (127 + 0 + 2 + 2 + 0) * d
}

// The SIMD Q8_K quantizer equals the reference one (ggml's quantize_row_q8_K) byte for byte,
// including all-zero blocks and ties for the largest magnitude.
TEST(QuantDot, ActivationQ8_KSimdEqualsReference) {
  const int64_t n = 4 * kQK_K;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    auto x = gaussian(n, seed, seed % 3 ? 1.0f : 300.0f);
    for (int64_t i = 0; i < kQK_K; ++i) x[i] = 0.0f;           // block 0: zeros
    x[kQK_K + 5] = 7.0f, x[kQK_K + 9] = -7.0f;                    // block 1: tie, positive first
    x[2 * kQK_K + 3] = -9.0f, x[2 * kQK_K + 200] = 9.0f;          // block 2: tie, negative first
    x[3 * kQK_K + 17] = 1e-3f * seed;
    std::vector<uint8_t> simd(*row_bytes(DType::kQ8_K, n)), ref(simd.size());
    quantize_activation(DType::kQ6_K, x.data(), simd.data(), n);
    quantize_row_q8_K(x.data(), ref.data(), n);
    ASSERT_EQ(std::memcmp(simd.data(), ref.data(), simd.size()), 0) << "seed " << seed;
  }
}

TEST(QuantDot, ActivationTypes) {
  EXPECT_EQ(activation_type(DType::kQ4_0), DType::kQ8_0);
  EXPECT_EQ(activation_type(DType::kQ5_1), DType::kQ8_1);
  EXPECT_EQ(activation_type(DType::kQ6_K), DType::kQ8_K);
  EXPECT_EQ(activation_type(DType::kF16), DType::kF16);
  EXPECT_EQ(activation_type(DType::kBF16), DType::kBF16);
  EXPECT_EQ(activation_type(DType::kF8_E4M3), DType::kF32);
  EXPECT_FALSE(has_vec_dot(DType::kI32));
  EXPECT_FALSE(has_vec_dot(DType::kQ8_K));
}

}  // namespace
}  // namespace duet

namespace duet {
namespace {

// The multi-row kernels must give, row by row, the very bits of the single-row kernel.
TEST(QuantDot, MultiRowKernelsEqualSingleRow) {
  const DType types[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                         DType::kQ4_K, DType::kQ6_K};
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (DType t : types) {
    for (DotVariant v : {DotVariant::kVecDot, DotVariant::kRepackGemv, DotVariant::kRepackGemm, DotVariant::kTiled}) {
      const VecDotMultiFn multi = vec_dot_multi_fn(t, v);
      if (!multi) continue;
      const VecDotFn single = vec_dot_fn(t, v);
      const int64_t n = 1024;
      std::vector<float> w(n);
      for (auto& x : w) x = nd(rng);
      std::vector<uint8_t> wq(*row_bytes(t, n));
      quantize_row(t, w.data(), wq.data(), n);
      const DType act = activation_type(t);
      const size_t ab = *row_bytes(act, n);
      std::vector<uint8_t> a(ab * kMaxDotRows);
      std::vector<float> scales(kMaxDotRows * (n / 32) * 2);
      const void* rows[kMaxDotRows];
      const float* sc[kMaxDotRows];
      for (int r = 0; r < kMaxDotRows; ++r) {
        std::vector<float> x(n);
        for (auto& e : x) e = nd(rng) * (r + 1);
        quantize_activation(t, x.data(), &a[r * ab], n);
        activation_block_scales(act, &a[r * ab], n, &scales[r * (n / 32) * 2]);
        rows[r] = &a[r * ab];
        sc[r] = &scales[r * (n / 32) * 2];
      }
      for (int n_a = 1; n_a <= kMaxDotRows; ++n_a) {
        float out[kMaxDotRows];
        multi(n, wq.data(), rows, sc, n_a, out);
        for (int r = 0; r < n_a; ++r)
          ASSERT_EQ(out[r], single(n, wq.data(), rows[r])) << dtype_name(t) << " variant " << static_cast<int>(v)
                                                            << " n_a " << n_a << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace duet
