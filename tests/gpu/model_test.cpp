// Whole-model parity: the CUDA backend's logits against duet's CPU backend (the reference, itself
// checked against transformers and llama.cpp) on the same file, for prefill, token-by-token decode
// (CUDA graphs) and several sequences stepping together, on both kernel paths (native, and
// generic = what a V100 has). Models: the committed tiny models of every architecture (as
// safetensors F32 and GGUF F16/Q8_0 conversions), and any files listed in
// DUET_GPU_PARITY_MODELS (comma-separated; scripts/gpu-check.sh passes `duet synth` files of real
// shapes in Q4_K_M, Q8_0, BF16 and FP8; FP8 files also with --fp8 weight-only on the native path,
// whose tensor-core kernels an FP8 card would otherwise skip). stdout is line-buffered, so that a
// run cut short by a time limit still shows the files it finished.
//
// Metric per logits row: relative RMS error |gpu - cpu|_2 / |cpu|_2. Bounds, by the weights'
// main type (documented in docs/ARCHITECTURE.md):
//  - F32 weights: both backends compute in float32 but sum in different orders, and the GPU's
//    prompt path may run F16/TF32 tensor cores: 1e-2 covers F16 rounding of activations (2^-11
//    relative per element, growing over layers), measured values are printed.
//  - F16 / BF16 / FP8 weight-only: float weights; the GPU rounds prompt activations to F16/BF16
//    for its tensor cores, the CPU does not: bound 8e-2 (measured <= 1.3e-2 on qwen2-7b).
//  - FP8 native (E4M3 tensor cores, sm_89+): prompt activations are rounded to E4M3 with one
//    scale per tensor, 3 mantissa bits (up to 6% per element), and that error reaches the KV
//    cache, so later decode steps inherit it: bound 2.5e-1 (measured 4.5e-2 on qwen2-0.5b,
//    1.8e-1 prefill / 7.4e-2 decode on qwen2-7b). Per-token activation scales would shrink it.
//  - Q4_0..Q8_0 and K-quants: the CPU quantizes each matmul input to 8 bits per block (Q8_K per
//    256 / Q8_0 per 32, llama.cpp's numerics) and the GPU its own way (int8 per 32 for dp4a, F16
//    for tensor cores). Two independent roundings of ~0.4% per element in each of the ~200
//    matmuls of a 28-layer model accumulate like a random walk (sqrt(200) * 0.4% * sqrt(2) ~ 8%):
//    measured 1e-2 (qwen2-0.5b) to 6.8e-2 (qwen2-7b); bound 1e-1.
// Top-1: wherever the CPU's margin between its two best logits exceeds 4x the row's allowed RMS
// error (bound * rms(cpu row)), the GPU's top-1 must be the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/convert.h"
#include "formats/gguf.h"
#include "model/model.h"
#include "kernels/cpu/sampling.h"
#include "model/session.h"
#include "runner/cuda_model.h"
#include "runtime/device.h"

namespace duet {
namespace {

namespace fs = std::filesystem;

struct RowCheck {
  double worst_rel_rms = 0;
  int top1_checked = 0, top1_same = 0;
};

// Compares n_rows rows of vocab logits; records the worst relative RMS error and top-1 agreement.
void compare_rows(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t vocab, double bound, RowCheck* rc,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  const int64_t n_rows = static_cast<int64_t>(cpu.size()) / vocab;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* g = gpu.data() + r * vocab;
    const float* c = cpu.data() + r * vocab;
    double num = 0, den = 0;
    int64_t a1 = 0, a2 = -1, ga = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      ASSERT_TRUE(std::isfinite(g[i])) << what << " row " << r << " logit " << i;
      num += (double(g[i]) - c[i]) * (double(g[i]) - c[i]);
      den += double(c[i]) * c[i];
      if (c[i] > c[a1]) a2 = a1, a1 = i;
      else if (i != a1 && (a2 < 0 || c[i] > c[a2])) a2 = i;
      if (g[i] > g[ga]) ga = i;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    rc->worst_rel_rms = std::max(rc->worst_rel_rms, rel);
    EXPECT_LE(rel, bound) << what << " row " << r;
    const double rms = std::sqrt(den / vocab);
    if (a2 >= 0 && c[a1] - c[a2] > 4 * bound * rms) {
      ++rc->top1_checked;
      rc->top1_same += ga == a1;
      EXPECT_EQ(ga, a1) << what << " row " << r << ": top-1 differs where the CPU's margin is " << c[a1] - c[a2];
    }
  }
}

double bound_for(DType main, bool fp8_native) {
  switch (main) {
    case DType::kF32: return 1e-2;
    case DType::kF8_E4M3: return fp8_native ? 2.5e-1 : 8e-2;
    case DType::kF16:
    case DType::kBF16: return 8e-2;
    default: return 1e-1;
  }
}

DType main_dtype(const ModelWeights& w) {
  std::map<DType, uint64_t> bytes;
  for (const LayerWeights& L : w.layers)
    for (const WeightMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      bytes[m->dtype] += uint64_t(m->n_rows) * m->row_bytes;
  DType best = DType::kF32;
  uint64_t most = 0;
  for (auto [t, b] : bytes)
    if (b > most) most = b, best = t;
  return best;
}

// The logits of: a prefill of tokens[0:n_prefill) (every row), then each later token decoded
// alone (teacher forcing), then 3 sequences with prompts of different lengths stepping together,
// then kWide sequences (prompts of 1 to n_prefill tokens) stepping together twice (a batch of 9-64 rows: the GPU's batched-decode
// products, on the quantized tensor-core kernel for K-quant and Q8_0 weights).
constexpr int kWide = 12;
struct Trace {
  std::vector<float> prefill;
  std::vector<float> decode;  // one row per decoded token
  std::vector<float> multi;   // 3 rows per joint step
  std::vector<float> wide;    // kWide rows per joint step
};

Trace trace(ForwardModel& m, const std::vector<int32_t>& toks, int n_prefill, int n_multi_steps) {
  Trace t;
  const int64_t vocab = m.hparams().vocab_size;
  {
    Session s(m, 512);
    const int q = s.add_sequence();
    Status st = s.eval(q, std::span<const int32_t>(toks.data(), n_prefill), true, &t.prefill);
    EXPECT_TRUE(st.is_ok()) << st.message();
    std::vector<float> lg;
    for (size_t i = n_prefill; i < toks.size(); ++i) {
      st = s.eval(q, std::span<const int32_t>(&toks[i], 1), false, &lg);
      EXPECT_TRUE(st.is_ok()) << st.message();
      t.decode.insert(t.decode.end(), lg.begin(), lg.begin() + vocab);
    }
  }
  {
    Session s(m, 512);
    std::vector<int> seqs;
    std::vector<float> lg;
    const int lens[3] = {std::max(1, n_prefill / 3), std::max(1, n_prefill / 2), n_prefill};
    for (int j = 0; j < 3; ++j) {
      seqs.push_back(s.add_sequence());
      Status st = s.eval(seqs.back(), std::span<const int32_t>(toks.data() + j, lens[j]), false, &lg);
      EXPECT_TRUE(st.is_ok()) << st.message();
    }
    for (int i = 0; i < n_multi_steps; ++i) {
      const std::vector<int32_t> step = {toks[i], toks[i + 1], toks[i + 2]};
      Status st = s.step(seqs, step, &lg);
      EXPECT_TRUE(st.is_ok()) << st.message();
      t.multi.insert(t.multi.end(), lg.begin(), lg.end());
    }
  }
  {
    Session s(m, 512);
    std::vector<int> seqs;
    std::vector<float> lg;
    for (int j = 0; j < kWide; ++j) {
      seqs.push_back(s.add_sequence());
      const int len = std::min<int>(1 + (7 * j) % n_prefill, int(toks.size()) - j);
      Status st = s.eval(seqs.back(), std::span<const int32_t>(toks.data() + j, len), false, &lg);
      EXPECT_TRUE(st.is_ok()) << st.message();
    }
    for (int i = 0; i < 2; ++i) {
      std::vector<int32_t> step(toks.begin() + i, toks.begin() + i + kWide);
      Status st = s.step(seqs, step, &lg);
      EXPECT_TRUE(st.is_ok()) << st.message();
      t.wide.insert(t.wide.end(), lg.begin(), lg.end());
    }
  }
  return t;
}

// The ids forward_greedy returns along the same trace (the prefill's last row, each decoded
// token's row, 3 per joint step), and the logits rows each of those forwards left on the device.
struct GreedyTrace {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // one row per id
};

GreedyTrace greedy_trace(cuda::CudaModel& m, const std::vector<int32_t>& toks, int n_prefill, int n_multi_steps) {
  GreedyTrace g;
  const int64_t vocab = m.hparams().vocab_size;
  auto keep_logits = [&](int n_rows) {
    const size_t at = g.logits.size();
    g.logits.resize(at + size_t(n_rows) * vocab);
    Status st = m.last_logits(n_rows, g.logits.data() + at);
    EXPECT_TRUE(st.is_ok()) << st.message();
  };
  {
    Session s(m, 512);
    const int q = s.add_sequence();
    int32_t next = -1;
    Status st = s.eval_greedy(q, std::span<const int32_t>(toks.data(), n_prefill), &next);
    EXPECT_TRUE(st.is_ok()) << st.message();
    g.ids.push_back(next);
    keep_logits(1);
    for (size_t i = n_prefill; i < toks.size(); ++i) {
      st = s.eval_greedy(q, std::span<const int32_t>(&toks[i], 1), &next);
      EXPECT_TRUE(st.is_ok()) << st.message();
      g.ids.push_back(next);
      keep_logits(1);
    }
  }
  {
    Session s(m, 512);
    std::vector<int> seqs;
    int32_t unused = -1;
    const int lens[3] = {std::max(1, n_prefill / 3), std::max(1, n_prefill / 2), n_prefill};
    for (int j = 0; j < 3; ++j) {
      seqs.push_back(s.add_sequence());
      Status st = s.eval_greedy(seqs.back(), std::span<const int32_t>(toks.data() + j, lens[j]), &unused);
      EXPECT_TRUE(st.is_ok()) << st.message();
    }
    for (int i = 0; i < n_multi_steps; ++i) {
      const std::vector<int32_t> step = {toks[i], toks[i + 1], toks[i + 2]};
      int32_t next[3] = {-1, -1, -1};
      Status st = s.step_greedy(seqs, step, next);
      EXPECT_TRUE(st.is_ok()) << st.message();
      g.ids.insert(g.ids.end(), next, next + 3);
      keep_logits(3);
    }
  }
  return g;
}

// forward_greedy (argmax on the device, only the ids read back; decode steps from their own
// captured graphs), two checks:
//  1. exact: each id is the argmax (first maximum, as the CPU's) of the logits row that same
//     forward left on the device;
//  2. those logits against the rows forward() returned for the same trace, under the same rule
//     as GPU against CPU (relative RMS within `bound`, top-1 equal where the margin exceeds 4x
//     the allowed error). Two GPU runs are not bit-identical on the native path: the prompt's
//     batched products sum stream-K pieces with float atomics, so the KV cache differs in the
//     last bits, and the int8 rounding of later activations can turn that into whole steps.
//     A wrong or stale graph input would miss by far more (measured: see the [greedy] line).
void check_greedy(cuda::CudaModel& gpu, const Trace& t, const std::vector<int32_t>& toks, int n_prefill,
                  int multi_steps, double bound) {
  const int64_t vocab = gpu.hparams().vocab_size;
  const GreedyTrace g = greedy_trace(gpu, toks, n_prefill, multi_steps);
  ASSERT_EQ(g.logits.size(), g.ids.size() * vocab);
  for (size_t r = 0; r < g.ids.size(); ++r)
    EXPECT_EQ(g.ids[r], argmax(g.logits.data() + r * vocab, vocab)) << "row " << r;
  std::vector<float> ref(t.prefill.end() - vocab, t.prefill.end());
  ref.insert(ref.end(), t.decode.begin(), t.decode.end());
  ref.insert(ref.end(), t.multi.begin(), t.multi.end());
  RowCheck rc;
  compare_rows(g.logits, ref, vocab, bound, &rc, "greedy forwards vs forward()");
  std::printf("[greedy] %zu rows: device argmax = argmax of its logits; those logits vs forward()'s: rel RMS %.2e "
              "(bound %.0e), top-1 %d/%d\n",
              g.ids.size(), rc.worst_rel_rms, bound, rc.top1_same, rc.top1_checked);
}

struct PathCase {
  const char* path;  // DUET_KERNELS value
};

// Runs the CPU and the CUDA backend on one file and compares the traces.
void check_model(const std::string& file, const std::vector<int32_t>& toks, int n_prefill, const char* kernels,
                 DType kv_dtype, uint32_t kv_block_size, int multi_steps, cuda::Fp8Mode fp8 = cuda::Fp8Mode::kAuto) {
  SCOPED_TRACE(file + " kernels=" + kernels + (fp8 == cuda::Fp8Mode::kWeightOnly ? " fp8=weight-only" : ""));
  ASSERT_GT(cuda::device_count(), 0) << "no CUDA device";
  setenv("DUET_KERNELS", kernels, 1);
  auto wc = load_model_weights(file);
  ASSERT_TRUE(wc.is_ok()) << wc.status().message();
  const DType main = main_dtype(wc.value());
  ModelOptions mo;
  mo.kv_dtype = DType::kF32;
  mo.max_context = 512;
  mo.max_seqs = kWide;
  auto cpu = Model::create(std::move(wc.value()), mo);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().message();
  auto wg = load_model_weights(file);
  ASSERT_TRUE(wg.is_ok());
  cuda::CudaModelOptions co;
  co.kv_dtype = kv_dtype;
  co.kv_block_size = kv_block_size;
  co.max_context = 512;
  co.max_seqs = kWide;
  co.verbose = false;
  co.fp8 = fp8;
  auto gpu = cuda::CudaModel::create(std::move(wg.value()), co);
  ASSERT_TRUE(gpu.is_ok()) << gpu.status().message();
  const double bound = bound_for(main, gpu.value()->fp8_mode() == cuda::Fp8Mode::kNative);
  const Trace a = trace(*cpu.value(), toks, n_prefill, multi_steps);
  const Trace b = trace(*gpu.value(), toks, n_prefill, multi_steps);
  check_greedy(*gpu.value(), b, toks, n_prefill, multi_steps, bound);
  const int64_t vocab = cpu.value()->hparams().vocab_size;
  RowCheck pre, dec, mul, wid;
  compare_rows(b.prefill, a.prefill, vocab, bound, &pre, "prefill");
  compare_rows(b.decode, a.decode, vocab, bound, &dec, "decode");
  compare_rows(b.multi, a.multi, vocab, bound, &mul, "3 sequences");
  compare_rows(b.wide, a.wide, vocab, bound, &wid, std::to_string(kWide) + " sequences");
  const bool fp8_wo = main == DType::kF8_E4M3 && gpu.value()->fp8_mode() == cuda::Fp8Mode::kWeightOnly;
  std::printf("[parity] %-60s %-7s %-6s kv %s/%u: rel RMS prefill %.2e decode %.2e multi %.2e wide %.2e (bound %.0e); "
              "top-1 %d/%d\n",
              fs::path(file).filename().c_str(), kernels, (std::string(dtype_name(main)) + (fp8_wo ? "/wo" : "")).c_str(),
              std::string(dtype_name(kv_dtype)).c_str(), kv_block_size, pre.worst_rel_rms, dec.worst_rel_rms,
              mul.worst_rel_rms, wid.worst_rel_rms, bound, pre.top1_same + dec.top1_same + mul.top1_same + wid.top1_same,
              pre.top1_checked + dec.top1_checked + mul.top1_checked + wid.top1_checked);
  unsetenv("DUET_KERNELS");
}

std::vector<int32_t> random_tokens(int n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = d(rng);
  return v;
}

// The checkout: $DUET_SOURCE_DIR where the tests run from another copy (the GPU machine).
fs::path source_dir() {
  const char* e = std::getenv("DUET_SOURCE_DIR");
  return e && *e ? fs::path(e) : fs::path(DUET_SOURCE_DIR);
}

fs::path tiny_dir(const std::string& arch) { return source_dir() / "tests" / "data" / "model" / arch; }

std::string tiny_to_gguf(const std::string& arch, FileType ft) {
  const fs::path out = fs::temp_directory_path() / ("duet_gpu_tiny_" + arch + "_" + std::to_string(int(ft)) + ".gguf");
  auto st = SafetensorsModel::open(tiny_dir(arch).string());
  EXPECT_TRUE(st.is_ok()) << st.status().message();
  std::shared_ptr<SafetensorsModel> m(std::move(st.value()));
  auto hp = hparams_from_hf_config(m->config());
  EXPECT_TRUE(hp.is_ok());
  auto src = safetensors_tensor_source_gguf_names(m, *hp);
  EXPECT_TRUE(src.is_ok());
  GgufWriter w;
  hparams_to_gguf(*hp, w);
  MixModelInfo mix{int(hp->n_layers), int(hp->n_heads), int(hp->n_kv_heads), true};
  ConvertOptions opt;
  opt.n_threads = 2;
  opt.quiet = true;
  Status s = write_gguf(*src, w, ft, mix, out.string(), opt);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out.string();
}

class TinyGpuParity : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(TinyGpuParity, MatchesCpu) {
  const std::string arch = std::get<0>(GetParam());
  const char* kernels = std::get<1>(GetParam());
  std::ifstream f(tiny_dir(arch) / "tokens.json");
  ASSERT_TRUE(f) << "missing tiny model fixture for " << arch;
  std::vector<int32_t> toks = nlohmann::json::parse(f)["tokens"].get<std::vector<int32_t>>();
  const int n_prefill = static_cast<int>(toks.size()) * 3 / 4;
  check_model(tiny_dir(arch).string(), toks, n_prefill, kernels, DType::kF32, 16, 4);
  for (FileType ft : {FileType::kF16, FileType::kQ8_0}) {
    const std::string g = tiny_to_gguf(arch, ft);
    check_model(g, toks, n_prefill, kernels, DType::kF16, 7, 4);  // odd block size: tokens straddle blocks
    fs::remove(g);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyGpuParity,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "gemma3"),
                                            ::testing::Values("native", "generic")));

// Decode graphs size their attention grid for a context bucket (256, 512, ...: cuda_model.cpp's
// decode_context_bucket), so a sequence decoding past 256 keys moves to a new graph with a wider
// grid and longer block tables. 240 prompt tokens, 32 decoded (positions 240-271), and 3
// sequences (80, 120, 240 tokens) stepping 24 times cross that boundary; a grid or block table
// left at the old bucket would drop keys and miss the CPU by far more than the bound. Gemma 3's
// tiny model adds its sliding window (8) on alternate layers.
class TinyGpuParityLong : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyGpuParityLong, DecodeAcrossContextBucket) {
  const std::string arch = GetParam();
  const std::vector<int32_t> toks = random_tokens(272, 256, 11);  // the tiny models' vocabulary: 256
  const std::string g = tiny_to_gguf(arch, FileType::kF16);
  for (const char* k : {"native", "generic"}) check_model(g, toks, 240, k, DType::kF16, 16, 24);
  fs::remove(g);
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyGpuParityLong, ::testing::Values("qwen2", "gemma3"));

// Files named in DUET_GPU_PARITY_MODELS: 64 prompt tokens, 16 decoded, 3 sequences x 8 steps.
TEST(ListedGpuParity, MatchesCpu) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* env = std::getenv("DUET_GPU_PARITY_MODELS");
  if (!env || !*env) GTEST_SKIP() << "DUET_GPU_PARITY_MODELS not set (scripts/gpu-check.sh sets it)";
  std::stringstream ss(env);
  std::string file;
  while (std::getline(ss, file, ',')) {
    if (file.empty()) continue;
    auto w = load_model_weights(file);
    ASSERT_TRUE(w.is_ok()) << file << ": " << w.status().message();
    const auto toks = random_tokens(80, std::min<uint32_t>(w->hp.vocab_size, 32000), 7);
    for (const char* k : {"native", "generic"}) check_model(file, toks, 64, k, DType::kF16, 16, 8);
    // FP8 files: also the weight-only path where the card would run them natively (the H200).
    if (main_dtype(w.value()) == DType::kF8_E4M3)
      check_model(file, toks, 64, "native", DType::kF16, 16, 8, cuda::Fp8Mode::kWeightOnly);
  }
}

}  // namespace
}  // namespace duet
