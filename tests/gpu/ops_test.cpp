// GPU element-wise ops (kernels/cuda/ops.h) against the CPU reference kernels (kernels/cpu): a
// parity table of op x dtype x shape with per-op error bounds (justified at each bound), kv_write
// byte-exactness against the CPU cache layout, argmax exactness, and the GPU sampler's greedy
// identity, kept sets and distribution. Needs a CUDA device; fails without one.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_kernels.cuh"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "tensor/half.h"

namespace duet::cuda {
namespace {

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { DUET_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T))); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { put(h); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void put(const std::vector<T>& h) { DUET_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    DUET_CUDA_CHECK(cudaDeviceSynchronize());
    DUET_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

std::vector<float> randn(size_t n, float sd, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

class GpuOps : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GT(device_count(), 0) << "no CUDA device"; }
};

// A batch of n_tokens tokens over device positions / sequence ids / block tables.
AttentionBatch token_batch(int n_tokens, int n_seqs, const Dev<int32_t>& pos, const Dev<int32_t>& seq,
                           const Dev<int32_t>& tables, int max_blocks) {
  AttentionBatch b;
  b.n_tokens = n_tokens;
  b.n_seqs = n_seqs;
  b.positions = pos.p;
  b.seq_ids = seq.p;
  b.block_tables = tables.p;
  b.max_blocks = max_blocks;
  return b;
}

// Cache bytes (F16 when elem_bytes == 2, else F32) as floats.
std::vector<float> cache_floats(const std::vector<uint8_t>& bytes, size_t elem_bytes) {
  std::vector<float> f(bytes.size() / elem_bytes);
  for (size_t i = 0; i < f.size(); ++i) {
    if (elem_bytes == 2) {
      uint16_t hv;
      std::memcpy(&hv, &bytes[2 * i], 2);
      f[i] = f16_to_f32(hv);
    } else {
      std::memcpy(&f[i], &bytes[4 * i], 4);
    }
  }
  return f;
}

// Prints one parity-table row and checks it.
void report(const std::string& op, const std::string& shape, double max_err, double bound, int64_t n_bad) {
  std::printf("  %-26s %-30s max_err %.3e  bound %.1e  %s\n", op.c_str(), shape.c_str(), max_err, bound,
              n_bad == 0 ? "ok" : "FAIL");
  EXPECT_EQ(n_bad, 0) << op << " " << shape << " max_err " << max_err;
}

// RMSNorm: both sum the float squares in double (the CPU sequentially, the GPU as a tree), so
// the double sums differ by ~1e-16 relative and the float scale is almost always identical;
// the bound allows 2 ulp of the result (2^-22 relative) for the rare double-rounding case.
TEST_F(GpuOps, RmsNorm) {
  struct Shape {
    int64_t n, rows, ld;
    bool weight, in_place;
  };
  const Shape shapes[] = {{128, 28 * 5, 128, true, true},  {128, 8, 160, true, false}, {4096, 7, 4096, true, false},
                          {5120, 3, 5120, false, false},   {1000, 3, 1000, true, true}, {3584, 1, 3584, true, true},
                          {64, 33, 64, false, false},      {18944, 2, 18944, true, true}};  // past the registers
  for (const Shape& s : shapes) {
    std::vector<float> x = randn(s.rows * s.ld, 2.0f, 1), w = randn(s.n, 1.0f, 2);
    std::vector<float> ref(s.rows * s.ld, 0.0f);
    rms_norm(x.data(), s.ld, s.weight ? w.data() : nullptr, 1e-6f, s.n, s.rows, ref.data(), s.ld);
    Dev<float> dx(x), dw(w), dy(std::vector<float>(s.rows * s.ld, 0.0f));
    float* out = s.in_place ? dx.p : dy.p;
    launch_rms_norm(dx.p, s.ld, s.weight ? dw.p : nullptr, 1e-6f, s.n, s.rows, out, s.ld, nullptr);
    const std::vector<float> got = s.in_place ? dx.get() : dy.get();
    double max_err = 0;
    int64_t bad = 0;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t i = 0; i < s.n; ++i) {
        const double e = std::fabs(got[r * s.ld + i] - ref[r * s.ld + i]);
        max_err = std::max(max_err, e);
        if (e > std::ldexp(std::fabs(ref[r * s.ld + i]), -22) + 1e-30) ++bad;
      }
    report("rms_norm", "n " + std::to_string(s.n) + " rows " + std::to_string(s.rows) + (s.in_place ? " in-place" : ""),
           max_err, 2.4e-7, bad);
  }
}

// add_rms_norm = CPU add (exact: float addition is commutative) then rms_norm: bound as above.
TEST_F(GpuOps, AddRmsNorm) {
  for (int64_t n : {896, 4096, 5376}) {
    const int64_t rows = 5;
    std::vector<float> x = randn(rows * n, 1.0f, 3), r = randn(rows * n, 1.0f, 4), w = randn(n, 1.0f, 5);
    std::vector<float> xs = x, ref(rows * n);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] += r[i];
    rms_norm(xs.data(), n, w.data(), 1e-5f, n, rows, ref.data(), n);
    Dev<float> dx(x), dr(r), dw(w), dy(rows * n);
    launch_add_rms_norm(dx.p, dr.p, dw.p, 1e-5f, n, rows, dy.p, nullptr);
    const std::vector<float> gx = dx.get(), gy = dy.get();
    double max_err = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * n; ++i) {
      if (gx[i] != xs[i]) ++bad;  // the residual sum is exact
      const double e = std::fabs(gy[i] - ref[i]);
      max_err = std::max(max_err, e);
      if (e > std::ldexp(std::fabs(ref[i]), -22) + 1e-30) ++bad;
    }
    report("add_rms_norm", "n " + std::to_string(n) + " rows 5", max_err, 2.4e-7, bad);
  }
}

// add, add_bias, scale, gather_rows: one IEEE operation (or a copy) per element: bit-exact.
TEST_F(GpuOps, ElementwiseExact) {
  const int64_t n = 100003;
  std::vector<float> x = randn(n, 1.0f, 6), y = randn(n, 1.0f, 7);
  {
    std::vector<float> ref = x;
    for (int64_t i = 0; i < n; ++i) ref[i] += y[i];
    Dev<float> dx(x), dy(y);
    launch_add(dx.p, dy.p, n, nullptr);
    const auto got = dx.get();
    report("add", "n 100003", 0, 0, static_cast<int64_t>(std::memcmp(got.data(), ref.data(), n * 4) != 0));
  }
  {
    const int64_t cols = 3584, rows = 9, ld = 3600;
    std::vector<float> m = randn(rows * ld, 1.0f, 8), b = randn(cols, 1.0f, 9), ref = m;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < cols; ++i) ref[r * ld + i] += b[i];
    Dev<float> dm(m), db(b);
    launch_add_bias(dm.p, ld, db.p, cols, rows, nullptr);
    const auto got = dm.get();
    report("add_bias", "3584 x 9 ld 3600", 0, 0, static_cast<int64_t>(std::memcmp(got.data(), ref.data(), got.size() * 4) != 0));
  }
  {
    std::vector<float> ref = x;
    for (auto& v : ref) v *= 0.0625f * 3.0f;
    Dev<float> dx(x);
    launch_scale(dx.p, 0.0625f * 3.0f, n, nullptr);
    const auto got = dx.get();
    report("scale", "n 100003", 0, 0, static_cast<int64_t>(std::memcmp(got.data(), ref.data(), n * 4) != 0));
  }
  {
    const int64_t cols = 896, ld = 900;
    std::vector<int32_t> rows = {5, 0, 17, 17, 99};
    std::vector<float> src = randn(100 * ld, 1.0f, 10), ref(rows.size() * cols);
    for (size_t r = 0; r < rows.size(); ++r)
      std::memcpy(&ref[r * cols], &src[rows[r] * ld], cols * 4);
    Dev<float> ds(src), dout(rows.size() * cols);
    Dev<int32_t> dr(rows);
    launch_gather_rows(ds.p, ld, dr.p, static_cast<int>(rows.size()), cols, dout.p, cols, nullptr);
    const auto got = dout.get();
    report("gather_rows", "5 of 100 rows", 0, 0, static_cast<int64_t>(std::memcmp(got.data(), ref.data(), got.size() * 4) != 0));
  }
}

// RoPE: angles are built with the CPU's float operations, so only cosf/sinf differ from glibc's
// (CUDA: <= 2 ulp, i.e. <= 2.4e-7 absolute on values in [-1, 1]); each output is x0 c -+ x1 s,
// so its error is <= (|x0| + |x1|) * 2.4e-7 plus one rounding: bound 4.8e-7 * (|x0| + |x1|) + ulp.
TEST_F(GpuOps, Rope) {
  struct Shape {
    int n_tokens, n_heads, head_dim;
    bool ff;
    float base;
  };
  const Shape shapes[] = {{7, 28, 128, false, 1e6f}, {3, 4, 64, true, 1e4f}, {5, 16, 256, false, 1e4f}, {1, 32, 128, true, 5e5f}};
  for (const Shape& s : shapes) {
    for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
      const int64_t ld = int64_t{s.n_heads} * s.head_dim + 8;
      std::vector<float> x = randn(s.n_tokens * ld, 1.5f, 11);
      std::vector<int32_t> pos(s.n_tokens);
      for (int t = 0; t < s.n_tokens; ++t) pos[t] = t == 0 ? 0 : 1 + (t * 37171) % 131072;
      std::vector<float> ff(s.head_dim / 2);
      for (int i = 0; i < s.head_dim / 2; ++i) ff[i] = 1.0f + 0.37f * i;
      std::vector<float> ref = x, cs(s.head_dim);
      for (int t = 0; t < s.n_tokens; ++t) {
        rope_cache(pos[t], s.base, s.head_dim, s.ff ? ff.data() : nullptr, cs.data());
        rope_apply(&ref[t * ld], s.n_heads, s.head_dim, cs.data(), style);
      }
      Dev<float> dx(x), dff(ff);
      Dev<int32_t> dpos(pos);
      launch_rope(dx.p, ld, s.n_tokens, s.n_heads, s.head_dim, dpos.p, s.base, s.ff ? dff.p : nullptr, style, nullptr);
      const auto got = dx.get();
      double max_err = 0;
      int64_t bad = 0;
      const int half = s.head_dim / 2;
      for (int t = 0; t < s.n_tokens; ++t)
        for (int h = 0; h < s.n_heads; ++h)
          for (int i = 0; i < half; ++i) {
            const int64_t b = t * ld + int64_t{h} * s.head_dim;
            const int64_t i0 = b + (style == RopeStyle::kNormal ? 2 * i : i);
            const int64_t i1 = b + (style == RopeStyle::kNormal ? 2 * i + 1 : i + half);
            const double bound = 4.8e-7 * (std::fabs(x[i0]) + std::fabs(x[i1])) + 1e-7;
            for (int64_t k : {i0, i1}) {
              const double e = std::fabs(got[k] - ref[k]);
              max_err = std::max(max_err, e);
              if (e > bound) ++bad;
            }
          }
      // Untouched padding past the heads.
      for (int t = 0; t < s.n_tokens; ++t)
        for (int64_t i = int64_t{s.n_heads} * s.head_dim; i < ld; ++i)
          if (got[t * ld + i] != x[t * ld + i]) ++bad;
      report(std::string("rope ") + (style == RopeStyle::kNormal ? "normal" : "neox") + (s.ff ? " ff" : ""),
             std::to_string(s.n_tokens) + "x" + std::to_string(s.n_heads) + "x" + std::to_string(s.head_dim), max_err,
             4.8e-7 * 6, bad);  // the printed bound at |x0| + |x1| = 6 (inputs have std 1.5)
    }
  }
}

// Gated activations. SiLU: ggml's expf is reproduced operation for operation, so the first
// n & ~7 elements are bit-exact; the tail uses CUDA expf vs glibc expf (<= 2 ulp): bound 4 ulp.
// GELU exact: tanhf (<= 2 ulp) and possibly different FMA contraction: bound 8 ulp of |g * u|
// (the tanh term is multiplied by 0.5 g u). GELU F16 table: the result is rounded to F16 after
// a float tanh that may differ by ulps, so an element may land on the neighbouring F16 value:
// bound one F16 ulp (2^-10 relative, plus the subnormal step 2^-24) times |u|.
TEST_F(GpuOps, GatedActivation) {
  for (int64_t n : {int64_t{18944}, int64_t{13}, int64_t{100007}}) {
    std::vector<float> g = randn(n, 3.0f, 12), u = randn(n, 1.0f, 13);
    g[0] = -10.0f, g[1] = 10.0f, g[2] = -10.5f, g[3] = 11.0f;
    struct Mode {
      Activation act;
      GeluMode gelu;
      const char* name;
    };
    for (const Mode& m : {Mode{Activation::kSilu, GeluMode::kExact, "silu"}, Mode{Activation::kGeluTanh, GeluMode::kExact, "gelu exact"},
                          Mode{Activation::kGeluTanh, GeluMode::kF16Table, "gelu f16-table"}}) {
      std::vector<float> ref(n);
      gated_activation(m.act, m.gelu, g.data(), u.data(), ref.data(), n);
      Dev<float> dg(g), du(u);
      launch_gated_activation(m.act, m.gelu, dg.p, du.p, dg.p, n, nullptr);  // in place, as the forward does
      const auto got = dg.get();
      double max_err = 0;
      int64_t bad = 0, exact = 0;
      const int64_t n8 = n & ~int64_t{7};
      for (int64_t i = 0; i < n; ++i) {
        const double e = std::fabs(got[i] - ref[i]);
        max_err = std::max(max_err, e);
        exact += got[i] == ref[i];
        double bound;
        if (m.act == Activation::kSilu) bound = i < n8 ? 0.0 : std::ldexp(std::fabs(ref[i]), -21);
        else if (m.gelu == GeluMode::kExact) bound = std::ldexp(std::fabs(g[i] * u[i]), -20) + 1e-30;
        else bound = (std::ldexp(std::fabs(ref[i]), -10) + std::ldexp(1.0, -24)) * (1 + 1e-6) + std::fabs(u[i]) * std::ldexp(1.0, -24);
        if (e > bound) ++bad;
      }
      char shape[64];
      std::snprintf(shape, sizeof shape, "n %lld (%.2f%% bit-exact)", static_cast<long long>(n), 100.0 * exact / n);
      report(std::string("gated_activation ") + m.name, shape, max_err, 0, bad);
    }
  }
}

// kv_write: F16 is round-to-nearest-even like f32_to_f16, F32 a copy: the whole cache (untouched
// slots included) must equal the CPU's byte for byte.
TEST_F(GpuOps, KvWrite) {
  for (DType dt : {DType::kF16, DType::kF32}) {
    for (int bs : {16, 7, 256}) {
      const int n_kv = 4, hd = 128, n_blocks = 64, max_blocks = 16;
      const size_t eb = dt == DType::kF16 ? 2 : 4;
      const size_t cache_elems = size_t{n_blocks} * n_kv * bs * hd;
      // Two sequences with scattered blocks; tokens: seq 0 positions 0..9, seq 1 positions 5, 40, 41.
      std::vector<int32_t> tables(2 * max_blocks);
      for (int i = 0; i < 2 * max_blocks; ++i) tables[i] = (i * 29 + 3) % n_blocks;
      std::vector<int32_t> pos, seq;
      for (int p = 0; p < 10; ++p) pos.push_back(p), seq.push_back(0);
      for (int p : {5, 40, 41}) pos.push_back(p), seq.push_back(1);
      const int nt = static_cast<int>(pos.size());
      const int64_t ld = n_kv * hd + 4;
      std::vector<float> k = randn(nt * ld, 1.0f, 14), v = randn(nt * ld, 1.0f, 15);
      k[3] = 70000.0f, v[5] = 1e-6f, k[7] = -65519.0f;  // overflow and subnormal F16 cases
      std::vector<uint8_t> ck(cache_elems * eb, 0x5a), cv(cache_elems * eb, 0xa5);
      PagedKvLayer layer{dt, ck.data(), cv.data(), bs, n_kv, hd};
      for (int t = 0; t < nt; ++t) kv_write(layer, &tables[seq[t] * max_blocks], pos[t], &k[t * ld], &v[t * ld]);
      Dev<uint8_t> dk(std::vector<uint8_t>(cache_elems * eb, 0x5a)), dv(std::vector<uint8_t>(cache_elems * eb, 0xa5));
      Dev<float> dkx(k), dvx(v);
      Dev<int32_t> dpos(pos), dseq(seq), dtab(tables);
      PagedKvCache kv{dt, dk.p, dv.p, bs, n_kv, hd};
      const AttentionBatch b = token_batch(nt, 2, dpos, dseq, dtab, max_blocks);
      launch_kv_write(kv, b, dkx.p, ld, dvx.p, ld, nullptr);
      const auto gk = dk.get(), gv = dv.get();
      const int64_t bad = (gk != ck) + (gv != cv);
      report(std::string("kv_write ") + (dt == DType::kF16 ? "F16" : "F32"), "block " + std::to_string(bs) + ", 13 tokens", 0, 0, bad);
    }
  }
}

// Int8 activations of a decode batch, as the decode products read them.
struct Q8 {
  std::vector<int8_t> q;
  std::vector<float> m;  // 4 floats per 32 values
};
Q8 get_q8(const Dev<int8_t>& q, const Dev<float>& m) { return Q8{q.get(), m.get()}; }

// Compares fused int8 activations with the unfused ones: quantized values within `q_tol` steps,
// block metadata within `m_rel` relative; prints the row and counts exact blocks.
void compare_q8(const std::string& op, const std::string& shape, const Q8& got, const Q8& ref, int q_tol, double m_rel) {
  int64_t bad = 0, exact = 0;
  double max_m = 0;
  const size_t blocks = ref.q.size() / 32;
  for (size_t b = 0; b < blocks; ++b) {
    bool same = true;
    for (int i = 0; i < 32; ++i) {
      const int d = std::abs(int{got.q[b * 32 + i]} - int{ref.q[b * 32 + i]});
      same &= d == 0;
      bad += d > q_tol;
    }
    for (int j = 0; j < 3; ++j) {
      const double r = ref.m[b * 4 + j], g = got.m[b * 4 + j];
      const double e = std::fabs(g - r) / std::max(std::fabs(r), 1e-30);
      same &= g == r;
      if (std::fabs(g - r) > m_rel * std::max(std::fabs(r), double(ref.m[b * 4])) + 1e-30) ++bad;
      max_m = std::max(max_m, e);
    }
    exact += same;
  }
  char sh[96];
  std::snprintf(sh, sizeof sh, "%s (%.2f%% blocks exact)", shape.c_str(), 100.0 * exact / std::max<size_t>(blocks, 1));
  report(op, sh, max_m, m_rel, bad);
}

// rms_norm_q8 = rms_norm then the activation quantizer, in one kernel. Its double sum of squares
// is associated differently from rms_norm's, so the float scale can differ by an ulp (rarely);
// an element at a rounding boundary may then move one int8 step and a block's scale by 2^-22:
// bound one step and 2^-21 relative on the metadata.
TEST_F(GpuOps, RmsNormQ8) {
  for (int64_t n : {int64_t{3584}, int64_t{896}, int64_t{64}, kRmsNormQ8MaxCols}) {
    for (int rows : {1, 3, 8}) {
      std::vector<float> x = randn(rows * n + 5, 2.0f, 31), w = randn(n, 1.0f, 32);
      const int64_t ldx = n + 5;
      x.resize(rows * ldx);
      Dev<float> dx(x), dw(w), dy(rows * n), dm_ref(rows * n / 8), dm(rows * n / 8);
      Dev<int8_t> dq_ref(rows * n), dq(rows * n);
      launch_rms_norm(dx.p, ldx, dw.p, 1e-6f, n, rows, dy.p, n, nullptr);
      kernels::launch_quantize_act_q8(dy.p, n, rows, n, dq_ref.p, reinterpret_cast<float4*>(dm_ref.p), false, nullptr);
      launch_rms_norm_q8(dx.p, ldx, dw.p, 1e-6f, n, rows, dq.p, reinterpret_cast<float4*>(dm.p), false, nullptr);
      compare_q8("rms_norm_q8", "n " + std::to_string(n) + " rows " + std::to_string(rows), get_q8(dq, dm),
                 get_q8(dq_ref, dm_ref), 1, std::ldexp(1.0, -21));
    }
  }
}

// rms_norm_fp8_rows = launch_add_rms_norm (with res) or launch_rms_norm (without; rows longer
// than 1024, which that launcher sums in the same block kernel) followed by the E4M3 row
// quantizer: bit-exact (same sums, same float operations), scales included, the row padding
// zeroed, and with res the residual sum written back exactly. 9 rows take the 1024-thread block,
// 300 the 256-thread one; 2056 columns leave 8 bytes of padding per row.
TEST_F(GpuOps, RmsNormFp8Rows) {
  for (int64_t n : {int64_t{3584}, int64_t{2056}, kRmsNormFp8MaxCols, int64_t{896}}) {
    for (int rows : {9, 300}) {
      for (bool with_res : {false, true}) {
        if (!with_res && n <= 1024) continue;
        std::vector<float> x = randn(rows * n, 2.0f, 41), r = randn(rows * n, 1.0f, 42), w = randn(n, 1.0f, 43);
        const int64_t ldo = (n + 15) / 16 * 16;
        Dev<float> dx_ref(x), dx(x), dr(r), dw(w), dy(rows * n), s_ref(rows), s_got(rows);
        Dev<uint8_t> f_ref(std::vector<uint8_t>(rows * ldo, 0xab)), f_got(std::vector<uint8_t>(rows * ldo, 0xcd));
        if (with_res) launch_add_rms_norm(dx_ref.p, dr.p, dw.p, 1e-6f, n, rows, dy.p, nullptr);
        else launch_rms_norm(dx_ref.p, n, dw.p, 1e-6f, n, rows, dy.p, n, nullptr);
        kernels::launch_quantize_act_fp8_rows(dy.p, n, rows, n, f_ref.p, ldo, s_ref.p, nullptr);
        launch_rms_norm_fp8_rows(dx.p, with_res ? dr.p : nullptr, dw.p, 1e-6f, n, rows, f_got.p, ldo, s_got.p, nullptr);
        const std::vector<uint8_t> fr = f_ref.get(), fg = f_got.get();
        const std::vector<float> sr = s_ref.get(), sg = s_got.get(), xr = dx_ref.get(), xg = dx.get();
        int64_t bad = 0;
        for (size_t i = 0; i < fr.size(); ++i) bad += fr[i] != fg[i];
        for (int k = 0; k < rows; ++k) bad += std::memcmp(&sr[k], &sg[k], 4) != 0;
        bad += std::memcmp(xr.data(), xg.data(), xr.size() * 4) != 0;
        report(std::string("rms_norm_fp8_rows") + (with_res ? " + res" : ""),
               "n " + std::to_string(n) + " rows " + std::to_string(rows), 0, 0, bad);
      }
    }
  }
}

// The F16 rows a batched-decode product's input takes (launch_rms_norm_f16) against
// launch_rms_norm / launch_add_rms_norm followed by kernels::launch_convert_act: bit-exact halves
// (same block shape, so the same sums; the same float-to-half rounding), the row padding zero, x
// updated as launch_add_rms_norm updates it, and the product's output rows zeroed up to z_rows
// (the columns past them untouched).
TEST_F(GpuOps, RmsNormF16) {
  for (int64_t n : {int64_t{3584}, int64_t{2056}, kRmsNormF16MaxCols}) {
    for (int rows : {9, 64}) {
      for (bool with_res : {false, true}) {
        std::vector<float> x = randn(rows * n, 2.0f, 51), r = randn(rows * n, 1.0f, 52), w = randn(n, 1.0f, 53);
        const int64_t ldh = (n + 15) / 16 * 16 + 16, z_rows = 1000, ldz = z_rows + 7;
        Dev<float> dx_ref(x), dx(x), dr(r), dw(w), dy(rows * n);
        Dev<float> dz(std::vector<float>(rows * ldz, 5.0f));
        Dev<__half> h_ref(rows * ldh), h_got(rows * ldh);
        if (with_res) launch_add_rms_norm(dx_ref.p, dr.p, dw.p, 1e-6f, n, rows, dy.p, nullptr);
        else launch_rms_norm(dx_ref.p, n, dw.p, 1e-6f, n, rows, dy.p, n, nullptr);
        kernels::launch_convert_act(dy.p, n, rows, n, h_ref.p, ldh, false, nullptr);
        launch_rms_norm_f16(dx.p, with_res ? dr.p : nullptr, dw.p, 1e-6f, n, rows, h_got.p, ldh, dz.p, ldz, z_rows,
                            nullptr);
        const std::vector<__half> hr = h_ref.get(), hg = h_got.get();
        const std::vector<float> xr = dx_ref.get(), xg = dx.get(), z = dz.get();
        int64_t bad = 0;
        for (size_t i = 0; i < hr.size(); ++i) bad += std::memcmp(&hr[i], &hg[i], 2) != 0;
        bad += std::memcmp(xr.data(), xg.data(), xr.size() * 4) != 0;
        for (int k = 0; k < rows; ++k)
          for (int64_t c = 0; c < ldz; ++c) bad += z[k * ldz + c] != (c < z_rows ? 0.0f : 5.0f);
        report(std::string("rms_norm_f16") + (with_res ? " + res" : ""),
               "n " + std::to_string(n) + " rows " + std::to_string(rows), 0, 0, bad);
      }
    }
  }
}

// Gated activation over the rows of a fused [gate | up] product: the same element values as the
// contiguous launch (bit-exact, the CPU-tail rule included; 37 columns take the scalar path of
// the row kernel, the others its float4 path), and the int8 and E4M3-row forms equal to
// quantizing them (bit-exact: same values, same quantizers).
TEST_F(GpuOps, GatedActivationRowsAndQ8) {
  for (int64_t n : {int64_t{18944}, int64_t{96}, int64_t{37}}) {
    for (int rows : {1, 5}) {
      const int64_t ldi = 2 * n;
      std::vector<float> gu = randn(rows * ldi, 2.0f, 33), g(rows * n), u(rows * n);
      for (int r = 0; r < rows; ++r)
        for (int64_t i = 0; i < n; ++i) g[r * n + i] = gu[r * ldi + i], u[r * n + i] = gu[r * ldi + n + i];
      for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
        Dev<float> dgu(gu), dg(g), du(u), dout(rows * n), dm_ref(rows * n / 8), dm(rows * n / 8);
        Dev<int8_t> dq_ref(rows * n), dq(rows * n);
        launch_gated_activation(act, GeluMode::kF16Table, dg.p, du.p, dg.p, rows * n, nullptr);
        launch_gated_activation_rows(act, GeluMode::kF16Table, dgu.p, dgu.p + n, ldi, rows, n, dout.p, n, nullptr);
        const auto ref = dg.get(), got = dout.get();
        int64_t bad = 0;
        for (size_t i = 0; i < ref.size(); ++i) bad += std::memcmp(&ref[i], &got[i], 4) != 0;
        const std::string shape = "n " + std::to_string(n) + " rows " + std::to_string(rows);
        const std::string name = act == Activation::kSilu ? "silu" : "gelu f16-table";
        report("gated_activation_rows " + name, shape, 0, 0, bad);
        // E4M3 rows (row stride rounded up to 16, zero padded) and one scale per row.
        const int64_t ldo = (n + 15) / 16 * 16;
        Dev<uint8_t> f_ref(rows * ldo), f_got(rows * ldo);
        Dev<float> s_ref(rows), s_got(rows);
        kernels::launch_quantize_act_fp8_rows(dg.p, n, rows, n, f_ref.p, ldo, s_ref.p, nullptr);
        launch_gated_activation_fp8_rows(act, GeluMode::kF16Table, dgu.p, dgu.p + n, ldi, rows, n, f_got.p, ldo,
                                         s_got.p, nullptr);
        const auto fr = f_ref.get(), fg = f_got.get();
        const auto sr = s_ref.get(), sg = s_got.get();
        int64_t bad8 = 0;
        for (size_t i = 0; i < fr.size(); ++i) bad8 += fr[i] != fg[i];
        for (int r = 0; r < rows; ++r) bad8 += std::memcmp(&sr[r], &sg[r], 4) != 0;
        report("gated_activation_fp8_rows " + name, shape, 0, 0, bad8);
        // F16 rows (a batched-decode product's input): the float values rounded as
        // kernels::launch_convert_act rounds them; the padding past n untouched.
        const int64_t ldh = (n + 15) / 16 * 16;
        Dev<__half> h_ref(rows * ldh), h_got(rows * ldh);
        kernels::launch_convert_act(dg.p, n, rows, n, h_ref.p, ldh, false, nullptr);
        DUET_CUDA_CHECK(cudaMemset(h_got.p, 0xff, rows * ldh * 2));
        launch_gated_activation_f16(act, GeluMode::kF16Table, dgu.p, dgu.p + n, ldi, rows, n, h_got.p, ldh, nullptr);
        const auto hr = h_ref.get(), hg = h_got.get();
        int64_t bad16 = 0;
        for (int r = 0; r < rows; ++r)
          for (int64_t i = 0; i < ldh; ++i) {
            const uint16_t ff = 0xffff;
            bad16 += i < n ? std::memcmp(&hr[r * ldh + i], &hg[r * ldh + i], 2) != 0
                           : std::memcmp(&hg[r * ldh + i], &ff, 2) != 0;
          }
        report("gated_activation_f16 " + name, shape, 0, 0, bad16);
        if (n % 32 != 0) continue;  // the int8 form takes whole 32-value groups
        kernels::launch_quantize_act_q8(dg.p, n, rows, n, dq_ref.p, reinterpret_cast<float4*>(dm_ref.p), false, nullptr);
        launch_gated_activation_q8(act, GeluMode::kF16Table, dgu.p, dgu.p + n, ldi, rows, n, dq.p,
                                   reinterpret_cast<float4*>(dm.p), false, nullptr);
        compare_q8("gated_activation_q8 " + name, shape, get_q8(dq, dm), get_q8(dq_ref, dm_ref), 0, 0.0);
      }
    }
  }
}

// qkv_rope_cache against the launches it replaces (add_bias x3, per-head rms_norm x2, rope x2,
// scale, kv_write), which are each checked against the CPU above. Identical operations in the
// same order, except that the per-head norm's double sum is associated differently: bound 2 ulp
// of float (2^-22 relative, as RmsNorm) on Q and on an F32 cache, one F16 ulp on an F16 cache
// (a float differing in its last bit can round to the neighbouring F16). Also: Q columns past
// head_dim untouched, cache columns past head_dim zero, other cache slots untouched.
TEST_F(GpuOps, QkvRopeCache) {
  struct Case {
    const char* name;
    int nh, nkv, hd, cache_hd;
    bool bias, norm;
    float q_scale;
    RopeStyle style;
    DType cache;
  };
  const Case cases[] = {{"qwen2 (bias)", 28, 4, 128, 128, true, false, 1.0f, RopeStyle::kNeox, DType::kF16},
                        {"qwen3 (qk-norm)", 32, 8, 128, 128, false, true, 1.0f, RopeStyle::kNeox, DType::kF32},
                        {"gemma3 (norm, q scale)", 8, 4, 256, 256, false, true, 0.0625f, RopeStyle::kNeox, DType::kF16},
                        {"llama normal", 8, 2, 64, 64, false, false, 1.0f, RopeStyle::kNormal, DType::kF32},
                        {"tiny padded hd 16", 4, 2, 16, 64, true, true, 1.0f, RopeStyle::kNeox, DType::kF16}};
  for (const Case& c : cases) {
    const int nt = 5, bs = 16, n_blocks = 8, max_blocks = 4;
    const int64_t qd = int64_t{c.nh} * c.hd, kvd = int64_t{c.nkv} * c.hd, ld = qd + 2 * kvd;
    std::vector<float> qkv = randn(nt * ld, 1.5f, 40), bq = randn(qd, 0.5f, 41), bk = randn(kvd, 0.5f, 42),
                       bv = randn(kvd, 0.5f, 43), qn = randn(c.hd, 1.0f, 44), kn = randn(c.hd, 1.0f, 45);
    std::vector<int32_t> pos = {0, 1, 2, 7, 40}, seq = {0, 0, 0, 1, 1}, tables(2 * max_blocks);
    for (int i = 0; i < 2 * max_blocks; ++i) tables[i] = (i * 3 + 1) % n_blocks;
    const size_t eb = c.cache == DType::kF16 ? 2 : 4;
    const size_t cache_bytes = size_t{n_blocks} * c.nkv * bs * c.cache_hd * eb;
    Dev<float> dqkv(qkv), dbq(bq), dbk(bk), dbv(bv), dqn(qn), dkn(kn);
    Dev<int32_t> dpos(pos), dseq(seq), dtab(tables);
    const AttentionBatch b = token_batch(nt, 2, dpos, dseq, dtab, max_blocks);
    // Reference: the separate launches on a copy, K/V padded to the cache's head_dim with zeros.
    std::vector<float> ref_q, ref_kc, ref_vc;
    {
      Dev<float> d(qkv);
      float *Q = d.p, *K = d.p + qd, *V = d.p + qd + kvd;
      if (c.bias) {
        launch_add_bias(Q, ld, dbq.p, qd, nt, nullptr);
        launch_add_bias(K, ld, dbk.p, kvd, nt, nullptr);
        launch_add_bias(V, ld, dbv.p, kvd, nt, nullptr);
      }
      std::vector<float> h = d.get();  // rows with heads contiguous, for the per-head norm
      std::vector<float> q(nt * qd), k(nt * kvd), v(nt * kvd);
      for (int t = 0; t < nt; ++t) {
        std::copy_n(&h[t * ld], qd, &q[t * qd]);
        std::copy_n(&h[t * ld + qd], kvd, &k[t * kvd]);
        std::copy_n(&h[t * ld + qd + kvd], kvd, &v[t * kvd]);
      }
      Dev<float> dq(q), dk(k);
      if (c.norm) {
        launch_rms_norm(dq.p, c.hd, dqn.p, 1e-6f, c.hd, int64_t{nt} * c.nh, dq.p, c.hd, nullptr);
        launch_rms_norm(dk.p, c.hd, dkn.p, 1e-6f, c.hd, int64_t{nt} * c.nkv, dk.p, c.hd, nullptr);
      }
      launch_rope(dq.p, qd, nt, c.nh, c.hd, dpos.p, 1e6f, nullptr, c.style, nullptr);
      launch_rope(dk.p, kvd, nt, c.nkv, c.hd, dpos.p, 1e6f, nullptr, c.style, nullptr);
      if (c.q_scale != 1.0f) launch_scale(dq.p, c.q_scale, nt * qd, nullptr);
      ref_q = dq.get();
      k = dk.get();
      std::vector<float> kp(nt * c.nkv * c.cache_hd, 0.0f), vp(kp.size(), 0.0f);
      for (int64_t r = 0; r < int64_t{nt} * c.nkv; ++r) {
        std::copy_n(&k[r * c.hd], c.hd, &kp[r * c.cache_hd]);
        std::copy_n(&v[r * c.hd], c.hd, &vp[r * c.cache_hd]);
      }
      Dev<float> dkp(kp), dvp(vp);
      Dev<uint8_t> kc(std::vector<uint8_t>(cache_bytes, 0x11)), vc(std::vector<uint8_t>(cache_bytes, 0x22));
      PagedKvCache kv{c.cache, kc.p, vc.p, bs, c.nkv, c.cache_hd};
      launch_kv_write(kv, b, dkp.p, c.nkv * c.cache_hd, dvp.p, c.nkv * c.cache_hd, nullptr);
      ref_kc = cache_floats(kc.get(), eb);
      ref_vc = cache_floats(vc.get(), eb);
    }
    // Fused: Q into a padded buffer (stride cache_hd per head, sentinel in the pad).
    const int64_t ldq_out = int64_t{c.nh} * c.cache_hd;
    Dev<float> dqo(std::vector<float>(nt * ldq_out, 7.0f));
    Dev<uint8_t> kc(std::vector<uint8_t>(cache_bytes, 0x11)), vc(std::vector<uint8_t>(cache_bytes, 0x22));
    PagedKvCache kv{c.cache, kc.p, vc.p, bs, c.nkv, c.cache_hd};
    QkvRopeParams p;
    p.q = dqkv.p, p.k = dqkv.p + qd, p.v = dqkv.p + qd + kvd, p.ldq = p.ldk = p.ldv = ld;
    if (c.bias) p.bq = dbq.p, p.bk = dbk.p, p.bv = dbv.p;
    if (c.norm) p.q_norm = dqn.p, p.k_norm = dkn.p;
    p.eps = 1e-6f;
    p.n_heads = c.nh;
    p.head_dim = c.hd;
    p.rope_base = 1e6f;
    p.rope_style = c.style;
    p.q_scale = c.q_scale;
    p.q_out = dqo.p;
    p.ldq_out = ldq_out;
    p.q_head_stride = c.cache_hd;
    // The L2 prefetch side job (a range that ends inside a 128-byte line) leaves the results as they are.
    Dev<uint8_t> pre(std::vector<uint8_t>(100003, 0x33));
    if (&c == &cases[0] || &c == &cases[3]) p.l2_prefetch = pre.p, p.l2_prefetch_bytes = 100003;
    launch_qkv_rope_cache(p, kv, b, false, nullptr);
    const std::vector<float> got_q = dqo.get();
    double max_err = 0;
    int64_t bad = 0;
    for (int t = 0; t < nt; ++t)
      for (int h = 0; h < c.nh; ++h)
        for (int i = 0; i < c.cache_hd; ++i) {
          const float g = got_q[t * ldq_out + int64_t{h} * c.cache_hd + i];
          if (i >= c.hd) {
            bad += g != 7.0f;
            continue;
          }
          const float r = ref_q[t * qd + int64_t{h} * c.hd + i];
          const double e = std::fabs(g - r);
          max_err = std::max(max_err, e);
          bad += e > std::ldexp(std::fabs(r), -22) + 1e-30;
        }
    Dev<uint8_t>* caches[] = {&kc, &vc};
    const std::vector<float>* refs[] = {&ref_kc, &ref_vc};
    for (int which = 0; which < 2; ++which) {
      const std::vector<float> got = cache_floats(caches[which]->get(), eb);
      for (size_t i = 0; i < refs[which]->size(); ++i) {
        const float g = got[i];
        const float r = (*refs[which])[i];
        if (std::memcmp(&g, &r, 4) == 0) continue;
        const double e = std::fabs(double(g) - r);
        max_err = std::max(max_err, e);
        bad += !(e <= std::ldexp(std::fabs(r), eb == 2 ? -10 : -22) + 1e-30);
      }
    }
    report(std::string("qkv_rope_cache ") + c.name, std::string(c.cache == DType::kF16 ? "F16" : "F32") + " cache, 5 tokens",
           max_err, eb == 2 ? 9.8e-4 : 2.4e-7, bad);
  }
}

// Both argmax kernels (the one-block one, and on sm_90 the cluster one), vocabularies whose rows
// are and are not 16-byte aligned (151939), and one of fewer logits than the cluster's blocks (7).
TEST_F(GpuOps, Argmax) {
  set_argmax_path(ArgmaxPath::kAuto);
  std::vector<std::pair<int64_t, ArgmaxPath>> runs;
  for (int64_t vocab : {int64_t{151936}, int64_t{32000}, int64_t{7}, int64_t{262144}, int64_t{151939}}) {
    runs.push_back({vocab, ArgmaxPath::kBlock});
    if (argmax_path() == ArgmaxPath::kCluster) runs.push_back({vocab, ArgmaxPath::kCluster});
  }
  for (const auto& [vocab, path] : runs) {
    set_argmax_path(path);
    const int rows = 6;
    std::vector<float> l = randn(rows * vocab, 3.0f, 16);
    // Ties: row 1 has its maximum twice (the lower index wins), row 2 at the last index.
    l[vocab + vocab / 3] = 100.0f, l[vocab + vocab / 2] = 100.0f;
    l[2 * vocab + vocab - 1] = 100.0f;
    for (int64_t i = 0; i < vocab; ++i) l[3 * vocab + i] = -INFINITY;  // all -inf: index 0
    l[4 * vocab] = 50.0f;
    std::vector<int32_t> ref(rows);
    for (int r = 0; r < rows; ++r) ref[r] = argmax(&l[r * vocab], vocab);
    Dev<float> dl(l);
    Dev<int32_t> dout(rows);
    launch_argmax(dl.p, rows, vocab, dout.p, nullptr);
    const auto got = dout.get();
    report(path == ArgmaxPath::kCluster ? "argmax cluster" : "argmax block", "vocab " + std::to_string(vocab) + " x 6",
           0, 0, got != ref);
  }
  set_argmax_path(ArgmaxPath::kAuto);
}

// The CPU Sampler's kept set for one row (sorted by decreasing probability) and probabilities.
std::vector<std::pair<int32_t, double>> kept_set(const float* logits, int64_t vocab, float temp, int top_k, float top_p) {
  std::vector<std::pair<float, int32_t>> c(vocab);
  const float inv_t = 1.0f / temp;
  for (int64_t i = 0; i < vocab; ++i) c[i] = {logits[i] * inv_t, static_cast<int32_t>(i)};
  std::sort(c.begin(), c.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  size_t n = top_k > 0 && top_k < vocab ? top_k : vocab;
  std::vector<double> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i] = std::exp(static_cast<double>(c[i].first) - c[0].first);
  if (top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += p[i] / sum;
      if (cum >= top_p) {
        n = i + 1;
        break;
      }
    }
  }
  sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i];
  std::vector<std::pair<int32_t, double>> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = {c[i].second, p[i] / sum};
  return out;
}

// Sampler: greedy rows equal argmax; drawn tokens lie in the CPU's kept set; over 40000 draws
// with different seeds the frequencies match the CPU's kept-set probabilities within 5 sigma
// (sigma = sqrt(p (1 - p) / N) <= 0.0025; +0.002 for the float-vs-double probabilities).
TEST_F(GpuOps, Sample) {
  struct Cfg {
    float temp;
    int top_k;
    float top_p;
  };
  const Cfg cfgs[] = {{0.0f, 0, 1.0f}, {1.0f, 1, 1.0f}, {0.8f, 0, 1.0f}, {1.0f, 20, 1.0f}, {0.7f, 0, 0.9f}, {1.3f, 12, 0.8f}};
  const int64_t vocab = 64;
  const int n_rows = 40000;
  std::vector<float> base = randn(vocab, 2.0f, 17);
  for (const Cfg& c : cfgs) {
    std::vector<float> l(n_rows * vocab);
    for (int r = 0; r < n_rows; ++r) std::memcpy(&l[r * vocab], base.data(), vocab * 4);
    std::vector<SamplingRow> rows(n_rows);
    for (int r = 0; r < n_rows; ++r) rows[r] = SamplingRow{c.temp, c.top_k, c.top_p, 0, 1234567ull + r, 3};
    Dev<float> dl(l);
    Dev<SamplingRow> drows(rows);
    Dev<int32_t> dout(n_rows);
    launch_sample(dl.p, n_rows, vocab, drows.p, dout.p, nullptr);
    const auto got = dout.get();
    int64_t bad = 0;
    double max_dev = 0;
    if (c.temp <= 0 || c.top_k == 1) {
      const int32_t am = argmax(base.data(), vocab);
      for (int r = 0; r < n_rows; ++r) bad += got[r] != am;
    } else {
      const auto kept = kept_set(base.data(), vocab, c.temp, c.top_k, c.top_p);
      std::vector<double> freq(vocab, 0.0), prob(vocab, 0.0);
      for (auto [i, p] : kept) prob[i] = p;
      for (int r = 0; r < n_rows; ++r) {
        if (got[r] < 0 || got[r] >= vocab || prob[got[r]] == 0) {
          ++bad;
          continue;
        }
        freq[got[r]] += 1.0 / n_rows;
      }
      for (int64_t i = 0; i < vocab; ++i) {
        const double dev = std::fabs(freq[i] - prob[i]);
        max_dev = std::max(max_dev, dev);
        if (dev > 5 * std::sqrt(prob[i] * (1 - prob[i]) / n_rows) + 0.002) ++bad;
      }
    }
    char name[96];
    std::snprintf(name, sizeof name, "sample t=%.1f k=%d p=%.2f", c.temp, c.top_k, c.top_p);
    report(name, "vocab 64, 40000 draws", max_dev, 0, bad);
  }
  // Large vocabulary: kept-set membership and determinism (same seed and counter, same token).
  {
    const int64_t big = 151936;
    const int rows_n = 16;
    std::vector<float> l = randn(rows_n * big, 2.5f, 18);
    std::vector<SamplingRow> rows(rows_n);
    for (int r = 0; r < rows_n; ++r) rows[r] = SamplingRow{0.9f, r % 2 ? 50 : 0, r % 3 ? 0.95f : 1.0f, 0, 42ull + r / 2, 7};
    Dev<float> dl(l);
    Dev<SamplingRow> drows(rows);
    Dev<int32_t> dout(rows_n), dout2(rows_n);
    launch_sample(dl.p, rows_n, big, drows.p, dout.p, nullptr);
    launch_sample(dl.p, rows_n, big, drows.p, dout2.p, nullptr);
    const auto got = dout.get(), got2 = dout2.get();
    int64_t bad = got != got2;
    for (int r = 0; r < rows_n; ++r) {
      if (rows[r].top_k == 0 && rows[r].top_p >= 1.0f) continue;  // any token is allowed
      const auto kept = kept_set(&l[r * big], big, rows[r].temperature, rows[r].top_k, rows[r].top_p);
      bool in = false;
      for (auto [i, p] : kept) in |= i == got[r];
      bad += !in;
    }
    report("sample kept set + determinism", "vocab 151936 x 16", 0, 0, bad);
  }
}

}  // namespace
}  // namespace duet::cuda
