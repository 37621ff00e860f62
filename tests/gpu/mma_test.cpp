// Tensor-core batched-decode products of quantized weights (kernels/cuda/quant_mma.h) against the
// CPU: a parity table (type x shape x n_tokens) checked twice, tightly against an emulation of
// the kernel's F16 arithmetic (catches any fragment / layout / split-K mistake) and with the F16
// dequant path's bound against the exact product; a CUDA-graph capture check; and (not pass/fail)
// a benchmark against MatmulContext::matmul's dequantize + cuBLAS path. Skips below sm_80 and on
// the generic kernel path (DUET_KERNELS=generic); the emulation test needs no GPU.
#include <cuda_fp16.h>
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
#include <vector>

#include "kernels/cuda/matmul.h"
#include "kernels/cuda/quant_kernels.cuh"
#include "kernels/cuda/quant_mma.h"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "graph_timing.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet::cuda {
namespace {

// Line-buffered stdout: the tables survive an abort part-way.
const int kLineBuffered = std::setvbuf(stdout, nullptr, _IOLBF, 0);

struct TypeCase {
  DType dtype;
  const char* name;
};
const TypeCase kTypes[] = {
    {DType::kQ4_K, "Q4_K"}, {DType::kQ6_K, "Q6_K"}, {DType::kQ5_K, "Q5_K"}, {DType::kQ8_0, "Q8_0"}};

float f16_round(double v) { return f16_to_f32(f32_to_f16(static_cast<float>(v))); }

// 6-bit scale and min of sub-block j of a Q4_K block (as the CPU dequantizer reads them).
void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The F16 weights the kernel multiplies (quant_mma.cu): Q4_K/Q5_K: S = f16(d * sc), M =
// f16(-(dmin * m)), w = f16(S * q + M) (one fma, one rounding); Q6_K: S = f16(d * sc),
// w = f16(S * (q - 32)); Q8_0: w = f16(d * q).
void emulate_row(DType t, const uint8_t* src, float* out, int64_t cols) {
  if (t == DType::kQ8_0) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      BlockQ8_0 blk;
      std::memcpy(&blk, src + b * sizeof(BlockQ8_0), sizeof blk);
      const float d = f16_to_f32(blk.d);
      for (int l = 0; l < 32; ++l) out[32 * b + l] = f16_round(static_cast<double>(d) * blk.qs[l]);
    }
    return;
  }
  for (int64_t b = 0; b < cols / 256; ++b) {
    float* o = out + 256 * b;
    if (t == DType::kQ4_K || t == DType::kQ5_K) {
      // Q4_K and Q5_K share d, dmin, scales[12] at the start; Q5_K has qh[32] before qs.
      const bool q5 = t == DType::kQ5_K;
      BlockQ4_K h4;
      BlockQ5_K h5;
      if (q5)
        std::memcpy(&h5, src + b * sizeof(BlockQ5_K), sizeof h5);
      else
        std::memcpy(&h4, src + b * sizeof(BlockQ4_K), sizeof h4);
      const float d = f16_to_f32(q5 ? h5.d : h4.d), dmin = f16_to_f32(q5 ? h5.dmin : h4.dmin);
      const uint8_t* scales = q5 ? h5.scales : h4.scales;
      const uint8_t* qs = q5 ? h5.qs : h4.qs;
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min_k4(j, scales, &sc, &m);
        const float s = f16_round(d * static_cast<float>(sc));
        const float nm = f16_round(-(dmin * static_cast<float>(m)));
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * (j / 2) + l];
          int q = (j & 1) ? byte >> 4 : byte & 15;
          if (q5) q |= ((h5.qh[l] >> j) & 1) << 4;
          o[32 * j + l] = f16_round(static_cast<double>(s) * q + static_cast<double>(nm));
        }
      }
    } else {
      BlockQ6_K blk;
      std::memcpy(&blk, src + b * sizeof(BlockQ6_K), sizeof blk);
      const float d = f16_to_f32(blk.d);
      for (int e = 0; e < 256; ++e) {
        const int hh = e / 128, qq = (e % 128) / 32, l = e % 32;
        const uint8_t lb = blk.ql[64 * hh + l + 32 * (qq & 1)];
        const int nib = qq >= 2 ? lb >> 4 : lb & 15;
        const int hb = (blk.qh[32 * hh + l] >> (2 * qq)) & 3;
        const int q = (nib | (hb << 4)) - 32;
        const float s = f16_round(d * static_cast<float>(blk.scales[8 * hh + l / 16 + 2 * qq]));
        o[e] = f16_round(static_cast<double>(s) * q);
      }
    }
  }
}

struct HostMatrix {
  DType dtype = DType::kQ4_K;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> data;
  std::vector<float> deq;  // dequantize_row (exact weights)
  std::vector<float> emu;  // the kernel's F16 weights

  WeightMatrix view() const {
    WeightMatrix w;
    w.dtype = dtype;
    w.data = data.data();
    w.n_rows = rows;
    w.n_cols = cols;
    w.row_bytes = row_bytes;
    return w;
  }
};

// Gaussian rows of different magnitudes, quantized by the CPU quantizers (as matmul_test.cpp).
HostMatrix make_matrix(DType t, int64_t rows, int64_t cols, uint64_t seed) {
  HostMatrix m;
  m.dtype = t;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = *row_bytes(t, static_cast<uint64_t>(cols));
  m.data.resize(m.row_bytes * rows);
  m.deq.resize(rows * cols);
  m.emu.resize(rows * cols);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float amp = 0.5f + static_cast<float>(r % 7) * 0.25f;
    for (auto& v : row) v = g(rng) * amp;
    uint8_t* dst = m.data.data() + r * m.row_bytes;
    quantize_row(t, row.data(), dst, cols);
    dequantize_row(t, dst, m.deq.data() + r * cols, cols);
    emulate_row(t, dst, m.emu.data() + r * cols, cols);
  }
  return m;
}

// Per output (t, r): exact = sum W x (double, float x), emu = sum emu(W) f16(x) (double), l1 =
// sum |W x|, l1e = sum |emu(W) f16(x)|.
struct Reference {
  std::vector<double> exact, emu, l1, l1e;
};
Reference reference(const HostMatrix& m, const std::vector<float>& x, int n) {
  Reference ref;
  const size_t sz = static_cast<size_t>(n) * m.rows;
  ref.exact.assign(sz, 0.0);
  ref.emu.assign(sz, 0.0);
  ref.l1.assign(sz, 0.0);
  ref.l1e.assign(sz, 0.0);
  std::vector<float> xh(x.size());
  for (size_t i = 0; i < x.size(); ++i) xh[i] = f16_round(x[i]);
  const int n_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (int i = 0; i < n_threads; ++i)
    th.emplace_back([&, i] {
      for (int64_t r = i; r < m.rows; r += n_threads) {
        const float* w = m.deq.data() + r * m.cols;
        const float* we = m.emu.data() + r * m.cols;
        for (int t = 0; t < n; ++t) {
          const float* xt = x.data() + t * m.cols;
          const float* xe = xh.data() + t * m.cols;
          double s = 0, a = 0, se = 0, ae = 0;
          for (int64_t c = 0; c < m.cols; ++c) {
            const double p = static_cast<double>(w[c]) * xt[c];
            const double pe = static_cast<double>(we[c]) * xe[c];
            s += p;
            a += std::fabs(p);
            se += pe;
            ae += std::fabs(pe);
          }
          const size_t o = static_cast<size_t>(t) * m.rows + r;
          ref.exact[o] = s;
          ref.l1[o] = a;
          ref.emu[o] = se;
          ref.l1e[o] = ae;
        }
      }
    });
  for (auto& t : th) t.join();
  return ref;
}

std::vector<float> random_x(int n, int64_t cols, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n) * cols);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  for (auto& v : x) v = g(rng);
  return x;
}

// ||got - ref|| / ||ref|| and max |got - ref| / l1 over n x rows outputs (got [n][ldy]).
struct Err {
  double norm = 0, elem = 0;
};
Err errors(const std::vector<float>& got, int64_t ldy, const std::vector<double>& ref,
           const std::vector<double>& l1, int n, int64_t rows) {
  double e2 = 0, r2 = 0, worst = 0;
  for (int t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      const double want = ref[t * rows + r], v = got[t * ldy + r];
      const double err = std::isfinite(v) ? std::fabs(v - want) : INFINITY;
      e2 += err * err;
      r2 += want * want;
      worst = std::max(worst, err / std::max(l1[t * rows + r], 1e-30));
    }
  return {std::sqrt(e2 / r2), worst};
}

// Bounds. Against the exact product: the F16 dequant path's (matmul_test.cpp: x and the weight
// each rounded to F16, 2^-11 relative); the kernel's weights carry also the rounding of the scale
// and (Q4_K/Q5_K) of the min, measured on the CPU at <= 7.3e-4 norm (MmaEmulation). Against the
// emulation only the F32 accumulation differs (tensor-core adds, which may truncate, over up to
// K / 16 steps, and split-K atomics): a few 1e-5; any fragment, layout or split mistake is O(1).
constexpr double kNormBound = 2e-3, kElemBound = 3e-3;
constexpr double kEmuNormBound = 5e-4, kEmuElemBound = 2e-4;

// Needs no GPU: the kernel's F16 arithmetic (emulated) stays within the F16 path's bounds.
TEST(MmaEmulation, WithinF16PathBound) {
  for (const TypeCase& tc : kTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{384, 3584}, {64, 18944}}) {
      const HostMatrix m = make_matrix(tc.dtype, rows, cols, 77);
      const int n = 32;
      const std::vector<float> x = random_x(n, cols, 78);
      const Reference ref = reference(m, x, n);
      std::vector<float> y(ref.emu.begin(), ref.emu.end());
      const Err e = errors(y, rows, ref.exact, ref.l1, n, rows);
      std::printf("  emulated %-5s %5lld x %-6lld n=%d  norm %.2e (<= %.0e)  elem %.2e (<= %.0e)\n",
                  tc.name, (long long)rows, (long long)cols, n, e.norm, kNormBound, e.elem,
                  kElemBound);
      EXPECT_LE(e.norm, kNormBound) << tc.name;
      EXPECT_LE(e.elem, kElemBound) << tc.name;
    }
  }
}

// Returns false (and says why) where the kernel cannot run: no sm_80, or the generic path.
bool mma_device(DeviceInfo* dev) {
  if (device_count() == 0) {
    ADD_FAILURE() << "no CUDA device: GPU tests need one";
    return false;
  }
  auto r = query_device(0);
  if (!r.is_ok()) {
    ADD_FAILURE() << r.status().message();
    return false;
  }
  *dev = *r;
  return true;
}
#define DUET_MMA_DEVICE_OR_SKIP(dev)                                                          \
  DeviceInfo dev;                                                                             \
  if (!mma_device(&dev)) return;                                                              \
  if (dev.sm < 80 || dev.path == KernelPath::kGeneric)                                        \
    GTEST_SKIP() << "mma kernels need sm_80+ and the native path (sm_" << dev.sm << ", path " \
                 << kernel_path_name(dev.path) << ")";

// x [n][cols] float -> device F16 [n][ldh] (zero beyond cols).
__half* upload_x_f16(const std::vector<float>& x, int n, int64_t cols, int64_t ldh) {
  std::vector<uint16_t> h(static_cast<size_t>(n) * ldh, 0);
  for (int t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) h[t * ldh + c] = f32_to_f16(x[t * cols + c]);
  __half* d = nullptr;
  DUET_CUDA_CHECK(cudaMalloc(&d, h.size() * 2));
  DUET_CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

class MmaParity : public ::testing::TestWithParam<int> {};

TEST_P(MmaParity, MatchesCpuReference) {
  DUET_MMA_DEVICE_OR_SKIP(dev);
  const TypeCase& tc = kTypes[GetParam()];
  ASSERT_TRUE(kernels::mma_supported(tc.dtype));
  // Rows not a multiple of the 128- or 256-row block (1000, 77), rows below one block (77), one
  // long row (18944 columns: several CTAs share each row block, atomics into a zeroed y). Q8_0:
  // columns that end inside a 256-column stage (544 = 17 blocks, 2848 = 89 blocks).
  const bool q8 = tc.dtype == DType::kQ8_0;
  const std::pair<int64_t, int64_t> shapes[] = {
      {1000, q8 ? 544 : 512}, {3584, 3584}, {256, 18944}, {77, q8 ? 2848 : 2816}};
  // 2..8 -> one n8 tile, 9..16 -> two, 23/32 -> four, 41 -> six, 64 -> eight (padding tokens
  // included).
  const int kTokens[] = {2, 5, 8, 9, 16, 23, 32, 41, 64};
  const int max_n = 64;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  uint64_t seed = 4321 + GetParam();
  for (auto [rows, cols] : shapes) {
    const HostMatrix m = make_matrix(tc.dtype, rows, cols, seed++);
    const std::vector<float> x = random_x(max_n, cols, seed++);
    const Reference ref = reference(m, x, max_n);
    const int64_t ldh = cols + 8;  // a stride that is not the row length (zero padding)
    const int64_t ldy = rows + 5;  // likewise; the padding must stay untouched
    __half* dx = upload_x_f16(x, max_n, cols, ldh);
    float* dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dy, static_cast<size_t>(max_n) * ldy * 4), cudaSuccess);
    std::vector<float> y(static_cast<size_t>(max_n) * ldy);
    auto wr = upload_matrix(m.view(), dev, Fp8Mode::kAuto);
    ASSERT_TRUE(wr.is_ok()) << wr.status().message();
    // Every CTA shape (quant_mma.cu's dispatch): 4 warps x 2 m16 tiles, 8 x 2 (256 rows), 8 x 1
    // (128 rows, one tile a warp: the partial copy round and the row-guarded region D loads).
    for (const char* warps : {"4", "8", "8x1"}) {
      setenv("DUET_MMA_WARPS", warps, 1);
      for (int n : kTokens) {
        ASSERT_EQ(cudaMemset(dy, 0xff, static_cast<size_t>(max_n) * ldy * 4), cudaSuccess);  // NaN
        kernels::launch_matmul_mma(wr->m, dx, ldh, n, dy, ldy, stream);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        // The reference tables are [max_n][rows]; tokens t < n are their first n * rows entries.
        const Err ee = errors(y, ldy, ref.emu, ref.l1e, n, rows);
        const Err ex = errors(y, ldy, ref.exact, ref.l1, n, rows);
        int64_t touched = 0;  // padding entries (r >= rows or t >= n) that are no longer NaN bits
        for (int t = 0; t < max_n; ++t)
          for (int64_t r = (t < n ? rows : 0); r < ldy; ++r) {
            uint32_t bits;
            std::memcpy(&bits, &y[t * ldy + r], 4);
            touched += bits != 0xffffffffu;
          }
        std::printf(
            "  %-5s warps=%s %5lld x %-6lld n=%-3d vs emulation: norm %.2e (<= %.0e) elem %.2e "
            "(<= %.0e)   vs exact: norm %.2e (<= %.0e) elem %.2e (<= %.0e)\n",
            tc.name, warps, (long long)rows, (long long)cols, n, ee.norm, kEmuNormBound, ee.elem,
            kEmuElemBound, ex.norm, kNormBound, ex.elem, kElemBound);
        const std::string where = std::string(tc.name) + " warps=" + warps + " " +
                                  std::to_string(rows) + "x" + std::to_string(cols) +
                                  " n=" + std::to_string(n);
        EXPECT_LE(ee.norm, kEmuNormBound) << where;
        EXPECT_LE(ee.elem, kEmuElemBound) << where;
        EXPECT_LE(ex.norm, kNormBound) << where;
        EXPECT_LE(ex.elem, kElemBound) << where;
        EXPECT_EQ(touched, 0) << where << ": writes outside rows < n_rows, tokens < n";
      }
    }
    unsetenv("DUET_MMA_WARPS");
    cudaFree(dx);
    cudaFree(dy);
  }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Types, MmaParity, ::testing::Range(0, static_cast<int>(std::size(kTypes))),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(kTypes[i.param].name);
                         });

// The launch (with its memset for split rows) captures into a CUDA graph and replays to the
// eager result (up to the order of the atomic adds).
TEST(MmaGraph, CaptureAndReplay) {
  DUET_MMA_DEVICE_OR_SKIP(dev);
  for (const TypeCase& tc : kTypes) {
    const int64_t rows = 1000, cols = 3584;
    const int n = 32;
    const HostMatrix m = make_matrix(tc.dtype, rows, cols, 5);
    auto wr = upload_matrix(m.view(), dev, Fp8Mode::kAuto);
    ASSERT_TRUE(wr.is_ok()) << wr.status().message();
    __half* dx = upload_x_f16(random_x(n, cols, 6), n, cols, cols);
    float* dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dy, n * rows * 4), cudaSuccess);
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    kernels::launch_matmul_mma(wr->m, dx, cols, n, dy, rows, s);  // eager (also the one-time setup)
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<float> eager(n * rows), replay(n * rows);
    ASSERT_EQ(cudaMemcpy(eager.data(), dy, eager.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemset(dy, 0xff, n * rows * 4), cudaSuccess);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    kernels::launch_matmul_mma(wr->m, dx, cols, n, dy, rows, s);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess) << tc.name;
    ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(replay.data(), dy, replay.size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    double worst = 0;
    for (size_t i = 0; i < eager.size(); ++i)
      worst = std::max<double>(worst, std::fabs(replay[i] - eager[i]) / (1 + std::fabs(eager[i])));
    // Rows split over blocks are summed with float atomics whose order differs between any two
    // runs (eager or replayed): a handful of roundings of partial sums as large as |y| (2^-24 each,
    // measured up to 2.0e-5 relative on the H200): bound 1e-4, still far below a wrong replay (~1).
    EXPECT_LE(worst, 1e-4) << tc.name;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    cudaFree(dx);
    cudaFree(dy);
  }
}

// --- Benchmark (prints, never fails on speed) ---

constexpr double kHbmGBs = 4300.0;  // H200 device-to-device copy, measured (BENCHMARKS.md)

// Copies of a random matrix in its device layout, enough to read well beyond the 50 MB L2 in
// turn (the speed of these kernels does not depend on the values).
struct BenchMatrix {
  DeviceMatrix m;
  size_t bytes = 0;
  std::vector<void*> copies;
};

BenchMatrix make_bench(DType t, int64_t rows, int64_t cols) {
  BenchMatrix b;
  b.m.dtype = t;
  b.m.n_rows = rows;
  b.m.n_cols = cols;
  b.m.row_bytes = *row_bytes(t, static_cast<uint64_t>(cols));
  b.bytes = b.m.row_bytes * rows;
  std::vector<uint8_t> h(b.bytes);
  std::mt19937_64 rng(7);
  for (size_t i = 0; i + 8 <= h.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&h[i], &v, 8);
  }
  const size_t n = std::clamp<size_t>(((size_t{512} << 20) + b.bytes - 1) / b.bytes, 2, 64);
  for (size_t i = 0; i < n; ++i) {
    void* p = nullptr;
    DUET_CUDA_CHECK(cudaMalloc(&p, b.bytes));
    DUET_CUDA_CHECK(cudaMemcpy(p, h.data(), b.bytes, cudaMemcpyHostToDevice));
    b.copies.push_back(p);
  }
  b.m.data = b.copies[0];
  return b;
}

// Mean GPU time of one call: `iters` calls (cycling through the copies) captured in a CUDA graph,
// replayed once to warm up and once timed (graph_seconds_per_call).
template <typename F>
double time_graph(BenchMatrix& b, int iters, cudaStream_t s, F call) {
  DeviceMatrix m = b.m;
  call(m);  // eager once: one-time setup outside the capture
  DUET_CUDA_CHECK(cudaStreamSynchronize(s));
  return graph_seconds_per_call(s, iters, [&](int i) {
    m.data = b.copies[i % b.copies.size()];
    call(m);
  });
}

TEST(MmaBench, Q4KAndQ6K) {
  DUET_MMA_DEVICE_OR_SKIP(dev);
  std::printf("device %s sm_%d, %d SMs; GB/s = weight bytes per product / time, %% of %.0f GB/s\n",
              dev.name.c_str(), dev.sm, dev.n_sms, kHbmGBs);
  cudaStream_t s;
  DUET_CUDA_CHECK(cudaStreamCreate(&s));
  const int max_n = 64;
  const int64_t max_cols = 18944, max_rows = 37888;
  float* xf = nullptr;
  __half* xh = nullptr;
  float* y = nullptr;
  DUET_CUDA_CHECK(cudaMalloc(&xf, size_t{max_n} * max_cols * 4));
  DUET_CUDA_CHECK(cudaMalloc(&xh, size_t{max_n} * max_cols * 2));
  DUET_CUDA_CHECK(cudaMalloc(&y, size_t{max_n} * max_rows * 4));
  {
    const std::vector<float> hx = random_x(max_n, max_cols, 3);
    DUET_CUDA_CHECK(cudaMemcpy(xf, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  }
  MatmulContext ctx(dev, Fp8Mode::kAuto);
  ctx.reserve(max_n, max_cols, max_rows);
  const std::pair<int64_t, int64_t> shapes[] = {
      {3584, 3584}, {18944, 3584}, {3584, 18944}, {37888, 3584}};
  const int iters = 50;
  std::string summary;
  for (const TypeCase& tc : {kTypes[0], kTypes[1]}) {  // Q4_K, Q6_K: what a Q4_K_M file holds
    for (auto [rows, cols] : shapes) {
      BenchMatrix b = make_bench(tc.dtype, rows, cols);
      for (int n : {8, 16, 32, 64}) {
        auto report = [&](const char* what, double t) {
          const double gbs = b.bytes / t / 1e9;
          char line[200];
          std::snprintf(line, sizeof line,
                        "  %-5s %6lld x %-6lld n=%-3d %-34s %8.1f us %7.0f GB/s %5.1f%%\n", tc.name,
                        (long long)rows, (long long)cols, n, what, t * 1e6, gbs,
                        100 * gbs / kHbmGBs);
          std::fputs(line, stdout);
          return std::string(line);
        };
        DUET_CUDA_CHECK(cudaSetDevice(dev.ordinal));
        kernels::launch_convert_act(xf, cols, n, cols, xh, cols, false, s);
        double t_auto = 0, t4 = 0, t8 = 0, t81 = 0;
        for (const char* warps : {"auto", "4", "8", "8x1"}) {
          if (warps[0] == 'a')
            unsetenv("DUET_MMA_WARPS");
          else
            setenv("DUET_MMA_WARPS", warps, 1);
          const double t = time_graph(b, iters, s, [&](const DeviceMatrix& m) {
            kernels::launch_matmul_mma(m, xh, cols, n, y, rows, s);
          });
          const std::string w = warps;
          (w == "auto" ? t_auto : w == "4" ? t4 : w == "8" ? t8 : t81) = t;
          report(w == "auto" ? "mma (launcher's choice of warps)" : ("mma, DUET_MMA_WARPS=" + w).c_str(), t);
        }
        unsetenv("DUET_MMA_WARPS");
        const double tc_mma = time_graph(b, iters, s, [&](const DeviceMatrix& m) {
          kernels::launch_convert_act(xf, cols, n, cols, xh, cols, false, s);
          kernels::launch_matmul_mma(m, xh, cols, n, y, rows, s);
        });
        report("x->F16 + mma", tc_mma);
        // MatmulContext takes this kernel itself for these batches; DUET_MATMUL_MMA=0 gives the
        // dequantize + cuBLAS path it replaced.
        setenv("DUET_MATMUL_MMA", "0", 1);
        const double t_old = time_graph(
            b, iters, s, [&](const DeviceMatrix& m) { ctx.matmul(m, xf, cols, n, y, rows, s); });
        unsetenv("DUET_MATMUL_MMA");
        report("MatmulContext (dequant + cuBLAS)", t_old);
        char line[240];
        const auto pct = [&](double t) { return 100 * b.bytes / t / 1e9 / kHbmGBs; };
        std::snprintf(line, sizeof line,
                      "%-5s %6lld x %-6lld n=%-3d mma %5.1f%% (4 warps %5.1f%%, 8 warps %5.1f%%, 8x1 %5.1f%%), "
                      "+x->F16 %5.1f%%, "
                      "old %5.1f%%, %4.1fx\n",
                      tc.name, (long long)rows, (long long)cols, n, pct(t_auto), pct(t4), pct(t8), pct(t81),
                      pct(tc_mma), pct(t_old), t_old / t_auto);
        summary += line;
      }
      for (void* p : b.copies) cudaFree(p);
    }
  }
  std::printf(
      "\nsummary (%% of %.0f GB/s of weight bytes; last column: old path time / mma time)\n%s",
      kHbmGBs, summary.c_str());
  DUET_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaFree(xf);
  cudaFree(xh);
  cudaFree(y);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace duet::cuda
