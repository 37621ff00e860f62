// K-quant quantizers (kquant.cpp): squared error against llama.cpp's reference quantizers on fixed
// inputs (tests/data/kquant_*.f32, reference numbers from scripts/ref/kquant_sse_ref.py), and
// round-trip sanity on awkward blocks (zeros, constants, outliers, tiny and all-positive values).
// Dequantizes with duet::dequantize_row, itself bit-exact with ggml.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

constexpr DType kKTypes[] = {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::string data_path(const std::string& name) {
  return std::string(DUET_SOURCE_DIR) + "/tests/data/" + name;
}

std::vector<float> read_f32(const std::string& name) {
  std::ifstream f(data_path(name), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> x(bytes.size() / sizeof(float));
  std::memcpy(x.data(), bytes.data(), x.size() * sizeof(float));  // files are little-endian
  return x;
}

// Quantizes x row by row (rows of row_len) and dequantizes it back.
std::vector<float> round_trip(DType t, const float* x, int64_t n, int64_t row_len) {
  const uint64_t row_bytes = *duet::row_bytes(t, static_cast<uint64_t>(row_len));
  std::vector<uint8_t> q(row_bytes * static_cast<uint64_t>(n / row_len));
  std::vector<float> y(static_cast<size_t>(n));
  for (int64_t r = 0; r < n / row_len; ++r) {
    quantize_row(t, x + r * row_len, q.data() + r * row_bytes, row_len);
    dequantize_row(t, q.data() + r * row_bytes, y.data() + r * row_len, row_len);
  }
  return y;
}

double sse(const float* x, const float* y, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    s += d * d;
  }
  return s;
}

double sum_sq(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

bool all_finite(const std::vector<float>& y) {
  for (float v : y)
    if (!std::isfinite(v)) return false;
  return true;
}

class KQuantReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream f(data_path("kquant_sse_ref.json"));
    ASSERT_TRUE(f.good()) << "missing " << data_path("kquant_sse_ref.json");
    ref_ = new nlohmann::json(nlohmann::json::parse(f));
  }
  static void TearDownTestSuite() {
    delete ref_;
    ref_ = nullptr;
  }

  // duet's SSE must be within 2% of llama.cpp's on the whole set and on each slice of it.
  static void check_set(const std::string& set) {
    ASSERT_NE(ref_, nullptr);
    const nlohmann::json& s = (*ref_)["sets"][set];
    const std::vector<float> x = read_f32(s["file"].get<std::string>());
    const int64_t n = s["n_elements"].get<int64_t>();
    const int64_t row_len = s["row_length"].get<int64_t>();
    ASSERT_EQ(static_cast<int64_t>(x.size()), n) << s["file"];
    for (DType t : kKTypes) {
      const std::string name(dtype_name(t));
      const std::vector<float> y = round_trip(t, x.data(), n, row_len);
      ASSERT_TRUE(all_finite(y)) << name;
      const double mine = sse(x.data(), y.data(), n);
      const double theirs = s["sse"][name].get<double>();
      std::printf("  %-5s %-4s duet %.6g  llama.cpp %.6g  ratio %.4f\n", set.c_str(), name.c_str(),
                  mine, theirs, mine / theirs);
      EXPECT_LE(mine, 1.02 * theirs) << set << " " << name;
      if (!s.contains("slices")) continue;
      for (const auto& slice : s["slices"]) {
        const int64_t off = slice["offset"].get<int64_t>();
        const int64_t len = slice["n_elements"].get<int64_t>();
        const double mine_s = sse(x.data() + off, y.data() + off, len);
        const double theirs_s = slice["sse"][name].get<double>();
        EXPECT_LE(mine_s, 1.02 * theirs_s + 1e-12)
            << set << " " << name << " slice " << slice["source"]["tensor"];
      }
    }
  }

  static nlohmann::json* ref_;
};
nlohmann::json* KQuantReference::ref_ = nullptr;

TEST_F(KQuantReference, GaussianWithinTwoPercentOfLlamaCpp) { check_set("gauss"); }
TEST_F(KQuantReference, RealWeightsWithinTwoPercentOfLlamaCpp) { check_set("real"); }

// Relative squared error sum((x - y)^2) / sum(x^2) each type must stay under on Gaussian blocks;
// about 1.5x what the quantizers reach, so these catch breakage, not small regressions.
double gaussian_bound(DType t) {
  switch (t) {
    case DType::kQ2_K:
      return 0.11;
    case DType::kQ3_K:
      return 0.032;
    case DType::kQ4_K:
      return 0.0075;
    case DType::kQ5_K:
      return 0.0019;
    case DType::kQ6_K:
      return 0.00045;
    default:
      return 0.0;
  }
}

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  return x;
}

// The CUDA kernels' Q4_K block (repack_q4_K_for_gpu): the same header, and every weight's quant
// where the GPU decoders look for it (sub-block c = the low (c < 4) or high nibbles of qs bytes
// 32 (c % 4) .. + 31, quant_types.cuh), checked against the file rule (sub-block c = nibble c % 2
// of qs bytes 32 (c / 2) .. + 31) on random blocks.
TEST(KQuantGpuLayout, Q4KRepackKeepsEveryQuant) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 64; ++trial) {
    BlockQ4_K file{}, gpu{};
    auto* raw = reinterpret_cast<uint8_t*>(&file);
    for (size_t i = 0; i < sizeof file; ++i) raw[i] = static_cast<uint8_t>(byte(rng));
    repack_q4_K_for_gpu(&file, &gpu);
    ASSERT_EQ(std::memcmp(&file, &gpu, 16), 0) << "d, dmin and scales move";
    for (int e = 0; e < 256; ++e) {
      const int c = e / 32, l = e % 32;
      const int want = (file.qs[32 * (c / 2) + l] >> (4 * (c % 2))) & 0x0f;
      const int got = (gpu.qs[32 * (c % 4) + l] >> (4 * (c / 4))) & 0x0f;
      ASSERT_EQ(got, want) << "trial " << trial << " weight " << e;
    }
  }
}

TEST(KQuantRoundTrip, AllZeroBlockIsExact) {
  const std::vector<float> x(512, 0.0f);
  for (DType t : kKTypes) {
    const std::vector<float> y = round_trip(t, x.data(), 512, 512);
    for (int i = 0; i < 512; ++i) ASSERT_EQ(y[i], 0.0f) << dtype_name(t) << " element " << i;
  }
}

TEST(KQuantRoundTrip, ConstantBlocks) {
  for (float c : {0.37f, -2.5f, 1e-3f}) {
    const std::vector<float> x(512, c);
    for (DType t : kKTypes) {
      const std::vector<float> y = round_trip(t, x.data(), 512, 512);
      ASSERT_TRUE(all_finite(y)) << dtype_name(t);
      // Only f16 rounding of the super-scales and the code grid separate y from c.
      for (int i = 0; i < 512; ++i)
        EXPECT_NEAR(y[i], c, 0.01 * std::fabs(c)) << dtype_name(t) << " c=" << c << " i=" << i;
    }
  }
}

TEST(KQuantRoundTrip, GaussianRowsOfTwoBlocks) {
  const std::vector<float> x = gaussian(512 * 16, 7);
  for (DType t : kKTypes) {
    const std::vector<float> y = round_trip(t, x.data(), 512 * 16, 512);
    ASSERT_TRUE(all_finite(y)) << dtype_name(t);
    const double rel = sse(x.data(), y.data(), 512 * 16) / sum_sq(x.data(), 512 * 16);
    EXPECT_LT(rel, gaussian_bound(t)) << dtype_name(t);
  }
}

TEST(KQuantRoundTrip, OneHugeOutlier) {
  std::vector<float> x = gaussian(512, 11);
  x[300] = 1000.0f;
  const double rest = sum_sq(x.data(), 512) - 1000.0 * 1000.0;
  for (DType t : kKTypes) {
    const std::vector<float> y = round_trip(t, x.data(), 512, 512);
    ASSERT_TRUE(all_finite(y)) << dtype_name(t);
    EXPECT_NEAR(y[300], 1000.0f, 10.0f) << dtype_name(t);  // the outlier itself survives
    // Never worse than dropping every other element: the outlier's block may lose them, the
    // other block must not be hurt.
    const double err = sse(x.data(), y.data(), 512) - (y[300] - 1000.0) * (y[300] - 1000.0);
    EXPECT_LE(err, rest) << dtype_name(t);
    const double rel_other = sse(x.data(), y.data(), 256) / sum_sq(x.data(), 256);
    EXPECT_LT(rel_other, gaussian_bound(t) * 1.5) << dtype_name(t);
  }
}

TEST(KQuantRoundTrip, TinyValues) {
  for (float scale : {1e-30f, 1e-6f}) {
    const std::vector<float> x = gaussian(512, 13, scale);
    for (DType t : kKTypes) {
      const std::vector<float> y = round_trip(t, x.data(), 512, 512);
      ASSERT_TRUE(all_finite(y)) << dtype_name(t) << " scale " << scale;
      // f16 super-scales cannot represent these well; never worse than all zeros.
      EXPECT_LE(sse(x.data(), y.data(), 512), sum_sq(x.data(), 512))
          << dtype_name(t) << " scale " << scale;
    }
  }
}

TEST(KQuantRoundTrip, AllPositiveBlockUsesAnOffset) {
  // A block of values around 1 (like a norm weight): with a subtracted min alone the affine types
  // would spend their codes on [0, 1.3]; flipping the sign of the super-scales keeps precision.
  std::vector<float> x = gaussian(512, 17, 0.05f);
  for (float& v : x) v = 1.0f + v;
  for (DType t : kKTypes) {
    const std::vector<float> y = round_trip(t, x.data(), 512, 512);
    ASSERT_TRUE(all_finite(y)) << dtype_name(t);
    std::vector<float> centered(x);
    for (float& v : centered) v -= 1.0f;
    const double rel = sse(x.data(), y.data(), 512) / sum_sq(centered.data(), 512);
    // Symmetric types (Q3_K, Q6_K) cannot offset, so only the affine ones get the tight bound.
    const bool affine = t == DType::kQ2_K || t == DType::kQ4_K || t == DType::kQ5_K;
    if (affine) {
      EXPECT_LT(rel, gaussian_bound(t) * 2) << dtype_name(t);
    }
    EXPECT_LT(sse(x.data(), y.data(), 512), 0.01 * sum_sq(x.data(), 512)) << dtype_name(t);
  }
}

TEST(KQuantRoundTrip, NonFiniteInputStaysContained) {
  // A NaN or infinity poisons its own super-block at most; it must not crash, hang or touch the
  // other block of the row.
  std::vector<float> x = gaussian(512, 23);
  x[5] = NAN;
  x[100] = INFINITY;
  x[200] = -INFINITY;
  for (DType t : kKTypes) {
    const std::vector<float> y = round_trip(t, x.data(), 512, 512);
    const double rel_other = sse(x.data() + 256, y.data() + 256, 256) / sum_sq(x.data() + 256, 256);
    EXPECT_LT(rel_other, gaussian_bound(t) * 1.5) << dtype_name(t);
  }
  std::vector<BlockQ8_K> q(2);
  quantize_row_q8_K(x.data(), q.data(), 512);
}

TEST(KQuantRoundTrip, Q8KMatchesGgmlRule) {
  // Q8_K: scale = max|x| / 127 with the extreme mapped to -127, bsums = sums of 16 codes.
  const std::vector<float> x = gaussian(512, 19);
  std::vector<BlockQ8_K> q(2);
  quantize_row_q8_K(x.data(), q.data(), 512);
  for (int b = 0; b < 2; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[b * 256 + i]));
    EXPECT_FLOAT_EQ(std::fabs(q[b].d), amax / 127.0f);
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += q[b].qs[16 * j + i];
      EXPECT_EQ(q[b].bsums[j], sum);
    }
    for (int i = 0; i < 256; ++i)
      EXPECT_NEAR(q[b].d * q[b].qs[i], x[b * 256 + i], 0.5f * amax / 127.0f * 1.0001f);
  }
  const std::vector<float> zeros(256, 0.0f);
  quantize_row_q8_K(zeros.data(), q.data(), 256);
  EXPECT_EQ(q[0].d, 0.0f);
}

}  // namespace
}  // namespace duet
