// Bit-exactness of the CPU kernels against llama.cpp's own, recorded from the AVX2 ggml CPU library
// of llama-cpp-python by scripts/ref/ggml_parity_ref.py into tests/data/ggml_parity_ref.{json,bin}
// (the test fails when the fixture is missing; llama.cpp is not needed here). Covers the activation
// quantizers, the vec_dot kernels of every weight type llama.cpp runs without repacking, the
// repacked Q4_K gemv/gemm, and whole mul_mat ops run through ggml's own graph executor (which takes
// the tiled K-quant path for batches of >= 8 rows). Inputs are regenerated here from the fixture's
// seeds by the same integer-exact generators as the script's.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/thread_pool.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

using nlohmann::json;

// ---- input generators: keep identical to scripts/ref/ggml_parity_ref.py ----

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// x[i] = float(sum of four 22-bit fields of two draws, centred) * (scale * 2^-21): the integer is
// exact in float (|s| < 2^23) and the product is one IEEE rounding, so numpy gets the same bits.
std::vector<float> gaussian_floats(uint64_t seed, size_t n, int scale) {
  SplitMix64 rng{seed};
  constexpr uint64_t kMask = (uint64_t{1} << 22) - 1;
  const float c = static_cast<float>(scale) * 0x1p-21f;
  std::vector<float> x(n);
  for (auto& v : x) {
    const uint64_t z0 = rng.next(), z1 = rng.next();
    const int64_t s = static_cast<int64_t>((z0 & kMask) + ((z0 >> 22) & kMask) + (z1 & kMask) +
                                           ((z1 >> 22) & kMask)) -
                      2 * static_cast<int64_t>(kMask);
    v = static_cast<float>(s) * c;
  }
  return x;
}

// A normal half / bfloat16 / float of random sign and mantissa, binary exponent -9 .. -2, made from
// the random bits already in the word.
uint16_t sanitize_f16(uint16_t h) {
  return static_cast<uint16_t>((h & 0x83FF) | ((6 + ((h >> 10) & 7)) << 10));
}
uint16_t sanitize_bf16(uint16_t h) {
  return static_cast<uint16_t>((h & 0x807F) | ((118 + ((h >> 7) & 7)) << 7));
}
uint32_t sanitize_f32(uint32_t w) { return (w & 0x807FFFFFu) | ((118 + ((w >> 23) & 7)) << 23); }

struct F16Fields {
  DType t;
  size_t block_bytes;
  std::vector<size_t> offsets;  // of the fp16 fields in a block
};
const std::vector<F16Fields>& f16_fields() {
  static const std::vector<F16Fields> k = {
      {DType::kQ4_0, sizeof(BlockQ4_0), {offsetof(BlockQ4_0, d)}},
      {DType::kQ4_1, sizeof(BlockQ4_1), {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}},
      {DType::kQ5_0, sizeof(BlockQ5_0), {offsetof(BlockQ5_0, d)}},
      {DType::kQ5_1, sizeof(BlockQ5_1), {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}},
      {DType::kQ8_0, sizeof(BlockQ8_0), {offsetof(BlockQ8_0, d)}},
      {DType::kQ2_K, sizeof(BlockQ2_K), {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}},
      {DType::kQ3_K, sizeof(BlockQ3_K), {offsetof(BlockQ3_K, d)}},
      {DType::kQ4_K, sizeof(BlockQ4_K), {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}},
      {DType::kQ5_K, sizeof(BlockQ5_K), {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}},
      {DType::kQ6_K, sizeof(BlockQ6_K), {offsetof(BlockQ6_K, d)}},
  };
  return k;
}

// rows x row_bytes(t, n) random bytes (draws as little-endian u64, truncated) with every fp16
// block field, and every F16/BF16/F32 element, made a normal number (sanitize_* above).
std::vector<uint8_t> weight_bytes(DType t, uint64_t seed, int64_t n, int64_t rows) {
  const size_t total = *row_bytes(t, n) * rows;
  std::vector<uint8_t> w((total + 7) / 8 * 8);
  SplitMix64 rng{seed};
  for (size_t i = 0; i < w.size(); i += 8) {
    const uint64_t z = rng.next();
    for (int b = 0; b < 8; ++b) w[i + b] = static_cast<uint8_t>(z >> (8 * b));
  }
  w.resize(total);
  auto rd16 = [&](size_t o) { return static_cast<uint16_t>(w[o] | (w[o + 1] << 8)); };
  auto wr16 = [&](size_t o, uint16_t h) {
    w[o] = static_cast<uint8_t>(h);
    w[o + 1] = static_cast<uint8_t>(h >> 8);
  };
  if (t == DType::kF16 || t == DType::kBF16) {
    for (size_t o = 0; o < total; o += 2)
      wr16(o, t == DType::kF16 ? sanitize_f16(rd16(o)) : sanitize_bf16(rd16(o)));
  } else if (t == DType::kF32) {
    for (size_t o = 0; o < total; o += 4) {
      uint32_t v = 0;
      for (int b = 0; b < 4; ++b) v |= static_cast<uint32_t>(w[o + b]) << (8 * b);
      v = sanitize_f32(v);
      for (int b = 0; b < 4; ++b) w[o + b] = static_cast<uint8_t>(v >> (8 * b));
    }
  } else {
    const F16Fields* f = nullptr;
    for (const auto& e : f16_fields())
      if (e.t == t) f = &e;
    DUET_CHECK(f != nullptr);
    for (size_t blk = 0; blk < total; blk += f->block_bytes)
      for (size_t o : f->offsets) wr16(blk + o, sanitize_f16(rd16(blk + o)));
  }
  return w;
}

// ---- the fixture ----

struct Fixture {
  json ref;
  std::vector<uint8_t> blob;
  std::string error;  // non-empty: the fixture could not be read
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture r;
    const std::string dir = std::string(DUET_SOURCE_DIR) + "/tests/data/";
    std::ifstream js(dir + "ggml_parity_ref.json");
    if (!js) {
      r.error = "missing " + dir +
                "ggml_parity_ref.json (regenerate: python3 scripts/ref/ggml_parity_ref.py)";
      return r;
    }
    r.ref = json::parse(js, nullptr, /*allow_exceptions=*/false);
    if (r.ref.is_discarded()) {
      r.error = "ggml_parity_ref.json is not valid JSON";
      return r;
    }
    const std::string blob = dir + r.ref.value("blob", std::string("ggml_parity_ref.bin"));
    std::ifstream bs(blob, std::ios::binary);
    if (!bs) {
      r.error = "missing " + blob + " (regenerate: python3 scripts/ref/ggml_parity_ref.py)";
      return r;
    }
    r.blob.assign(std::istreambuf_iterator<char>(bs), std::istreambuf_iterator<char>());
    return r;
  }();
  return f;
}

// The blob bytes a {"offset", "bytes"} entry names, checked against the blob and the expected size.
const uint8_t* blob_at(const json& ref, size_t expect_bytes) {
  const auto& blob = fixture().blob;
  const size_t off = ref.at("offset").get<size_t>(), len = ref.at("bytes").get<size_t>();
  DUET_CHECK(len == expect_bytes && off <= blob.size() && len <= blob.size() - off);
  return blob.data() + off;
}
std::vector<float> floats_at(const json& ref, size_t n) {
  std::vector<float> v(n);
  std::memcpy(v.data(), blob_at(ref, n * sizeof(float)),
              n * sizeof(float));  // the blob is little-endian
  return v;
}
DType dtype_of(const json& name) {
  const auto t = dtype_from_name(name.get<std::string>());
  DUET_CHECK(t.has_value());
  return *t;
}

class GgmlParity : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fixture().error.empty()) << fixture().error;
    // The recorded kernels are llama.cpp's AVX2 ones; duet's AVX2 ports are what reproduce them.
    if (cpu_features().level < SimdLevel::kAvx2)
      GTEST_SKIP() << "this CPU lacks AVX2 (or DUET_CPU caps it)";
  }
  const json& ref() const { return fixture().ref; }
};

// The generators here and in the script agree (else every case below would fail, less clearly).
TEST_F(GgmlParity, InputGeneratorsMatchTheScript) {
  EXPECT_EQ(SplitMix64{0}.next(), 0xE220A8397B1DCDAFull);  // splitmix64's published first output
  const json& c = ref().at("generator_check");
  const auto x = gaussian_floats(c.at("x_seed"), c.at("x_bits").size(), c.at("x_scale"));
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    EXPECT_EQ(bits, c.at("x_bits")[i].get<uint32_t>()) << "gaussian_floats element " << i;
  }
  ASSERT_FALSE(c.at("w_fnv1a64").empty());
  for (const auto& [name, hash] : c.at("w_fnv1a64").items()) {
    const auto w = weight_bytes(dtype_of(json(name)), c.at("w_seed"), c.at("w_n"), 1);
    uint64_t h = 0xCBF29CE484222325ull;
    for (uint8_t b : w) h = (h ^ b) * 0x100000001B3ull;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
    EXPECT_EQ(std::string(hex), hash.get<std::string>()) << "weight_bytes " << name;
  }
}

TEST_F(GgmlParity, ActivationQuantizersAndVecDots) {
  for (const json& c : ref().at("vec_dot")) {
    const DType w = dtype_of(c.at("type"));
    const DType act = activation_type(w);
    const int64_t n = c.at("n");
    const std::string kernel = c.at("kernel");
    const auto x = gaussian_floats(c.at("x_seed"), n, c.at("x_scale"));
    const auto wq = weight_bytes(w, c.at("w_seed"), n, 1);
    std::vector<uint8_t> a(*row_bytes(act, n));
    quantize_activation(w, x.data(), a.data(), n);
    if (c.contains("activation")) {
      const uint8_t* theirs = blob_at(c.at("activation"), a.size());
      ASSERT_EQ(std::memcmp(a.data(), theirs, a.size()), 0)
          << c.at("quantizer") << " n=" << n << " x_seed " << c.at("x_seed");
    }
    const float ref_dot = floats_at(c.at("dot"), 1)[0];
    ASSERT_EQ(vec_dot_fn_at(w, SimdLevel::kAvx2)(n, wq.data(), a.data()), ref_dot)
        << kernel << " n=" << n;
    if (act == DType::kF32 || act == DType::kF16 || act == DType::kBF16) {
      // The float types' generic kernels reproduce the same lanes.
      ASSERT_EQ(vec_dot_fn_at(w, SimdLevel::kGeneric)(n, wq.data(), a.data()), ref_dot)
          << kernel << " generic n=" << n;
    }
  }
}

TEST_F(GgmlParity, RepackedQ4_KGemvAndGemm) {
  const json& r = ref().at("repack_q4_K");
  const int64_t n = r.at("n"), rows = r.at("rows");
  const size_t rb = *row_bytes(DType::kQ4_K, n), ab = *row_bytes(DType::kQ8_K, n);
  for (const json& trial : r.at("trials")) {
    const auto wq = weight_bytes(DType::kQ4_K, trial.at("w_seed"), n, rows);
    const auto x = gaussian_floats(trial.at("x_seed"), 4 * n, trial.at("x_scale"));
    std::vector<uint8_t> a(ab * 4);
    for (int t = 0; t < 4; ++t) quantize_activation(DType::kQ4_K, &x[t * n], &a[t * ab], n);
    const auto sv = floats_at(trial.at("gemv"), rows);      // gemv on token 0
    const auto sm = floats_at(trial.at("gemm"), 4 * rows);  // [token][row]
    for (SimdLevel l : {SimdLevel::kGeneric, SimdLevel::kAvx2}) {
      const VecDotFn v = vec_dot_fn_at(DType::kQ4_K, l, DotVariant::kRepackGemv);
      const VecDotFn m = vec_dot_fn_at(DType::kQ4_K, l, DotVariant::kRepackGemm);
      ASSERT_NE(v, nullptr);
      ASSERT_NE(m, nullptr);
      for (int64_t row = 0; row < rows; ++row) {
        ASSERT_EQ(v(n, &wq[row * rb], a.data()), sv[row])
            << "gemv row " << row << " level " << simd_level_name(l);
        for (int t = 0; t < 4; ++t)
          ASSERT_EQ(m(n, &wq[row * rb], &a[t * ab]), sm[t * rows + row])
              << "gemm row " << row << " token " << t << " level " << simd_level_name(l);
      }
    }
  }
}

// A K-quant weight matrix (row count not a multiple of 16, so ggml's tiles are ragged) times a
// batch of activation rows, as ggml_mul_mat + ggml_graph_compute_with_ctx computed it, against
// duet's matmul() with the row batching llama.cpp would see: vec_dot below 8 rows, the tiled
// kernels from 8 up (bit for bit for every K-quant in the tiled path). The matrices were not
// repacked (a plain ggml context, as Q6_K is in llama.cpp). duet has no AVX2 port of ggml's Q2_K /
// Q3_K vec_dot, so those types are recorded only for >= 8 rows.
TEST_F(GgmlParity, KQuantMulMatThroughGgmlGraph) {
  const json& r = ref().at("mul_mat");
  const int64_t n = r.at("n"), rows = r.at("rows");
  ThreadPool pool(2);
  for (const json& c : r.at("cases")) {
    const DType t = dtype_of(c.at("type"));
    const int n_tok = c.at("n_tokens");
    const auto wq = weight_bytes(t, c.at("w_seed"), n, rows);
    const auto x = gaussian_floats(c.at("x_seed"), static_cast<size_t>(n) * n_tok, c.at("x_scale"));
    const auto ref_out = floats_at(c.at("out"), static_cast<size_t>(rows) * n_tok);  // [token][row]

    WeightMatrix wm{t, wq.data(), rows, n, *row_bytes(t, n)};
    QuantizedRows q;
    quantize_rows(t, x.data(), n_tok, n, n, &q, pool);
    std::vector<RowBatching> batching(n_tok);
    for (int i = 0; i < n_tok; ++i) batching[i] = {n_tok, i};
    std::vector<float> got(ref_out.size());
    MatmulJob job{&wm, &q, got.data(), static_cast<size_t>(rows)};
    matmul(std::span<const MatmulJob>(&job, 1), pool, batching);
    for (size_t i = 0; i < ref_out.size(); ++i)
      ASSERT_EQ(got[i], ref_out[i]) << dtype_name(t) << " tokens " << n_tok << " out " << i;
  }
}

}  // namespace
}  // namespace duet
