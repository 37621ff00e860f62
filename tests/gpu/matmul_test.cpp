// GPU matrix products (kernels/cuda/matmul.h) against the CPU reference: a parity table of weight
// type x shape x n_tokens x kernel path, get_rows exactness, and (not pass/fail) a benchmark of
// decode bandwidth and prompt TFLOP/s on Qwen2-7B shapes. Needs a CUDA device; fails without one.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/matmul.h"
#include "kernels/cuda/matvec_mma.h"
#include "kernels/cuda/quant_kernels.cuh"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "tensor/half.h"
#include "tensor/quantize.h"

namespace duet::cuda {
namespace {

// Line-buffered stdout: the tables survive an abort part-way.
const int kLineBuffered = std::setvbuf(stdout, nullptr, _IOLBF, 0);

enum class Fp8Scale { kNone, kTensor, kChannel, kBlock };

struct Case {
  DType dtype;
  Fp8Scale fp8;
  const char* name;
};

const Case kCases[] = {
    {DType::kF32, Fp8Scale::kNone, "F32"},         {DType::kF16, Fp8Scale::kNone, "F16"},
    {DType::kBF16, Fp8Scale::kNone, "BF16"},       {DType::kQ4_0, Fp8Scale::kNone, "Q4_0"},
    {DType::kQ4_1, Fp8Scale::kNone, "Q4_1"},       {DType::kQ5_0, Fp8Scale::kNone, "Q5_0"},
    {DType::kQ5_1, Fp8Scale::kNone, "Q5_1"},       {DType::kQ8_0, Fp8Scale::kNone, "Q8_0"},
    {DType::kQ2_K, Fp8Scale::kNone, "Q2_K"},       {DType::kQ3_K, Fp8Scale::kNone, "Q3_K"},
    {DType::kQ4_K, Fp8Scale::kNone, "Q4_K"},       {DType::kQ5_K, Fp8Scale::kNone, "Q5_K"},
    {DType::kQ6_K, Fp8Scale::kNone, "Q6_K"},       {DType::kF8_E4M3, Fp8Scale::kTensor, "FP8/tensor"},
    {DType::kF8_E4M3, Fp8Scale::kChannel, "FP8/channel"}, {DType::kF8_E4M3, Fp8Scale::kBlock, "FP8/block128"},
};

bool is_kquant(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}
bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8_E4M3; }

// Rows not a multiple of any tile (300, 77, 33); K not a multiple of 256 where the block allows
// (896 with 32-blocks, 1000 with plain types: not even a multiple of 16); one long-row shape per
// type so the decode kernels run with 64 or 128 threads per row too.
std::vector<std::pair<int64_t, int64_t>> shapes_for(DType t) {
  // Q4_K adds 2304 x 3584: one sequence takes the preload variant there (kquant_variant 4, every
  // piece of a row group loaded in one pass; 14 blocks a row, so its last pass is partial).
  if (t == DType::kQ4_K) return {{300, 768}, {77, 2816}, {33, 16384}, {2304, 3584}};
  if (is_kquant(t)) return {{300, 768}, {77, 2816}, {33, 16384}};
  // FP8: 320 rows (a multiple of 16, as cuBLASLt's FP8 kernels want) takes the native path.
  if (t == DType::kF8_E4M3) return {{320, 896}, {77, 1000}, {16, 16384}};
  if (is_float(t)) return {{300, 896}, {77, 1000}, {16, 8192}};
  return {{300, 896}, {77, 2048}, {33, 16384}};
}

struct HostMatrix {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> data;
  std::vector<float> scales;
  int64_t br = 0, bc = 0, sc_cols = 0;
  std::vector<float> deq;  // dequantized (FP8 times its scales), as dequantize_row computes it

  WeightMatrix view() const {
    WeightMatrix w;
    w.dtype = dtype;
    w.data = data.data();
    w.n_rows = rows;
    w.n_cols = cols;
    w.row_bytes = row_bytes;
    if (dtype == DType::kF8_E4M3) {
      w.fp8_scales = scales.data();
      w.fp8_block_rows = br;
      w.fp8_block_cols = bc;
      w.fp8_scale_cols = sc_cols;
    }
    return w;
  }
};

// n normal(0, 1) floats from std::mt19937(seed), copied to a new device buffer (the caller
// frees it; null after a failure, which is reported).
float* device_randn(size_t n, uint32_t seed) {
  std::vector<float> x(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  for (auto& v : x) v = g(rng);
  float* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, n * 4), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, x.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

// n rows of ldx floats, normal(0, 1) from std::mt19937_64(seed) in the first cols (row by row),
// zero past them (x zero-padded to the weights' padded row length).
std::vector<float> host_rows(int n, int64_t ldx, int64_t cols, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n) * ldx, 0.f);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  for (int t = 0; t < n; ++t)
    for (int64_t k = 0; k < cols; ++k) x[t * ldx + k] = g(rng);
  return x;
}

HostMatrix make_matrix(const Case& c, int64_t rows, int64_t cols, uint64_t seed) {
  HostMatrix m;
  m.dtype = c.dtype;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = *row_bytes(c.dtype, static_cast<uint64_t>(cols));
  m.data.resize(m.row_bytes * rows);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> row(cols);
  if (c.dtype == DType::kF8_E4M3) {
    for (auto& b : m.data) b = f32_to_fp8_e4m3(g(rng) * 60.f);  // spans E4M3's range, saturating at 448
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    switch (c.fp8) {
      case Fp8Scale::kTensor: m.br = rows; m.bc = cols; break;
      case Fp8Scale::kChannel: m.br = 1; m.bc = cols; break;
      default: m.br = 128; m.bc = 128; break;
    }
    m.sc_cols = (cols + m.bc - 1) / m.bc;
    m.scales.resize(((rows + m.br - 1) / m.br) * m.sc_cols);
    for (auto& s : m.scales) s = 0.01f * u(rng);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const float amp = 0.5f + static_cast<float>(r % 7) * 0.25f;  // rows of different magnitudes
      for (auto& v : row) v = g(rng) * amp;
      quantize_row(c.dtype, row.data(), m.data.data() + r * m.row_bytes, cols);
    }
  }
  m.deq.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    float* d = m.deq.data() + r * cols;
    dequantize_row(c.dtype, m.data.data() + r * m.row_bytes, d, cols);
    if (c.dtype == DType::kF8_E4M3)
      for (int64_t k = 0; k < cols; ++k) d[k] *= m.scales[(r / m.br) * m.sc_cols + k / m.bc];
  }
  return m;
}

// y[t][r] = sum_c W[r][c] x[t][c] in double, and l1[t][r] = sum_c |W[r][c] x[t][c]|.
void reference(const HostMatrix& m, const std::vector<float>& x, int64_t ldx, int n, std::vector<double>* y,
               std::vector<double>* l1) {
  y->assign(static_cast<size_t>(n) * m.rows, 0.0);
  l1->assign(static_cast<size_t>(n) * m.rows, 0.0);
  const int n_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (int i = 0; i < n_threads; ++i)
    th.emplace_back([&, i] {
      for (int64_t r = i; r < m.rows; r += n_threads) {
        const float* w = m.deq.data() + r * m.cols;
        for (int t = 0; t < n; ++t) {
          const float* xt = x.data() + t * ldx;
          double s = 0, a = 0;
          for (int64_t c = 0; c < m.cols; ++c) {
            const double p = static_cast<double>(w[c]) * xt[c];
            s += p;
            a += std::fabs(p);
          }
          (*y)[t * m.rows + r] = s;
          (*l1)[t * m.rows + r] = a;
        }
      }
    });
  for (auto& t : th) t.join();
}

// ||y - ref|| / ||ref|| over the n token rows of y (rows ldy apart) and the worst per-element
// |y - ref| / sum_c |w x| (a NaN or infinity in y counts as an infinite error).
std::pair<double, double> product_errors(const std::vector<float>& y, int64_t ldy, const std::vector<double>& yref,
                                         const std::vector<double>& l1, int n, int64_t rows) {
  double e2 = 0, r2 = 0, worst = 0;
  for (int t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      const double ref = yref[t * rows + r], got = y[t * ldy + r];
      const double err = std::isfinite(got) ? std::fabs(got - ref) : INFINITY;
      e2 += err * err;
      r2 += ref * ref;
      worst = std::max(worst, err / l1[t * rows + r]);
    }
  return {std::sqrt(e2 / r2), worst};
}

struct Path {
  const char* name;
  KernelPath path;
  Fp8Mode fp8;
};

// Error bounds: `norm` bounds ||y - ref|| / ||ref|| over the whole output, `elem` bounds each
// |y - ref| / sum_c |w x| (the worst case of per-term relative errors).
struct Tol {
  double norm, elem;
};
Tol tolerance(const Case& c, const Path& p, const DeviceInfo& dev, int n, MatmulContext::DecodeInput in) {
  const bool native = p.path == KernelPath::kNative;
  if (n <= 8) {
    using In = MatmulContext::DecodeInput;
    switch (in) {
      // Block-quantized weights: activations rounded to int8 per 32 values (step amax / 127): each
      // term's error is at most amax / 254 / |x| relative, ~1% for Gaussian rows, rms 0.5%.
      case In::kInt8: return {0.02, 0.02};
      // Tensor-core decode: exact weights (E4M3 is exact in F16), activations rounded to F16
      // (2^-11 relative) or BF16 (2^-9), float32 accumulation: the prompt GEMMs' bounds.
      case In::kF16: return {2e-3, 3e-3};
      case In::kBf16: return {4e-3, 5e-3};
      // Native FP8 decode: activations rounded to E4M3 (2^-4 relative at worst, scale per 64
      // columns), as the native prompt path.
      case In::kE4M3: return {0.05, 0.08};
      // Float weights: exact weights and activations, float32 accumulation only.
      case In::kFloat: return {1e-5, 1e-5};
    }
  }
  if (c.dtype == DType::kF32) return native ? Tol{3e-3, 4e-3} : Tol{1e-5, 1e-5};  // TF32 rounds both to 2^-11
  if (c.dtype == DType::kBF16 && native && dev.use_bf16()) return {4e-3, 5e-3};  // x rounded to BF16: 2^-9
  if (c.dtype == DType::kF8_E4M3 && native && dev.use_fp8() && p.fp8 != Fp8Mode::kWeightOnly &&
      c.fp8 != Fp8Scale::kBlock)
    return {0.05, 0.08};  // x rounded to E4M3 (3 mantissa bits: 2^-4 relative), rms ~3.6%
  // F16 GEMM: x and the dequantized weight each rounded to F16 (2^-11 relative).
  return {2e-3, 3e-3};
}

void fail_without_device() { ASSERT_GT(device_count(), 0) << "no CUDA device: GPU tests need one"; }

class MatmulParity : public ::testing::TestWithParam<int> {};

TEST_P(MatmulParity, MatchesCpuReference) {
  fail_without_device();
  const Case& c = kCases[GetParam()];
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok()) << dev_r.status().message();
  std::vector<Path> paths = {{"native", KernelPath::kNative, Fp8Mode::kAuto},
                             {"generic", KernelPath::kGeneric, Fp8Mode::kAuto}};
  if (c.dtype == DType::kF8_E4M3) paths.push_back({"native-weight-only", KernelPath::kNative, Fp8Mode::kWeightOnly});
  const int kTokens[] = {1, 2, 5, 8, 9, 64, 512};
  const int max_n = 512;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  uint64_t seed = 1234 + GetParam();
  int shape_index = 0;
  for (auto [rows, cols] : shapes_for(c.dtype)) {
    const HostMatrix m = make_matrix(c, rows, cols, seed++);
    // Strides that are not the row lengths; the second shape's keeps rows 16-byte aligned, so
    // float-type decode reads x in place there (the first stages it).
    const int64_t ldx = cols + (shape_index++ % 2 ? 4 : 3);
    const int64_t ldy = (rows + 3) / 4 * 4 + 4;
    std::vector<float> x(static_cast<size_t>(max_n) * ldx);
    std::mt19937_64 rng(seed++);
    std::normal_distribution<float> g(0.f, 1.f);
    for (auto& v : x) v = g(rng);
    std::vector<double> yref, l1;
    reference(m, x, ldx, max_n, &yref, &l1);
    float* dx = nullptr;
    float* dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, static_cast<size_t>(max_n) * ldy * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<float> y(static_cast<size_t>(max_n) * ldy);
    for (const Path& p : paths) {
      DeviceInfo dev = *dev_r;
      dev.path = p.path;
      auto wr = upload_matrix(m.view(), dev, p.fp8);
      ASSERT_TRUE(wr.is_ok()) << wr.status().message();
      MatmulContext ctx(dev, p.fp8);
      ctx.reserve(max_n, cols, rows);
      for (int n : kTokens) {
        ASSERT_EQ(cudaMemset(dy, 0xff, static_cast<size_t>(max_n) * ldy * 4), cudaSuccess);  // NaN
        ctx.matmul(wr->m, dx, ldx, n, dy, ldy, stream);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(y.data(), dy, static_cast<size_t>(n) * ldy * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        const auto [rel, worst] = product_errors(y, ldy, yref, l1, n, rows);
        const Tol tol = tolerance(c, p, dev, n, ctx.decode_input(wr->m, n));
        std::printf("  %-12s %-18s %4lld x %-5lld n=%-4d norm %.2e (<= %.0e)  elem %.2e (<= %.0e)\n", c.name, p.name,
                    (long long)rows, (long long)cols, n, rel, tol.norm, worst, tol.elem);
        EXPECT_LE(rel, tol.norm) << c.name << " " << p.name << " " << rows << "x" << cols << " n=" << n;
        EXPECT_LE(worst, tol.elem) << c.name << " " << p.name << " " << rows << "x" << cols << " n=" << n;
        const bool mma = ctx.takes_mma(wr->m, n);  // K-quant / Q8_0 batches on sm_80+ native
        if (ctx.accumulates(wr->m, n) && mma) {
          // The tensor-core kernel's accumulating product (batches of 2-64 rows) adds its partial
          // sums into y with atomics where blocks share rows: y2 - y is the product once more,
          // within the same bounds (the subtraction's rounding is ~1e-7 of |y|).
          std::vector<float> y2(static_cast<size_t>(n) * ldy);
          ctx.matmul(wr->m, dx, ldx, n, dy, ldy, stream, /*accumulate=*/true);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(y2.data(), dy, y2.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          for (size_t i = 0; i < y2.size(); ++i) y2[i] -= y[i];
          const auto [rel2, worst2] = product_errors(y2, ldy, yref, l1, n, rows);
          EXPECT_LE(rel2, tol.norm) << c.name << " " << p.name << " accumulate n=" << n;
          EXPECT_LE(worst2, tol.elem) << c.name << " " << p.name << " accumulate n=" << n;
        }
        if (ctx.takes_f16(wr->m, n)) {
          // From F16 rows a producer wrote into f16_input() (here the conversion the context
          // itself runs), into a zeroed y: the product within the same bounds.
          const MatmulContext::F16Input h = ctx.f16_input(wr->m);
          kernels::launch_convert_act(dx, ldx, n, cols, h.h, h.ld, false, stream);
          ASSERT_EQ(cudaMemsetAsync(dy, 0, static_cast<size_t>(max_n) * ldy * 4, stream), cudaSuccess);
          ctx.matmul_f16(wr->m, n, dy, ldy, stream);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          std::vector<float> y3(static_cast<size_t>(n) * ldy);
          ASSERT_EQ(cudaMemcpy(y3.data(), dy, y3.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          const auto [rel3, worst3] = product_errors(y3, ldy, yref, l1, n, rows);
          EXPECT_LE(rel3, tol.norm) << c.name << " " << p.name << " matmul_f16 n=" << n;
          EXPECT_LE(worst3, tol.elem) << c.name << " " << p.name << " matmul_f16 n=" << n;
        }
        if (MatmulContext::can_accumulate(n) && !mma) {
          // The accumulating decode product (the fused residual add) adds the same sum again: y + y,
          // exact; on the streaming tensor-core kernel, whose accumulating launches split rows
          // between CTAs (stream-K, partial sums added atomically), within float rounding of the
          // row's terms (1e-5 of their L1 sum; a lost or doubled chunk is far more).
          std::vector<float> y2(static_cast<size_t>(n) * ldy);
          ctx.matmul(wr->m, dx, ldx, n, dy, ldy, stream, /*accumulate=*/true);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(y2.data(), dy, y2.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          const bool split = ctx.streams_decode(wr->m, n);
          int64_t bad = 0;
          for (int t = 0; t < n; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              const double want = 2.0 * y[t * ldy + r], got = y2[t * ldy + r];
              bad += split ? !(std::fabs(got - want) <= 1e-5 * l1[t * rows + r]) : got != want;
            }
          EXPECT_EQ(bad, 0) << c.name << " " << p.name << " accumulate n=" << n;
          if (ctx.takes_q8(wr->m, n)) {
            // The product from the int8 input the calls above left in q8_input() (what a fused
            // producer writes): the same kernel on the same input, so the same y.
            ctx.matmul_q8(wr->m, n, dy, ldy, stream);
            ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
            ASSERT_EQ(cudaMemcpy(y2.data(), dy, y2.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
            bad = 0;
            for (int t = 0; t < n; ++t)
              for (int64_t r = 0; r < rows; ++r) bad += y2[t * ldy + r] != y[t * ldy + r];
            EXPECT_EQ(bad, 0) << c.name << " " << p.name << " matmul_q8 n=" << n;
          }
        }
      }
    }
    cudaFree(dx);
    cudaFree(dy);
  }
  cudaStreamDestroy(stream);
}

// The tensor-core decode kernel (kernels/cuda/matvec_mma.cu), every kind called directly
// (MatmulContext picks one per device and mode; the parity table above covers that choice): one
// and two m16 tiles per CTA (the 17000-row shape), rows not a multiple of 16, a row length that
// is not a whole number of 4-piece chunks (1000 F16 columns: 125 pieces), the three FP8 scale
// layouts, n = 1, 3, 8, plain and accumulating. Bounds as tolerance()'s decode rows.
TEST(MatvecMma, EveryKindMatchesReference) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok()) << dev_r.status().message();
  if (dev_r->sm < 80) GTEST_FAIL() << "the tensor-core decode kernel needs sm_80+; this test runs on such a card";
  using K = kernels::MatvecMmaKind;
  struct KindCase {
    K kind;
    Case c;
    Tol tol;
    int min_sm;
  };
  const KindCase kinds[] = {
      {K::kF16, {DType::kF16, Fp8Scale::kNone, "F16"}, {2e-3, 3e-3}, 80},
      {K::kBf16, {DType::kBF16, Fp8Scale::kNone, "BF16"}, {4e-3, 5e-3}, 80},
      {K::kFp8Soft, {DType::kF8_E4M3, Fp8Scale::kChannel, "FP8-soft/channel"}, {2e-3, 3e-3}, 80},
      {K::kFp8Soft, {DType::kF8_E4M3, Fp8Scale::kBlock, "FP8-soft/block128"}, {2e-3, 3e-3}, 80},
      {K::kFp8Hw, {DType::kF8_E4M3, Fp8Scale::kTensor, "FP8-hw/tensor"}, {2e-3, 3e-3}, 89},
      {K::kFp8Hw, {DType::kF8_E4M3, Fp8Scale::kBlock, "FP8-hw/block128"}, {2e-3, 3e-3}, 89},
      {K::kFp8Native, {DType::kF8_E4M3, Fp8Scale::kChannel, "FP8-native/channel"}, {0.05, 0.08}, 89},
      {K::kFp8Native, {DType::kF8_E4M3, Fp8Scale::kBlock, "FP8-native/block128"}, {0.05, 0.08}, 89},
  };
  const std::pair<int64_t, int64_t> shapes[] = {{300, 1024}, {77, 1000}, {17000, 256}};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  uint64_t seed = 777;
  int ran = 0;
  for (const KindCase& kc : kinds) {
    if (dev_r->sm < kc.min_sm) continue;
    for (auto [rows, cols] : shapes) {
      if (kc.c.dtype == DType::kF8_E4M3 && cols % 16 != 0) continue;  // FP8 rows are whole 16-byte pieces
      const HostMatrix m = make_matrix(kc.c, rows, cols, seed++);
      auto wr = upload_matrix(m.view(), *dev_r, Fp8Mode::kWeightOnly);
      ASSERT_TRUE(wr.is_ok()) << wr.status().message();
      ASSERT_TRUE(kernels::matvec_mma_fits(wr->m, kc.kind)) << kc.c.name;
      // x zero-padded to the row's padded length (the kernel reads whole pieces).
      const int64_t ldx = static_cast<int64_t>(wr->m.row_bytes / dtype_info(wr->m.dtype).type_size + 4);
      const int n_max = 8;
      const std::vector<float> x = host_rows(n_max, ldx, cols, seed++);
      std::vector<double> yref, l1;
      reference(m, x, ldx, n_max, &yref, &l1);
      float *dx = nullptr, *dy = nullptr;
      const int64_t ldy = rows + 5;
      ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dy, static_cast<size_t>(n_max) * ldy * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      std::vector<float> y(static_cast<size_t>(n_max) * ldy), y2(y.size());
      // The streaming kernel (default) and the classic one (DUET_MATVEC_STREAM=0) against the
      // reference; then, for one and two tiles per unit forced, the two kernels bit for bit (same
      // warps, chunks and order of sums).
      for (const char* sv : {"1", "0"})
      for (int n : {1, 3, 8}) {
        setenv("DUET_MATVEC_STREAM", sv, 1);
        ASSERT_EQ(cudaMemset(dy, 0xff, y.size() * 4), cudaSuccess);  // NaN
        kernels::launch_matvec_mma(wr->m, kc.kind, dx, ldx, n, dy, ldy, false, false, stream);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        const auto [rel, worst] = product_errors(y, ldy, yref, l1, n, rows);
        std::printf("  %-20s %5lld x %-5lld n=%d %s norm %.2e (<= %.0e)  elem %.2e (<= %.0e)\n", kc.c.name,
                    (long long)rows, (long long)cols, n, sv[0] == '1' ? "stream " : "classic", rel, kc.tol.norm, worst,
                    kc.tol.elem);
        EXPECT_LE(rel, kc.tol.norm) << kc.c.name << " " << rows << "x" << cols << " n=" << n;
        EXPECT_LE(worst, kc.tol.elem) << kc.c.name << " " << rows << "x" << cols << " n=" << n;
        // Rows past n untouched (still NaN), and the accumulating launch adds the same sums: bit
        // for bit where a CTA sums whole rows (the classic kernel); the streaming kernel splits
        // an accumulating launch's rows between CTAs (stream-K) and adds their partial sums
        // atomically, so there within float rounding of the row's terms (1e-5 of their L1 sum;
        // a lost or doubled 64-column chunk is orders of magnitude more).
        int64_t touched = 0;
        for (int t = n; t < n_max; ++t)
          for (int64_t r = 0; r < rows; ++r) touched += !std::isnan(y[t * ldy + r]);
        EXPECT_EQ(touched, 0) << kc.c.name << " wrote tokens past n=" << n;
        kernels::launch_matvec_mma(wr->m, kc.kind, dx, ldx, n, dy, ldy, true, false, stream);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(y2.data(), dy, y2.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        int64_t bad = 0;
        for (int t = 0; t < n; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const double want = 2.0 * y[t * ldy + r], got = y2[t * ldy + r];
            bad += sv[0] == '0' ? got != want : !(std::fabs(got - want) <= 1e-5 * l1[t * rows + r]);
          }
        EXPECT_EQ(bad, 0) << kc.c.name << " accumulate n=" << n << " " << (sv[0] == '1' ? "stream" : "classic");
        unsetenv("DUET_MATVEC_STREAM");
        ++ran;
      }
      for (const char* mt : {"1", "2"}) {
        setenv("DUET_MATVEC_MMA_MT", mt, 1);
        setenv("DUET_MATVEC_STREAM_CFG", "4", 1);  // 8 warps, as the classic kernel
        for (const char* sv : {"1", "0"}) {
          setenv("DUET_MATVEC_STREAM", sv, 1);
          kernels::launch_matvec_mma(wr->m, kc.kind, dx, ldx, 8, dy, ldy, false, false, stream);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(sv[0] == '1' ? y.data() : y2.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost),
                    cudaSuccess);
        }
        unsetenv("DUET_MATVEC_STREAM");
        unsetenv("DUET_MATVEC_MMA_MT");
        unsetenv("DUET_MATVEC_STREAM_CFG");
        int64_t differ = 0;
        for (int t = 0; t < 8; ++t)
          for (int64_t r = 0; r < rows; ++r) differ += y[t * ldy + r] != y2[t * ldy + r];
        EXPECT_EQ(differ, 0) << kc.c.name << " " << rows << "x" << cols << " MT " << mt
                             << ": streaming and classic kernels differ";
      }
      cudaFree(dx);
      cudaFree(dy);
    }
  }
  EXPECT_GT(ran, 0);
  cudaStreamDestroy(stream);
}

// The device of the streaming decode kernel's tests (sm_80+, the streaming form selected), into
// *dev; call through ASSERT_NO_FATAL_FAILURE.
void streaming_kernel_device(DeviceInfo* dev) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok()) << dev_r.status().message();
  if (dev_r->sm < 80) GTEST_FAIL() << "the tensor-core decode kernel needs sm_80+; this test runs on such a card";
  ASSERT_TRUE(kernels::matvec_mma_zeroes()) << "the streaming kernel is the default (DUET_MATVEC_STREAM unset)";
  *dev = *dev_r;
}

// Stream-K and the zero side job of the streaming decode kernel (launch_matvec_mma with
// accumulate and zero): a product added into a zeroed y equals the plain product within float
// rounding of its terms (the rows' columns split between CTAs, fewer units than CTAs on the
// 300-row shape, so most rows are split several ways), matches the reference, and the side job
// zeroes exactly its range (NaN-filled before, the float past it untouched).
TEST(MatvecMma, StreamKAddsIntoZeroedOutput) {
  DeviceInfo dev;
  ASSERT_NO_FATAL_FAILURE(streaming_kernel_device(&dev));
  using K = kernels::MatvecMmaKind;
  const Case c8{DType::kF8_E4M3, Fp8Scale::kChannel, "FP8/channel"};
  const Case c16{DType::kF16, Fp8Scale::kNone, "F16"};
  const bool fp8 = dev.sm >= 89;
  const Case& c = fp8 ? c8 : c16;
  const K kind = fp8 ? K::kFp8Hw : K::kF16;
  const std::pair<int64_t, int64_t> shapes[] = {{300, 1024}, {4608, 3584}, {17000, 256}};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  uint64_t seed = 4242;
  for (auto [rows, cols] : shapes) {
    const HostMatrix m = make_matrix(c, rows, cols, seed++);
    auto wr = upload_matrix(m.view(), dev, Fp8Mode::kWeightOnly);
    ASSERT_TRUE(wr.is_ok()) << wr.status().message();
    const int64_t ldx = static_cast<int64_t>(wr->m.row_bytes / dtype_info(wr->m.dtype).type_size);
    const int n = 3;
    const std::vector<float> x = host_rows(n, ldx, cols, seed++);
    std::vector<double> yref, l1;
    reference(m, x, ldx, n, &yref, &l1);
    const int64_t ldy = rows, zn = 12345;
    float *dx = nullptr, *dy = nullptr, *dz = nullptr;
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, static_cast<size_t>(n) * ldy * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dz, (zn + 1) * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<float> plain(static_cast<size_t>(n) * ldy), split(plain.size()), z(zn + 1);
    kernels::launch_matvec_mma(wr->m, kind, dx, ldx, n, dy, ldy, false, false, stream);
    ASSERT_EQ(cudaMemcpyAsync(plain.data(), dy, plain.size() * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dy, 0, plain.size() * 4, stream), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dz, 0xff, (zn + 1) * 4, stream), cudaSuccess);  // NaN
    kernels::launch_matvec_mma(wr->m, kind, dx, ldx, n, dy, ldy, true, false, stream, dz, zn);
    ASSERT_EQ(cudaMemcpyAsync(split.data(), dy, split.size() * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(z.data(), dz, z.size() * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    int64_t far = 0, zeroed = 0;
    for (int t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r)
        far += !(std::fabs(double(split[t * ldy + r]) - plain[t * ldy + r]) <= 1e-5 * l1[t * rows + r]);
    for (int64_t i = 0; i < zn; ++i) zeroed += z[i] == 0.f;
    EXPECT_EQ(far, 0) << c.name << " " << rows << "x" << cols << ": stream-K sums differ from the plain product";
    EXPECT_EQ(zeroed, zn) << c.name << " " << rows << "x" << cols;
    EXPECT_TRUE(std::isnan(z[zn])) << "the side job wrote past its range";
    const auto [rel, worst] = product_errors(split, ldy, yref, l1, n, rows);
    EXPECT_LE(rel, 2e-3) << c.name << " " << rows << "x" << cols;
    EXPECT_LE(worst, 3e-3) << c.name << " " << rows << "x" << cols;
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dz);
  }
  cudaStreamDestroy(stream);
}

// The L2 prefetch-size hint of the streaming kernel's weight copies (128 bytes by default except
// for native FP8 rounding its activations in the kernel; DUET_MATVEC_L2PF=0|64|128|256) changes
// no copy: the products must stay bit-identical (whole units, no atomics: a deterministic order of
// sums), FP8 weight-only and BF16.
TEST(MatvecMma, L2FetchHintLeavesResultsUnchanged) {
  DeviceInfo dev;
  ASSERT_NO_FATAL_FAILURE(streaming_kernel_device(&dev));
  using K = kernels::MatvecMmaKind;
  const int64_t rows = 4608, cols = 3584;
  const int n = 3;
  const std::vector<float> x = host_rows(n, cols, cols, 516);
  float *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, size_t{n} * rows * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const std::pair<Case, K> kinds[] = {{{DType::kF8_E4M3, Fp8Scale::kChannel, "FP8/channel"}, K::kFp8Soft},  // sm_80+
                                      {{DType::kBF16, Fp8Scale::kNone, "BF16"}, K::kBf16}};
  for (const auto& [c, kind] : kinds) {
    auto w = upload_matrix(make_matrix(c, rows, cols, 515).view(), dev, Fp8Mode::kWeightOnly);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    auto run = [&, kind = kind] {
      std::vector<float> y(size_t{n} * rows);
      kernels::launch_matvec_mma(w->m, kind, dx, cols, n, dy, rows, false, false, nullptr);
      EXPECT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      return y;
    };
    setenv("DUET_MATVEC_L2PF", "0", 1);
    const std::vector<float> plain = run();
    unsetenv("DUET_MATVEC_L2PF");
    const std::vector<float> by_default = run();
    EXPECT_EQ(std::memcmp(plain.data(), by_default.data(), plain.size() * 4), 0)
        << c.name << ": the launcher's default hint";
    for (const char* bytes : {"64", "128", "256"}) {
      setenv("DUET_MATVEC_L2PF", bytes, 1);
      const std::vector<float> hinted = run();
      unsetenv("DUET_MATVEC_L2PF");
      EXPECT_EQ(std::memcmp(plain.data(), hinted.data(), plain.size() * 4), 0)
          << c.name << ": DUET_MATVEC_L2PF=" << bytes;
    }
  }
  cudaFree(dx);
  cudaFree(dy);
}

// FP8 products from activations staged once (launch_stage_act_mma + launch_matvec_mma_staged, the
// path MatmulContext takes) round exactly as the kernel's own per-chunk rounding: bit-identical
// products (whole units, no atomics) for weight-only (hardware and bit-arithmetic conversion) and
// native FP8, on a matrix of whole chunks, one whose rows end inside a chunk (1008 columns: 63
// pieces), per-channel and block scales, the short and the tall launch shape, n = 1, 3, 8.
TEST(MatvecMma, StagedActivationsAreBitIdentical) {
  DeviceInfo dev;
  ASSERT_NO_FATAL_FAILURE(streaming_kernel_device(&dev));
  using K = kernels::MatvecMmaKind;
  struct Shape {
    int64_t rows, cols;
    Fp8Scale scale;
  };
  const Shape shapes[] = {{300, 1024, Fp8Scale::kChannel}, {77, 1008, Fp8Scale::kChannel},
                          {4608, 3584, Fp8Scale::kBlock}, {17000, 256, Fp8Scale::kChannel}};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  uint64_t seed = 919;
  int ran = 0;
  for (const K kind : {K::kFp8Soft, K::kFp8Hw, K::kFp8Native}) {
    if (kind != K::kFp8Soft && dev.sm < 89) continue;
    ASSERT_TRUE(kernels::matvec_mma_stages(kind, 8)) << "staging is the default (DUET_MATVEC_STAGE unset)";
    for (const Shape& sh : shapes) {
      const Case c{DType::kF8_E4M3, sh.scale, "FP8"};
      auto w = upload_matrix(make_matrix(c, sh.rows, sh.cols, seed++).view(), dev,
                             kind == K::kFp8Native ? Fp8Mode::kNative : Fp8Mode::kWeightOnly);
      ASSERT_TRUE(w.is_ok()) << w.status().message();
      ASSERT_TRUE(kernels::matvec_mma_fits(w->m, kind));
      const int64_t n_pieces = static_cast<int64_t>(w->m.row_bytes / 16);
      const int64_t ldx = (n_pieces + 3) / 4 * 64 + 4;  // x zero beyond its columns (the kernel's contract)
      const int n_max = 8;
      const std::vector<float> x = host_rows(n_max, ldx, sh.cols, seed++);
      const kernels::MatvecMmaStage st = kernels::matvec_mma_stage_size(n_max, sh.cols);
      float *dx = nullptr, *dy = nullptr, *dsc = nullptr;
      void* dq = nullptr;
      ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dy, static_cast<size_t>(n_max) * sh.rows * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dq, st.xs_bytes), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dsc, st.xsc_floats * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(dq, 0, st.xs_bytes), cudaSuccess);
      ASSERT_EQ(cudaMemset(dsc, 0, st.xsc_floats * 4), cudaSuccess);
      for (int n : {8, 3, 1}) {  // 8 first: fewer tokens then find stale, finite staged rows past n
        std::vector<float> own(static_cast<size_t>(n) * sh.rows), pre(own.size());
        kernels::launch_matvec_mma(w->m, kind, dx, ldx, n, dy, sh.rows, false, false, stream);
        ASSERT_EQ(cudaMemcpyAsync(own.data(), dy, own.size() * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
        ASSERT_EQ(cudaMemsetAsync(dy, 0xff, own.size() * 4, stream), cudaSuccess);
        kernels::launch_stage_act_mma(w->m, kind, dx, ldx, n, dq, dsc, false, stream);
        kernels::launch_matvec_mma_staged(w->m, kind, dq, dsc, n, dy, sh.rows, false, false, stream);
        ASSERT_EQ(cudaMemcpyAsync(pre.data(), dy, pre.size() * 4, cudaMemcpyDeviceToHost, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        int64_t differ = 0, nonzero = 0;
        for (size_t i = 0; i < own.size(); ++i) {
          differ += own[i] != pre[i];
          nonzero += own[i] != 0.f;
        }
        EXPECT_EQ(differ, 0) << static_cast<int>(kind) << " " << sh.rows << "x" << sh.cols << " n=" << n;
        EXPECT_GT(nonzero, static_cast<int64_t>(own.size()) / 2);  // real products, not zeros on both sides
        ++ran;
      }
      cudaFree(dx);
      cudaFree(dy);
      cudaFree(dq);
      cudaFree(dsc);
    }
  }
  EXPECT_GT(ran, 0);
  cudaStreamDestroy(stream);
}

TEST_P(MatmulParity, GetRowsIsExact) {
  fail_without_device();
  const Case& c = kCases[GetParam()];
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok()) << dev_r.status().message();
  const auto [rows, cols] = shapes_for(c.dtype)[0];
  const HostMatrix m = make_matrix(c, rows, cols, 99 + GetParam());
  const std::vector<int32_t> ids = {0, 5, static_cast<int32_t>(rows - 1), 5, 17};
  const float scale = 0.37f;
  int32_t* dids = nullptr;
  float* dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dids, ids.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, ids.size() * cols * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (KernelPath kp : {KernelPath::kNative, KernelPath::kGeneric}) {
    DeviceInfo dev = *dev_r;
    dev.path = kp;
    auto wr = upload_matrix(m.view(), dev, Fp8Mode::kAuto);
    ASSERT_TRUE(wr.is_ok()) << wr.status().message();
    MatmulContext ctx(dev, Fp8Mode::kAuto);
    ctx.reserve(1, cols, rows);
    ctx.get_rows(wr->m, dids, static_cast<int>(ids.size()), scale, dout, nullptr);
    std::vector<float> out(ids.size() * cols);
    ASSERT_EQ(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t bad = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t k = 0; k < cols; ++k) {
        float v = m.deq[ids[i] * cols + k];
        // BF16 on the generic path is stored as F16 (exact for these magnitudes, but say it).
        if (c.dtype == DType::kBF16 && !dev.use_bf16()) v = f16_to_f32(f32_to_f16(v));
        const float want = v * scale;
        if (!(out[i * cols + k] == want) && bad++ < 5)
          ADD_FAILURE() << c.name << " " << kernel_path_name(kp) << " row " << ids[i] << " col " << k << ": got "
                        << out[i * cols + k] << " want " << want;
      }
    EXPECT_EQ(bad, 0) << c.name << " " << kernel_path_name(kp);
  }
  cudaFree(dids);
  cudaFree(dout);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulParity, ::testing::Range(0, static_cast<int>(std::size(kCases))),
                         [](const ::testing::TestParamInfo<int>& i) {
                           std::string s = kCases[i.param].name;
                           for (auto& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// Bad matrices from a file come back as a Status, never an abort.
TEST(MatmulUpload, RejectsBadInput) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok());
  const HostMatrix q = make_matrix({DType::kQ4_K, Fp8Scale::kNone, "Q4_K"}, 4, 256, 1);
  WeightMatrix w = q.view();
  w.dtype = DType::kQ8_K;  // an activation type: no GPU matmul
  EXPECT_FALSE(upload_matrix(w, *dev_r, Fp8Mode::kAuto).is_ok());
  w = q.view();
  w.n_cols = 300;  // not a multiple of the 256-block
  EXPECT_FALSE(upload_matrix(w, *dev_r, Fp8Mode::kAuto).is_ok());
  w = q.view();
  w.row_bytes = 100;  // shorter than a row of 256 Q4_K values (144 bytes)
  EXPECT_FALSE(upload_matrix(w, *dev_r, Fp8Mode::kAuto).is_ok());
  const HostMatrix f = make_matrix({DType::kF8_E4M3, Fp8Scale::kBlock, "FP8"}, 4, 256, 2);
  w = f.view();
  w.fp8_scales = nullptr;
  EXPECT_FALSE(upload_matrix(w, *dev_r, Fp8Mode::kAuto).is_ok());
  w = f.view();
  w.fp8_block_cols = 100;  // scale blocks the kernels cannot split rows into
  w.fp8_scale_cols = 3;
  EXPECT_FALSE(upload_matrix(w, *dev_r, Fp8Mode::kAuto).is_ok());
  EXPECT_TRUE(upload_matrix(f.view(), *dev_r, Fp8Mode::kAuto).is_ok());
  // BF16 weights where they run as F16 (the generic path; a card without BF16): one weight past
  // F16's range refuses the matrix, where BF16 runs as BF16 it uploads.
  HostMatrix b = make_matrix({DType::kBF16, Fp8Scale::kNone, "BF16"}, 4, 256, 3);
  const uint16_t big = f32_to_bf16(1.0e5f);
  std::memcpy(b.data.data() + b.row_bytes + 2 * 7, &big, 2);  // row 1, column 7
  DeviceInfo generic = *dev_r;
  generic.path = KernelPath::kGeneric;
  auto g = upload_matrix(b.view(), generic, Fp8Mode::kAuto);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("beyond F16's range"), std::string::npos) << g.status().message();
  if (dev_r->use_bf16()) {
    EXPECT_TRUE(upload_matrix(b.view(), *dev_r, Fp8Mode::kAuto).is_ok());
  }
}

// Two K-quant products of one int8 input in one launch (matmul_q8_pair, Q4_K_M's [wq; wk] and
// Q6_K wv): every output bit-identical to its own matmul_q8 launch (each part runs the same
// kernel body with its own thread mapping and variant), for Q4_K + Q6_K, Q6_K + Q4_K and
// Q4_K + Q4_K, native and generic paths, n = 1, 2, 5, 8 (on the native path of sm_80+ cards
// batches from MatmulContext::mma_min_tokens() rows take the tensor-core kernel: no pair). Rows chosen so that both parts take
// variant 1 (Q4_K parts of >= 1024 rows, Q6_K parts of < 1024), or for one token the preload
// variant 4 (2304 Q4_K rows); and one pair the kernel does not take.
// One-token K-quant products of 7B shapes through the launcher (kquant_variant 3: 8192 rows or
// columns and more), Q4_K's there in the uncapped instance by default: within the int8-activation
// bound of the reference, bit-identical to the register-capped instance (cap_registers,
// DUET_MATVEC_MINB=1: same arithmetic, another register allocation, 3-row groups on the 8197-row
// shape), and accumulating
// adds the same sum again (y + y, exact). Both kernel paths. 8197 rows end inside a block of row
// groups; Q6_K (never capped) checks the same bounds.
TEST(MatvecKquantCap, LongMatricesOneToken) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok()) << dev_r.status().message();
  const Case q4{DType::kQ4_K, Fp8Scale::kNone, "Q4_K"}, q6{DType::kQ6_K, Fp8Scale::kNone, "Q6_K"};
  struct Shape {
    Case c;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{q4, 8197, 3584}, {q4, 3584, 18944}, {q6, 3584, 18944}};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  uint64_t seed = 4321;
  for (const Shape& sh : shapes) {
    const HostMatrix m = make_matrix(sh.c, sh.rows, sh.cols, seed++);
    std::vector<float> x(sh.cols);
    std::mt19937_64 rng(seed++);
    std::normal_distribution<float> g(0.f, 1.f);
    for (auto& v : x) v = g(rng);
    std::vector<double> yref, l1;
    reference(m, x, sh.cols, 1, &yref, &l1);
    for (KernelPath path : {KernelPath::kNative, KernelPath::kGeneric}) {
      DeviceInfo dev = *dev_r;
      dev.path = path;
      auto w = upload_matrix(m.view(), dev, Fp8Mode::kAuto);
      ASSERT_TRUE(w.is_ok()) << w.status().message();
      MatmulContext ctx(dev, Fp8Mode::kAuto);
      ctx.reserve(1, sh.cols, sh.rows);
      float* dx = nullptr;
      float* dy = nullptr;
      ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dy, sh.rows * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      // One product with `knob` set to "1" (null: the defaults); y starts as NaN unless accumulating.
      auto run = [&](const char* knob, bool accumulate) {
        if (knob) setenv(knob, "1", 1);
        if (!accumulate) {
          EXPECT_EQ(cudaMemsetAsync(dy, 0xff, sh.rows * 4, stream), cudaSuccess);
        }
        ctx.matmul(w->m, dx, sh.cols, 1, dy, sh.rows, stream, accumulate);
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        if (knob) unsetenv(knob);
        std::vector<float> y(sh.rows);
        EXPECT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        return y;
      };
      const std::vector<float> yd = run(nullptr, false);
      const std::vector<float> y2 = run(nullptr, true);
      const std::vector<float> yu = run("DUET_MATVEC_MINB", false);
      const auto [rel, worst] = product_errors(yd, sh.rows, yref, l1, 1, sh.rows);
      int64_t off_cap = 0, off_acc = 0;
      for (int64_t r = 0; r < sh.rows; ++r) {
        off_cap += std::memcmp(&yd[r], &yu[r], 4) != 0;
        off_acc += y2[r] != 2.0f * yd[r];
      }
      const char* pn = path == KernelPath::kNative ? "native" : "generic";
      std::printf("  %s %5lld x %-5lld %-7s norm %.2e elem %.2e (<= 2e-2); %lld rows differ with the register "
                  "cap, %lld accumulating\n",
                  sh.c.name, (long long)sh.rows, (long long)sh.cols, pn, rel, worst, (long long)off_cap,
                  (long long)off_acc);
      EXPECT_LE(rel, 0.02) << sh.c.name << " " << pn;
      EXPECT_LE(worst, 0.02) << sh.c.name << " " << pn;
      EXPECT_EQ(off_cap, 0) << sh.c.name << " " << pn;
      EXPECT_EQ(off_acc, 0) << sh.c.name << " " << pn;
      cudaFree(dx);
      cudaFree(dy);
    }
  }
  cudaStreamDestroy(stream);
}

TEST(MatmulPair, EqualsSeparateLaunches) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok());
  const Case q4{DType::kQ4_K, Fp8Scale::kNone, "Q4_K"}, q6{DType::kQ6_K, Fp8Scale::kNone, "Q6_K"};
  struct Pair {
    Case a, b;
    int64_t rows_a, rows_b;
    bool paired;  // whether matmul_q8_pair takes it
  };
  // 2304 Q4_K rows: one token takes the preload variant (4) in both forms. A Q4_K part under 1024
  // rows has a variant of its own (2: one row per thread group) that the pair kernel does not
  // run: matmul_q8_pair declines, and the caller launches the two products separately.
  const Pair pairs[] = {{q4, q6, 1100, 77, true},   {q6, q4, 600, 1100, true}, {q4, q4, 1030, 1100, true},
                        {q4, q6, 2304, 77, true},   {q4, q4, 1030, 300, false}};
  const int64_t cols = 2816;
  const int64_t ldy = 2304 + 77 + 8;
  float* dx = device_randn(8 * cols, 12);
  float* dy = nullptr;
  ASSERT_TRUE(dx != nullptr);
  ASSERT_EQ(cudaMalloc(&dy, 2 * 8 * ldy * 4), cudaSuccess);
  uint64_t seed = 77;
  for (const Pair& pr : pairs) {
    const HostMatrix ma = make_matrix(pr.a, pr.rows_a, cols, seed++), mb = make_matrix(pr.b, pr.rows_b, cols, seed++);
    for (KernelPath path : {KernelPath::kNative, KernelPath::kGeneric}) {
      DeviceInfo dev = *dev_r;
      dev.path = path;
      auto wa = upload_matrix(ma.view(), dev, Fp8Mode::kAuto);
      auto wb = upload_matrix(mb.view(), dev, Fp8Mode::kAuto);
      ASSERT_TRUE(wa.is_ok() && wb.is_ok());
      MatmulContext ctx(dev, Fp8Mode::kAuto);
      ctx.reserve(8, cols, 2304);
      for (int n : {1, 2, 5, 8}) {
        float* sep = dy;
        float* pair = dy + 8 * ldy;
        if (!ctx.takes_q8(wa->m, n) || !ctx.takes_q8(wb->m, n)) {
          // The quantized tensor-core kernel takes these batches (native sm_80+, from
          // mma_min_tokens() rows): no int8 input, and the pair declines.
          EXPECT_TRUE(ctx.takes_mma(wa->m, n) || ctx.takes_mma(wb->m, n)) << pr.a.name << " n=" << n;
          EXPECT_FALSE(ctx.matmul_q8_pair(wa->m, pair, wb->m, pair + pr.rows_a, ldy, n, nullptr));
          continue;
        }
        ASSERT_EQ(cudaMemset(dy, 0xff, 2 * 8 * ldy * 4), cudaSuccess);
        // Separate launches, then the pair on the int8 input they left in q8_input().
        ctx.matmul(wa->m, dx, cols, n, sep, ldy, nullptr);
        ctx.matmul_q8(wb->m, n, sep + pr.rows_a, ldy, nullptr);
        const bool took = ctx.matmul_q8_pair(wa->m, pair, wb->m, pair + pr.rows_a, ldy, n, nullptr);
        EXPECT_EQ(took, pr.paired) << pr.a.name << " + " << pr.b.name << " n=" << n;
        if (!took) continue;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<float> hs(static_cast<size_t>(n) * ldy), hp(hs.size());
        ASSERT_EQ(cudaMemcpy(hs.data(), sep, hs.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(hp.data(), pair, hp.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        int64_t diff = 0;
        for (int t = 0; t < n; ++t)
          for (int64_t r = 0; r < pr.rows_a + pr.rows_b; ++r)
            diff += std::memcmp(&hs[t * ldy + r], &hp[t * ldy + r], 4) != 0;
        std::printf("  pair %s %lld + %s %lld, %s, n=%d: %lld outputs differ\n", pr.a.name, (long long)pr.rows_a,
                    pr.b.name, (long long)pr.rows_b, path == KernelPath::kNative ? "native" : "generic", n,
                    (long long)diff);
        EXPECT_EQ(diff, 0) << pr.a.name << " + " << pr.b.name << " n=" << n;
      }
    }
  }
  cudaFree(dx);
  cudaFree(dy);
}

// matmul_fp8_rows on E4M3 rows a producer wrote (here launch_quantize_act_fp8_rows, the
// quantizer matmul() itself runs): the plain form equals matmul()'s output, and the accumulating
// form (cuBLASLt's beta = 1, in place) adds the same product into y. The epilogue rounds
// scale * sum + y once where the two steps round twice: bound 2^-22 of |y| + |product|. Needs
// the native FP8 path (sm_89+, cuBLAS with outer-vector scales).
TEST(MatmulFp8Rows, PlainAndAccumulating) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok()) << dev_r.status().message();
  if (!dev_r->use_fp8()) GTEST_SKIP() << "no FP8 tensor cores on this device";
  const Case c{DType::kF8_E4M3, Fp8Scale::kChannel, "FP8/channel"};
  const int64_t rows = 320, cols = 896;
  const int n = 64;
  const HostMatrix m = make_matrix(c, rows, cols, 91);
  auto w = upload_matrix(m.view(), *dev_r, Fp8Mode::kNative);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  MatmulContext ctx(*dev_r, Fp8Mode::kNative);
  ctx.reserve(n, cols, rows);
  float* dx = device_randn(static_cast<size_t>(n) * cols, 92);
  float* d0 = device_randn(static_cast<size_t>(n) * rows, 93);  // what y holds before accumulating
  float *dref = nullptr, *dplain = nullptr, *dacc = nullptr;
  ASSERT_TRUE(dx != nullptr && d0 != nullptr);
  const size_t bytes = static_cast<size_t>(n) * rows * 4;
  ASSERT_EQ(cudaMalloc(&dref, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dplain, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dacc, bytes), cudaSuccess);
  ctx.matmul(w->m, dx, cols, n, dref, rows, nullptr);  // the first per-row product: takes_fp8_rows from here on
  ASSERT_TRUE(ctx.takes_fp8_rows(w->m, n));
  const MatmulContext::Fp8RowsInput f8 = ctx.fp8_rows_input(w->m);
  kernels::launch_quantize_act_fp8_rows(dx, cols, n, cols, f8.q, f8.ld, f8.scales, nullptr);
  ASSERT_TRUE(ctx.matmul_fp8_rows(w->m, n, dplain, rows, nullptr));
  ASSERT_EQ(cudaMemcpy(dacc, d0, bytes, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_TRUE(ctx.matmul_fp8_rows(w->m, n, dacc, rows, nullptr, /*accumulate=*/true));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> ref(static_cast<size_t>(n) * rows), plain(ref.size()), acc(ref.size()), y0(ref.size());
  ASSERT_EQ(cudaMemcpy(ref.data(), dref, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(plain.data(), dplain, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(acc.data(), dacc, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(y0.data(), d0, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  int64_t bad_plain = 0, bad_acc = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    bad_plain += std::fabs(plain[i] - ref[i]) > std::ldexp(std::fabs(ref[i]), -22) + 1e-30;
    const double want = double(y0[i]) + ref[i];
    const double err = std::fabs(acc[i] - want);
    worst = std::max(worst, err / (std::fabs(y0[i]) + std::fabs(ref[i]) + 1e-30));
    bad_acc += err > std::ldexp(std::fabs(y0[i]) + std::fabs(ref[i]), -22) + 1e-30;
  }
  std::printf("  fp8 rows %lld x %lld, n = %d: plain %lld differ from matmul(), accumulating worst %.2e relative\n",
              (long long)rows, (long long)cols, n, (long long)bad_plain, worst);
  EXPECT_EQ(bad_plain, 0);
  EXPECT_EQ(bad_acc, 0);
  for (float* p : {dx, d0, dref, dplain, dacc}) cudaFree(p);
}

// Native FP8 decode (1-8 rows) takes the E4M3 x E4M3 mma kind only where mma.sync E4M3 is an FP8
// tensor-core instruction (sm_89, sm_120+; DUET_FP8_NATIVE_DECODE forces either kind). On sm_90 /
// sm_100 it takes the weight-only kind, so its products are bit-identical to the weight-only
// context's (same kernel, same F16 activations); elsewhere they differ by E4M3 activation rounding.
TEST(MatmulFp8NativeDecode, KernelFollowsTheCard) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok()) << dev_r.status().message();
  if (!dev_r->use_fp8()) GTEST_SKIP() << "no FP8 on this device or path";
  const char* forced = std::getenv("DUET_FP8_NATIVE_DECODE");
  const bool e4m3 = forced && std::strcmp(forced, "e4m3") == 0   ? true
                    : forced && std::strcmp(forced, "f16") == 0 ? false
                                                                 : dev_r->has_fp8_mma_sync;
  const Case c{DType::kF8_E4M3, Fp8Scale::kChannel, "FP8/channel"};
  const int64_t rows = 320, cols = 896;
  const HostMatrix m = make_matrix(c, rows, cols, 77);
  auto wn = upload_matrix(m.view(), *dev_r, Fp8Mode::kNative);
  auto ww = upload_matrix(m.view(), *dev_r, Fp8Mode::kWeightOnly);
  ASSERT_TRUE(wn.is_ok() && ww.is_ok());
  MatmulContext native(*dev_r, Fp8Mode::kNative), weight_only(*dev_r, Fp8Mode::kWeightOnly);
  native.reserve(8, cols, rows);
  weight_only.reserve(8, cols, rows);
  float* dx = device_randn(8 * cols, 78);
  float *dn = nullptr, *dw = nullptr;
  ASSERT_TRUE(dx != nullptr);
  ASSERT_EQ(cudaMalloc(&dn, 8 * rows * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dw, 8 * rows * 4), cudaSuccess);
  std::printf("  %s (sm_%d): native decode multiplies %s\n", dev_r->name.c_str(), dev_r->sm,
              e4m3 ? "E4M3 x E4M3" : "as weight-only (F16 activations)");
  for (int n : {1, 3, 8}) {
    const auto want = e4m3 ? MatmulContext::DecodeInput::kE4M3 : MatmulContext::DecodeInput::kF16;
    EXPECT_EQ(native.decode_input(wn->m, n), want) << "n = " << n;
    EXPECT_EQ(weight_only.decode_input(ww->m, n), MatmulContext::DecodeInput::kF16) << "n = " << n;
    native.matmul(wn->m, dx, cols, n, dn, rows, nullptr);
    weight_only.matmul(ww->m, dx, cols, n, dw, rows, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> yn(static_cast<size_t>(n) * rows), yw(yn.size());
    ASSERT_EQ(cudaMemcpy(yn.data(), dn, yn.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(yw.data(), dw, yw.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t differ = 0;
    for (size_t i = 0; i < yn.size(); ++i) differ += yn[i] != yw[i];
    std::printf("  n = %d: %lld of %zu outputs differ from weight-only\n", n, (long long)differ, yn.size());
    if (e4m3) EXPECT_GT(differ, 0) << "E4M3 activations should round differently, n = " << n;
    else EXPECT_EQ(differ, 0) << "n = " << n;
  }
  for (float* p : {dx, dn, dw}) cudaFree(p);
}

// After reserve(), matmul() must be capturable in a CUDA graph (no allocation, no sync): capture a
// decode and a prompt product and check the replay against eager calls.
TEST(MatmulGraph, CaptureAndReplay) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok());
  const Case graph_cases[] = {{DType::kQ4_K, Fp8Scale::kNone, "Q4_K"},
                              {DType::kBF16, Fp8Scale::kNone, "BF16"},
                              {DType::kF8_E4M3, Fp8Scale::kChannel, "FP8/channel"}};
  const int64_t rows = 300, cols = 768;
  float* dx = device_randn(64 * cols, 11);
  float* dy = nullptr;
  ASSERT_TRUE(dx != nullptr);
  ASSERT_EQ(cudaMalloc(&dy, 2 * 64 * rows * 4), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  for (const Case& c : graph_cases) {
    const HostMatrix m = make_matrix(c, rows, cols, 5);
    auto wr = upload_matrix(m.view(), *dev_r, Fp8Mode::kAuto);
    ASSERT_TRUE(wr.is_ok()) << wr.status().message();
    MatmulContext ctx(*dev_r, Fp8Mode::kAuto);
    ctx.reserve(64, cols, rows);
    auto run = [&] {
      ctx.matmul(wr->m, dx, cols, 1, dy, rows, s);
      ctx.matmul(wr->m, dx, cols, 64, dy + 64 * rows, rows, s);
    };
    run();  // eager (also creates any per-shape host plans)
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<float> eager(2 * 64 * rows), replay(2 * 64 * rows);
    ASSERT_EQ(cudaMemcpy(eager.data(), dy, eager.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemset(dy, 0, eager.size() * 4), cudaSuccess);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    run();
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess) << c.name;
    ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(replay.data(), dy, replay.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    double worst = 0;
    for (int64_t i = 0; i < rows; ++i) worst = std::max<double>(worst, std::fabs(replay[i] - eager[i]));
    for (int64_t i = 64 * rows; i < 65 * rows; ++i)
      worst = std::max<double>(worst, std::fabs(replay[i] - eager[i]) / (1 + std::fabs(eager[i])));
    EXPECT_LE(worst, 1e-5) << c.name;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(s);
  cudaFree(dx);
  cudaFree(dy);
}

// --- Benchmark (prints, never fails on speed) ---

constexpr double kHbmGBs = 4300.0;       // H200 device-to-device copy, measured (BENCHMARKS.md)
constexpr double kBf16Tflops = 790.0;    // H200 large bf16 GEMM, measured

struct BenchType {
  DType dtype;
  const char* name;
};

// Device bytes of a random matrix in the layout upload_matrix would produce (random bytes: the
// speed of these kernels does not depend on the values).
struct BenchMatrix {
  DeviceMatrix m;
  size_t bytes = 0;  // weight bytes read per product
  std::vector<void*> copies;
  float* scales = nullptr;
};

class RandomPool {
 public:
  RandomPool() {
    std::vector<uint64_t> h(kBytes / 8);
    std::mt19937_64 rng(7);
    for (auto& v : h) v = rng();
    DUET_CUDA_CHECK(cudaMalloc(&p_, kBytes));
    DUET_CUDA_CHECK(cudaMemcpy(p_, h.data(), kBytes, cudaMemcpyHostToDevice));
  }
  ~RandomPool() { cudaFree(p_); }
  void fill(void* dst, size_t bytes) const {
    for (size_t off = 0; off < bytes; off += kBytes)
      DUET_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(dst) + off, p_,
                                 std::min(kBytes, bytes - off), cudaMemcpyDeviceToDevice));
  }

 private:
  static constexpr size_t kBytes = size_t{64} << 20;
  void* p_ = nullptr;
};

BenchMatrix make_bench(DType t, int64_t rows, int64_t cols, const RandomPool& pool, size_t min_total) {
  BenchMatrix b;
  b.m.dtype = t;
  b.m.n_rows = rows;
  b.m.n_cols = cols;
  b.m.row_bytes = *row_bytes(t, static_cast<uint64_t>(cols));
  b.bytes = b.m.row_bytes * rows;
  if (t == DType::kF8_E4M3) {
    std::vector<float> ones(rows, 1.f);
    DUET_CUDA_CHECK(cudaMalloc(&b.scales, rows * 4));
    DUET_CUDA_CHECK(cudaMemcpy(b.scales, ones.data(), rows * 4, cudaMemcpyHostToDevice));
    b.m.fp8_scales = b.scales;
    b.m.fp8_block_rows = 1;
    b.m.fp8_block_cols = cols;
    b.m.fp8_scale_cols = 1;
    b.bytes += rows * 4;
  }
  // Enough copies that the set read in turn is well beyond the 50 MB L2.
  const size_t n = std::clamp<size_t>((min_total + b.bytes - 1) / b.bytes, 1, 128);
  for (size_t i = 0; i < n; ++i) {
    void* p = nullptr;
    DUET_CUDA_CHECK(cudaMalloc(&p, b.m.row_bytes * rows));
    pool.fill(p, b.m.row_bytes * rows);
    b.copies.push_back(p);
  }
  b.m.data = b.copies[0];
  return b;
}

void free_bench(BenchMatrix& b) {
  for (void* p : b.copies) cudaFree(p);
  if (b.scales) cudaFree(b.scales);
}

const std::pair<int64_t, int64_t> kQwenShapes[] = {
    {3584, 3584}, {512, 3584}, {18944, 3584}, {3584, 18944}, {152064, 3584}};

// Mean time of `iters` calls (after 2 warm-up calls), cycling through the copies. Decode calls
// (n <= 8) are captured in one CUDA graph and replayed, as the runner does, so the figure is GPU
// time rather than the CPU's launch rate; prompt calls are issued eagerly.
double time_calls(MatmulContext& ctx, BenchMatrix& b, const float* x, int n, float* y, int iters,
                  cudaStream_t s) {
  cudaEvent_t e0, e1;
  DUET_CUDA_CHECK(cudaEventCreate(&e0));
  DUET_CUDA_CHECK(cudaEventCreate(&e1));
  DeviceMatrix m = b.m;
  for (int i = 0; i < 2; ++i) ctx.matmul(m, x, m.n_cols, n, y, m.n_rows, s);
  auto issue = [&] {
    for (int i = 0; i < iters; ++i) {
      m.data = b.copies[i % b.copies.size()];
      ctx.matmul(m, x, m.n_cols, n, y, m.n_rows, s);
    }
  };
  cudaGraphExec_t exec = nullptr;
  if (n <= 8) {
    cudaGraph_t graph;
    DUET_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    issue();
    DUET_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    DUET_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
    DUET_CUDA_CHECK(cudaGraphDestroy(graph));
    DUET_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up replay
  }
  DUET_CUDA_CHECK(cudaEventRecord(e0, s));
  if (exec) DUET_CUDA_CHECK(cudaGraphLaunch(exec, s));
  else issue();
  DUET_CUDA_CHECK(cudaEventRecord(e1, s));
  DUET_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  DUET_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  if (exec) DUET_CUDA_CHECK(cudaGraphExecDestroy(exec));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / 1e3 / iters;
}

TEST(MatmulBench, DecodeAndPrompt) {
  fail_without_device();
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok());
  const DeviceInfo dev = *dev_r;
  std::printf("device %s sm_%d, %d SMs, %.0f GB/s theoretical\n", dev.name.c_str(), dev.sm, dev.n_sms,
              dev.mem_bandwidth_gbs);
  RandomPool pool;
  cudaStream_t s;
  DUET_CUDA_CHECK(cudaStreamCreate(&s));
  const int max_n = 2048;
  float *x = nullptr, *y = nullptr;
  DUET_CUDA_CHECK(cudaMalloc(&x, size_t{max_n} * 18944 * 4));
  DUET_CUDA_CHECK(cudaMalloc(&y, size_t{max_n} * 152064 * 4));
  {
    std::vector<float> hx(size_t{max_n} * 18944);
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0.f, 1.f);
    for (auto& v : hx) v = g(rng);
    DUET_CUDA_CHECK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  }
  MatmulContext ctx(dev, Fp8Mode::kAuto);
  MatmulContext ctx_wo(dev, Fp8Mode::kWeightOnly);
  DeviceInfo gen = dev;
  gen.path = KernelPath::kGeneric;
  MatmulContext ctx_gen(gen, Fp8Mode::kWeightOnly);  // FP8 weight-only with the sm_70 decode
  ctx.reserve(max_n, 18944, 152064);
  ctx_wo.reserve(8, 18944, 152064);
  ctx_gen.reserve(8, 18944, 152064);

  struct DecodeType {
    DType dtype;
    const char* name;
    MatmulContext* ctx;
    bool piece_kernel;  // Q4_K/Q6_K/FP8: kernels with DUET_MATVEC_VARIANT and a legacy kernel
  };
  const DecodeType decode_types[] = {
      {DType::kQ4_K, "Q4_K", &ctx, true},           {DType::kQ6_K, "Q6_K", &ctx, true},
      {DType::kF8_E4M3, "FP8-wo", &ctx_wo, true},   {DType::kF8_E4M3, "FP8-gen", &ctx_gen, true},
      {DType::kF8_E4M3, "FP8-nat", &ctx, true},
      {DType::kQ8_0, "Q8_0", &ctx, false},          {DType::kF16, "F16", &ctx, false},
      {DType::kBF16, "BF16", &ctx, false}};
  // DUET_MATMUL_BENCH_KQUANT=only: the one-token K-quant comparison below and nothing else.
  const char* kquant_env = std::getenv("DUET_MATMUL_BENCH_KQUANT");
  const bool kquant_only = kquant_env != nullptr && std::strcmp(kquant_env, "only") == 0;
  std::printf("\ndecode (bytes = weight bytes per product; %% of %.0f GB/s)\n", kHbmGBs);
  std::string summary;
  for (const auto& bt : decode_types) {
    if (kquant_only) break;
    for (auto [rows, cols] : kQwenShapes) {
      BenchMatrix b = make_bench(bt.dtype, rows, cols, pool, size_t{512} << 20);
      MatmulContext& c = *bt.ctx;
      for (int n : {1, 2, 4, 8}) {
        if (n > 1 && rows != 18944) continue;
        const double t = time_calls(c, b, x, n, y, 30, s);
        const double gbs = b.bytes / t / 1e9;
        std::printf("  %-7s %6lld x %-6lld n=%d  %8.1f us  %7.0f GB/s  %5.1f%%\n", bt.name, (long long)rows,
                    (long long)cols, n, t * 1e6, gbs, 100 * gbs / kHbmGBs);
        char line[160];
        std::snprintf(line, sizeof line, "%-7s %6lld x %-6lld n=%d %6.0f GB/s %5.1f%%\n", bt.name, (long long)rows,
                      (long long)cols, n, gbs, 100 * gbs / kHbmGBs);
        summary += line;
      }
      // The other launch shapes, n = 1: grids capped at the resident blocks (the K-quant kernels'
      // alternative; the staged FP8 kernel's default) and FP8 without shared-memory staging.
      for (const char* knob : {"DUET_MATVEC_PERSISTENT", "DUET_MATVEC_FP8_SMEM"}) {
        const bool fp8 = bt.dtype == DType::kF8_E4M3;
        if (std::strcmp(knob, "DUET_MATVEC_FP8_SMEM") == 0 && !fp8) continue;
        if (std::strcmp(knob, "DUET_MATVEC_PERSISTENT") == 0 && !fp8 && bt.dtype != DType::kQ4_K &&
            bt.dtype != DType::kQ6_K)
          continue;
        const char* value = std::strcmp(knob, "DUET_MATVEC_PERSISTENT") == 0 && !fp8 ? "1" : "0";
        setenv(knob, value, 1);
        const double t = time_calls(c, b, x, 1, y, 30, s);
        const double gbs = b.bytes / t / 1e9;
        std::printf("    %s=%s n=1  %8.1f us  %7.0f GB/s  %5.1f%%\n", knob, value, t * 1e6, gbs, 100 * gbs / kHbmGBs);
        unsetenv(knob);
      }
      // DUET_MATMUL_BENCH_QUICK=1: launcher defaults only (the sweeps below take minutes).
      if (std::getenv("DUET_MATMUL_BENCH_QUICK") != nullptr) {
        free_bench(b);
        continue;
      }
      // Variants (DUET_MATVEC_VARIANT: rows per group x loads in flight, see quant_matvec.cu) at
      // n = 1 (and 2, 8 on the 18944-row shape); threads per row (DUET_MATVEC_THREADS_PER_ROW)
      // on the short matrices; the legacy one-chunk-per-thread kernel.
      if (bt.piece_kernel) {
        for (int n : {1, 2, 8}) {
          if (n > 1 && rows != 18944) continue;
          for (const char* v : {"0", "1", "2", "3"}) {
            setenv("DUET_MATVEC_VARIANT", v, 1);
            const double t = time_calls(c, b, x, n, y, 30, s);
            const double gbs = b.bytes / t / 1e9;
            std::printf("    variant %s n=%d  %8.1f us  %7.0f GB/s  %5.1f%%\n", v, n, t * 1e6, gbs, 100 * gbs / kHbmGBs);
          }
          unsetenv("DUET_MATVEC_VARIANT");
        }
        if (rows <= 3584 && cols == 3584) {
          for (const char* tpr : {"32", "64", "128"}) {
            setenv("DUET_MATVEC_THREADS_PER_ROW", tpr, 1);
            const double t = time_calls(c, b, x, 1, y, 30, s);
            const double gbs = b.bytes / t / 1e9;
            std::printf("    threads/row %-3s n=1  %8.1f us  %7.0f GB/s  %5.1f%%\n", tpr, t * 1e6, gbs, 100 * gbs / kHbmGBs);
          }
          unsetenv("DUET_MATVEC_THREADS_PER_ROW");
        }
        setenv("DUET_MATVEC_LEGACY", "1", 1);
        for (int n : {1, 8}) {
          if (n > 1 && rows != 18944) continue;
          const double t = time_calls(c, b, x, n, y, 30, s);
          const double gbs = b.bytes / t / 1e9;
          std::printf("    legacy kernel n=%d  %8.1f us  %7.0f GB/s  %5.1f%%\n", n, t * 1e6, gbs, 100 * gbs / kHbmGBs);
        }
        unsetenv("DUET_MATVEC_LEGACY");
      }
      free_bench(b);
    }
  }
  std::printf("\ndecode summary (launcher defaults)\n%s", summary.c_str());
  // DUET_MATMUL_BENCH_STREAM=1: the tensor-core decode kernel's streaming form under each
  // DUET_MATVEC_STREAM_CFG and tiles per unit, against the classic form (DUET_MATVEC_STREAM=0).
  if (std::getenv("DUET_MATMUL_BENCH_STREAM") != nullptr && dev.path == KernelPath::kNative && dev.sm >= 80) {
    std::printf("\ntensor-core decode kernel: streaming (DUET_MATVEC_STREAM_CFG x DUET_MATVEC_MMA_MT) and classic\n");
    const DecodeType stream_types[] = {{DType::kF8_E4M3, "FP8-wo", &ctx_wo, false},
                                       {DType::kF8_E4M3, "FP8-nat", &ctx, false},
                                       {DType::kBF16, "BF16", &ctx, false}};
    for (const auto& bt : stream_types) {
      for (auto [rows, cols] : kQwenShapes) {
        BenchMatrix b = make_bench(bt.dtype, rows, cols, pool, size_t{512} << 20);
        for (int n : {1, 2, 8}) {
          const bool bf16 = bt.dtype == DType::kBF16;
          if ((bf16 && n == 1) || (!bf16 && n == 2) || (n == 8 && rows != 18944)) continue;
          for (const char* cfg : {"classic", "auto", "0", "1", "2", "3", "4"})
            for (const char* mt : {"auto", "1", "2"}) {
              const bool classic = std::strcmp(cfg, "classic") == 0;
              if (classic && std::strcmp(mt, "auto") != 0) continue;
              setenv("DUET_MATVEC_STREAM", classic ? "0" : "1", 1);
              if (!classic && std::strcmp(cfg, "auto") != 0) setenv("DUET_MATVEC_STREAM_CFG", cfg, 1);
              if (std::strcmp(mt, "auto") != 0) setenv("DUET_MATVEC_MMA_MT", mt, 1);
              const double t = time_calls(*bt.ctx, b, x, n, y, 30, s);
              const double gbs = b.bytes / t / 1e9;
              std::printf("  %-7s %6lld x %-6lld n=%d  cfg %-7s MT %-4s  %8.1f us  %7.0f GB/s  %5.1f%%\n", bt.name,
                          (long long)rows, (long long)cols, n, cfg, mt, t * 1e6, gbs, 100 * gbs / kHbmGBs);
              unsetenv("DUET_MATVEC_STREAM");
              unsetenv("DUET_MATVEC_STREAM_CFG");
              unsetenv("DUET_MATVEC_MMA_MT");
            }
        }
        free_bench(b);
      }
    }
  }
  // DUET_MATMUL_BENCH_KQUANT=1: the one-token K-quant kernels at the launcher's defaults and
  // with Q4_K's register cap (DUET_MATVEC_MINB=1), on the native path.
  if (kquant_env != nullptr && dev.path == KernelPath::kNative) {
    std::printf("\nK-quant decode, one token: defaults, DUET_MATVEC_MINB=1\n");
    const DecodeType kq_types[] = {{DType::kQ4_K, "Q4_K", &ctx, false}, {DType::kQ6_K, "Q6_K", &ctx, false}};
    for (const auto& bt : kq_types) {
      for (auto [rows, cols] : kQwenShapes) {
        BenchMatrix b = make_bench(bt.dtype, rows, cols, pool, size_t{512} << 20);
        for (const char* cfg : {"defaults", "DUET_MATVEC_MINB"}) {
          const bool knob = cfg[0] == 'D';
          if (knob && bt.dtype != DType::kQ4_K) continue;
          if (knob) setenv(cfg, "1", 1);
          const double t = time_calls(*bt.ctx, b, x, 1, y, 30, s);
          const double gbs = b.bytes / t / 1e9;
          std::printf("  %-5s %6lld x %-6lld n=1  %-19s %8.1f us  %7.0f GB/s  %5.1f%%\n", bt.name, (long long)rows,
                      (long long)cols, knob ? (std::string(cfg) + "=1").c_str() : cfg, t * 1e6, gbs,
                      100 * gbs / kHbmGBs);
          if (knob) unsetenv(cfg);
        }
        free_bench(b);
      }
    }
  }
  // DUET_MATMUL_BENCH_MMA_SWEEP=1: the tensor-core decode kernel (matvec_mma.cu) under every
  // (tiles per CTA, warps x chunks in flight) setting of its knobs, FP8 at n = 1 and 8, BF16 at
  // n = 2 and 8 (where MatmulContext gives it F16/BF16 products).
  if (std::getenv("DUET_MATMUL_BENCH_MMA_SWEEP") != nullptr && dev.path == KernelPath::kNative && dev.sm >= 80) {
    std::printf("\ntensor-core decode kernel sweep (DUET_MATVEC_MMA_MT x DUET_MATVEC_MMA_CFG)\n");
    const DecodeType sweep_types[] = {{DType::kF8_E4M3, "FP8-wo", &ctx_wo, false},
                                      {DType::kF8_E4M3, "FP8-nat", &ctx, false},
                                      {DType::kBF16, "BF16", &ctx, false}};
    for (const auto& bt : sweep_types) {
      for (auto [rows, cols] : kQwenShapes) {
        BenchMatrix b = make_bench(bt.dtype, rows, cols, pool, size_t{512} << 20);
        for (int n : {1, 2, 8}) {
          const bool bf16 = bt.dtype == DType::kBF16;
          if ((bf16 && n == 1) || (!bf16 && n == 2)) continue;
          for (const char* mt : {"1", "2"})
            for (const char* cfg : {"0", "1", "2", "3"}) {
              setenv("DUET_MATVEC_MMA_MT", mt, 1);
              setenv("DUET_MATVEC_MMA_CFG", cfg, 1);
              const double t = time_calls(*bt.ctx, b, x, n, y, 30, s);
              const double gbs = b.bytes / t / 1e9;
              std::printf("  %-7s %6lld x %-6lld n=%d  MT %s cfg %s  %8.1f us  %7.0f GB/s  %5.1f%%\n", bt.name,
                          (long long)rows, (long long)cols, n, mt, cfg, t * 1e6, gbs, 100 * gbs / kHbmGBs);
            }
          unsetenv("DUET_MATVEC_MMA_MT");
          unsetenv("DUET_MATVEC_MMA_CFG");
        }
        free_bench(b);
      }
    }
  }
  // The K-quant kernels without programmatic dependent launch after the activation quantizer
  // (DUET_MATVEC_PDL=0; the launchers use it by default on the native sm_90 path).
  if (!kquant_only && dev.path == KernelPath::kNative && dev.sm >= 90 &&
      std::getenv("DUET_MATMUL_BENCH_QUICK") == nullptr) {
    std::printf("\ndecode without programmatic dependent launch\n");
    setenv("DUET_MATVEC_PDL", "0", 1);
    for (const auto& bt : decode_types) {
      if (bt.dtype != DType::kQ4_K && bt.dtype != DType::kQ6_K) continue;
      for (auto [rows, cols] : kQwenShapes) {
        BenchMatrix b = make_bench(bt.dtype, rows, cols, pool, size_t{512} << 20);
        for (int n : {1, 8}) {
          if (n > 1 && rows != 18944) continue;
          const double t = time_calls(*bt.ctx, b, x, n, y, 30, s);
          const double gbs = b.bytes / t / 1e9;
          std::printf("  %-7s %6lld x %-6lld n=%d  %8.1f us  %7.0f GB/s  %5.1f%%  (no pdl)\n", bt.name, (long long)rows,
                      (long long)cols, n, t * 1e6, gbs, 100 * gbs / kHbmGBs);
        }
        free_bench(b);
      }
    }
    unsetenv("DUET_MATVEC_PDL");
  }
  const BenchType prompt_types[] = {{DType::kQ4_K, "Q4_K"}, {DType::kBF16, "BF16"}, {DType::kF8_E4M3, "FP8"}};
  if (!kquant_only) std::printf("\nprompt (%% of %.0f TFLOP/s bf16; FP8 against twice that)\n", kBf16Tflops);
  for (const auto& bt : prompt_types) {
    if (kquant_only) break;
    for (auto [rows, cols] : kQwenShapes) {
      BenchMatrix b = make_bench(bt.dtype, rows, cols, pool, 0);
      if (bt.dtype == DType::kF8_E4M3) b.m.fp8_block_rows = rows;  // per-tensor: the cuBLASLt scale path
      for (int n : {512, 2048}) {
        const double t = time_calls(ctx, b, x, n, y, 5, s);
        const double tf = 2.0 * rows * cols * n / t / 1e12;
        const double peak = bt.dtype == DType::kF8_E4M3 ? 2 * kBf16Tflops : kBf16Tflops;
        std::printf("  %-5s %6lld x %-6lld n=%-5d %9.1f us  %6.1f TFLOP/s  %5.1f%%\n", bt.name, (long long)rows,
                    (long long)cols, n, t * 1e6, tf, 100 * tf / peak);
      }
      free_bench(b);
    }
  }
  DUET_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaFree(x);
  cudaFree(y);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace duet::cuda
