// Bit-exactness of the CPU kernels against llama.cpp's own, called straight from the ggml CPU
// library that llama-cpp-python installs (dlopen'ed; the test is skipped when it is absent or was
// built for another ISA than the AVX2 one duet reproduces). Covers the activation quantizers, the
// vec_dot kernels of every weight type llama.cpp runs without repacking, the repacked Q4_K
// gemv/gemm, and whole mul_mat ops run through ggml's own graph executor (which takes the tiled
// K-quant path for batches of >= 8 rows). Library: $DUET_GGML_CPU_LIB, else llama_cpp/lib/libggml-cpu.so under common
// Python site-packages roots.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/quant_dot.h"
#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

namespace fs = std::filesystem;

using QuantizeFn = void (*)(const float*, void*, int64_t);
using GgmlDotFn = void (*)(int, float*, size_t, const void*, size_t, const void*, size_t, int);
using GemFn = void (*)(int, float*, size_t, const void*, const void*, int, int);
using RepackFn = int (*)(void*, const void*, size_t);

std::string find_ggml_cpu() {
  if (const char* env = std::getenv("DUET_GGML_CPU_LIB")) return env;
  std::vector<fs::path> roots;
  if (const char* home = std::getenv("HOME")) roots.push_back(fs::path(home) / ".pyenv" / "versions");
  roots.push_back("/usr/local/lib");
  roots.push_back("/usr/lib");
  std::error_code ec;
  for (const auto& root : roots) {
    if (!fs::exists(root, ec)) continue;
    for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (it.depth() > 6) it.disable_recursion_pending();
      const fs::path& p = it->path();
      if (p.filename() == "libggml-cpu.so" && p.parent_path().filename() == "lib" &&
          p.parent_path().parent_path().filename() == "llama_cpp")
        return p.string();
    }
  }
  return "";
}

class GgmlParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = find_ggml_cpu();
    if (path.empty()) return;
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    if (auto init = reinterpret_cast<void (*)()>(dlsym(lib_, "ggml_cpu_init"))) init();  // F16 tables
  }
  void SetUp() override {
    if (!lib_) GTEST_SKIP() << "llama.cpp's libggml-cpu.so not found (set DUET_GGML_CPU_LIB)";
    auto has = [&](const char* f) {
      auto fn = reinterpret_cast<int (*)()>(dlsym(lib_, f));
      return fn && fn();
    };
    if (!has("ggml_cpu_has_avx2") || !has("ggml_cpu_has_fma") || has("ggml_cpu_has_avx512"))
      GTEST_SKIP() << "the installed ggml is not an AVX2 (non-AVX-512) build";
    if (cpu_features().level < SimdLevel::kAvx2) GTEST_SKIP() << "this CPU lacks AVX2";
  }
  template <typename F>
  F sym(const char* name) {
    auto f = reinterpret_cast<F>(dlsym(lib_, name));
    EXPECT_NE(f, nullptr) << name;
    return f;
  }
  static void* lib_;
};
void* GgmlParity::lib_ = nullptr;

std::vector<float> gaussian(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

TEST_F(GgmlParity, ActivationQuantizersAndVecDots) {
  struct Case {
    DType w;
    const char* dot;
    const char* quant;  // activation quantizer, or null for float types
  };
  const Case cases[] = {
      {DType::kQ4_0, "ggml_vec_dot_q4_0_q8_0", "quantize_row_q8_0"}, {DType::kQ4_1, "ggml_vec_dot_q4_1_q8_1", "quantize_row_q8_1"},
      {DType::kQ5_0, "ggml_vec_dot_q5_0_q8_0", "quantize_row_q8_0"}, {DType::kQ5_1, "ggml_vec_dot_q5_1_q8_1", "quantize_row_q8_1"},
      {DType::kQ8_0, "ggml_vec_dot_q8_0_q8_0", "quantize_row_q8_0"}, {DType::kQ4_K, "ggml_vec_dot_q4_K_q8_K", "quantize_row_q8_K"},
      {DType::kQ5_K, "ggml_vec_dot_q5_K_q8_K", "quantize_row_q8_K"}, {DType::kQ6_K, "ggml_vec_dot_q6_K_q8_K", "quantize_row_q8_K"},
      {DType::kF16, "ggml_vec_dot_f16", nullptr},                    {DType::kBF16, "ggml_vec_dot_bf16", nullptr},
      {DType::kF32, "ggml_vec_dot_f32", nullptr},
  };
  std::mt19937 rng(11);
  for (const Case& c : cases) {
    auto dot = sym<GgmlDotFn>(c.dot);
    auto quant = c.quant ? sym<QuantizeFn>(c.quant) : nullptr;
    if (!dot || (c.quant && !quant)) continue;
    const DType act = activation_type(c.w);
    for (int trial = 0; trial < 40; ++trial) {
      const int n = trial % 2 ? 512 : 1536 + (act == DType::kF32 || act == DType::kF16 || act == DType::kBF16 ? 24 : 0);
      const auto x = gaussian(n, rng, static_cast<float>(trial % 5 + 1));
      const auto w = gaussian(n, rng, 1.0f);
      std::vector<uint8_t> wq(*row_bytes(c.w, n));
      quantize_row(c.w, w.data(), wq.data(), n);
      std::vector<uint8_t> ours(*row_bytes(act, n)), theirs(ours.size());
      quantize_activation(c.w, x.data(), ours.data(), n);
      if (quant) {
        quant(x.data(), theirs.data(), n);
        ASSERT_EQ(std::memcmp(ours.data(), theirs.data(), ours.size()), 0) << c.quant << " n=" << n;
      }
      float ref;
      dot(n, &ref, 0, wq.data(), 0, ours.data(), 0, 1);
      const float got = vec_dot_fn_at(c.w, SimdLevel::kAvx2)(n, wq.data(), ours.data());
      ASSERT_EQ(got, ref) << c.dot << " n=" << n << " trial " << trial;
      if (act == DType::kF32 || act == DType::kF16 || act == DType::kBF16) {
        // The float types' generic kernels reproduce the same lanes.
        ASSERT_EQ(vec_dot_fn_at(c.w, SimdLevel::kGeneric)(n, wq.data(), ours.data()), ref) << c.dot << " generic";
      }
    }
  }
}

TEST_F(GgmlParity, RepackedQ4_KGemvAndGemm) {
  auto repack = sym<RepackFn>("_ZN4ggml3cpu6repack6repackI10block_q4_KLl8ELl8EEEiP11ggml_tensorPKvm");
  auto gemv = sym<GemFn>("ggml_gemv_q4_K_8x8_q8_K");
  auto gemm = sym<GemFn>("ggml_gemm_q4_K_8x8_q8_K");
  auto qmat = sym<QuantizeFn>("ggml_quantize_mat_q8_K_4x8");
  if (!repack || !gemv || !gemm || !qmat) return;
  std::mt19937 rng(5);
  const int n = 1024, rows = 16;
  const size_t rb = *row_bytes(DType::kQ4_K, n), ab = *row_bytes(DType::kQ8_K, n);
  for (int trial = 0; trial < 10; ++trial) {
    const auto w = gaussian(static_cast<size_t>(n) * rows, rng, 1.0f);
    const auto x = gaussian(4 * n, rng, static_cast<float>(trial + 1));
    std::vector<uint8_t> wq(rb * rows), packed(rb * rows);
    for (int r = 0; r < rows; ++r) quantize_row(DType::kQ4_K, &w[r * n], &wq[r * rb], n);
    // A ggml_tensor as repack() reads it: type, ne[4] at 16, data at 248 (ggml.h layout).
    alignas(64) uint8_t tensor[512] = {};
    *reinterpret_cast<int32_t*>(tensor) = static_cast<int32_t>(DType::kQ4_K);
    int64_t* ne = reinterpret_cast<int64_t*>(tensor + 16);
    ne[0] = n;
    ne[1] = rows;
    ne[2] = ne[3] = 1;
    *reinterpret_cast<void**>(tensor + 248) = packed.data();
    ASSERT_EQ(repack(tensor, wq.data(), wq.size()), 0);
    std::vector<uint8_t> a(ab * 4), a4(ab * 4);
    for (int t = 0; t < 4; ++t) quantize_activation(DType::kQ4_K, &x[t * n], &a[t * ab], n);
    qmat(x.data(), a4.data(), n);
    std::vector<float> sv(rows), sm(4 * rows);
    gemv(n, sv.data(), 0, packed.data(), a.data(), 1, rows);
    gemm(n, sm.data(), rows, packed.data(), a4.data(), 4, rows);
    for (SimdLevel l : {SimdLevel::kGeneric, SimdLevel::kAvx2}) {
      const VecDotFn v = vec_dot_fn_at(DType::kQ4_K, l, DotVariant::kRepackGemv);
      const VecDotFn m = vec_dot_fn_at(DType::kQ4_K, l, DotVariant::kRepackGemm);
      for (int r = 0; r < rows; ++r) {
        ASSERT_EQ(v(n, &wq[r * rb], a.data()), sv[r]) << "gemv row " << r << " level " << simd_level_name(l);
        for (int t = 0; t < 4; ++t)
          ASSERT_EQ(m(n, &wq[r * rb], &a[t * ab]), sm[t * rows + r]) << "gemm row " << r << " token " << t;
      }
    }
  }
}

// ggml's public C API, as much of it as one mul_mat needs (ggml.h / ggml-cpu.h).
struct GgmlInitParams {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};

// A K-quant weight matrix (row count not a multiple of 16, so the tiles are ragged) times a batch
// of activation rows through ggml_mul_mat + ggml_graph_compute_with_ctx, against duet's matmul()
// with the row batching llama.cpp would see: vec_dot below 8 rows, the tiled kernels from 8 up
// (bit for bit for every K-quant in the tiled path).
// (These matrices are not repacked: they live in a plain context, as Q6_K does in llama.cpp.)
TEST_F(GgmlParity, KQuantMulMatThroughGgmlGraph) {
  auto init = sym<void* (*)(GgmlInitParams)>("ggml_init");
  auto free_ctx = sym<void (*)(void*)>("ggml_free");
  auto new_2d = sym<void* (*)(void*, int, int64_t, int64_t)>("ggml_new_tensor_2d");
  auto get_data = sym<void* (*)(const void*)>("ggml_get_data");
  auto mul_mat = sym<void* (*)(void*, void*, void*)>("ggml_mul_mat");
  auto new_graph = sym<void* (*)(void*)>("ggml_new_graph");
  auto expand = sym<void (*)(void*, void*)>("ggml_build_forward_expand");
  auto compute = sym<int (*)(void*, void*, int)>("ggml_graph_compute_with_ctx");
  if (!init || !free_ctx || !new_2d || !get_data || !mul_mat || !new_graph || !expand || !compute) return;
  ThreadPool pool(2);
  std::mt19937 rng(21);
  const int n = 512, rows = 40;
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ5_K, DType::kQ6_K}) {
    for (int n_tok : {3, 8, 13, 24}) {
      // duet has no AVX2 port of ggml's Q2_K / Q3_K vec_dot (its generic code sums differently).
      if (n_tok < 8 && (t == DType::kQ2_K || t == DType::kQ3_K)) continue;
      const auto w = gaussian(static_cast<size_t>(n) * rows, rng, 1.0f);
      const auto x = gaussian(static_cast<size_t>(n) * n_tok, rng, 2.0f);
      const size_t rb = *row_bytes(t, n);
      std::vector<uint8_t> wq(rb * rows);
      for (int r = 0; r < rows; ++r) quantize_row(t, &w[r * n], &wq[r * rb], n);
      void* ctx = init({size_t{64} << 20, nullptr, false});
      ASSERT_NE(ctx, nullptr);
      void* W = new_2d(ctx, static_cast<int>(t), n, rows);
      void* X = new_2d(ctx, 0 /* F32 */, n, n_tok);
      std::memcpy(get_data(W), wq.data(), wq.size());
      std::memcpy(get_data(X), x.data(), x.size() * sizeof(float));
      void* Y = mul_mat(ctx, W, X);
      void* graph = new_graph(ctx);
      expand(graph, Y);
      ASSERT_EQ(compute(ctx, graph, 2), 0);
      std::vector<float> ref(static_cast<size_t>(rows) * n_tok);
      std::memcpy(ref.data(), get_data(Y), ref.size() * sizeof(float));
      free_ctx(ctx);

      WeightMatrix wm{t, wq.data(), rows, n, rb};
      QuantizedRows q;
      quantize_rows(t, x.data(), n_tok, n, n, &q, pool);
      std::vector<RowBatching> batching(n_tok);
      for (int i = 0; i < n_tok; ++i) batching[i] = {n_tok, i};
      std::vector<float> got(ref.size());
      MatmulJob job{&wm, &q, got.data(), static_cast<size_t>(rows)};
      matmul(std::span<const MatmulJob>(&job, 1), pool, batching);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_EQ(got[i], ref[i]) << dtype_name(t) << " tokens " << n_tok << " out " << i;
    }
  }
}

}  // namespace
}  // namespace duet
