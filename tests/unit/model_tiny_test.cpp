// Tiny random models of each architecture (tests/data/model/<arch>/, written by
// scripts/ref/model_numpy_ref.py and scripts/ref/model_tiny_ref.py): duet's logits against the
// independent float64 numpy forward pass and, where present, Hugging Face transformers on CPU,
// for the safetensors checkpoint and its GGUF F32 / F16 / Q8_0 conversions; the paged KV cache
// against one large block; prefill against token-by-token decode; batched sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/convert.h"
#include "formats/gguf.h"
#include "model/bench.h"
#include "model/model.h"
#include "kernels/cpu/sampling.h"
#include "model/session.h"

namespace duet {
namespace {

namespace fs = std::filesystem;

const char* const kArchs[] = {"llama", "qwen2", "qwen3", "gemma3"};

fs::path data_dir(const std::string& arch) { return fs::path(DUET_SOURCE_DIR) / "tests" / "data" / "model" / arch; }

std::vector<int32_t> read_tokens(const fs::path& dir) {
  std::ifstream f(dir / "tokens.json");
  nlohmann::json j = nlohmann::json::parse(f);
  return j["tokens"].get<std::vector<int32_t>>();
}

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

struct Diff {
  double max_abs_diff = 0, max_abs_ref = 0;
  double rel() const { return max_abs_diff / max_abs_ref; }
};

Diff compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  EXPECT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    d.max_abs_diff = std::max(d.max_abs_diff, std::fabs(static_cast<double>(got[i]) - ref[i]));
    d.max_abs_ref = std::max(d.max_abs_ref, std::fabs(static_cast<double>(ref[i])));
  }
  return d;
}

std::unique_ptr<Model> load(const std::string& path, DType kv = DType::kF32, uint32_t block = 16, int threads = 2) {
  ModelOptions o;
  o.n_threads = threads;
  o.kv_dtype = kv;
  o.kv_block_size = block;
  o.max_context = 256;
  o.max_seqs = 4;
  auto m = Model::load(path, o);
  EXPECT_TRUE(m.is_ok()) << path << ": " << m.status().message();
  return m.is_ok() ? std::move(m.value()) : nullptr;
}

std::vector<float> all_logits(Model& m, const std::vector<int32_t>& tokens, uint32_t max_batch = 512) {
  Session s(m, max_batch);
  int seq = s.add_sequence();
  std::vector<float> logits;
  Status st = s.eval(seq, tokens, /*all_logits=*/true, &logits);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return logits;
}

// Converts the tiny safetensors checkpoint to GGUF of file type ft in a temp dir.
std::string to_gguf(const std::string& arch, FileType ft) {
  const fs::path dir = data_dir(arch);
  const fs::path out = fs::temp_directory_path() / ("duet_model_tiny_" + arch + "_" + std::to_string(static_cast<int>(ft)) + "_" +
                                                    std::to_string(::getpid()) + ".gguf");
  auto st = SafetensorsModel::open(dir.string());
  EXPECT_TRUE(st.is_ok()) << st.status().message();
  std::shared_ptr<SafetensorsModel> m(std::move(st.value()));
  auto hp = hparams_from_hf_config(m->config());
  EXPECT_TRUE(hp.is_ok()) << hp.status().message();
  auto src = safetensors_tensor_source_gguf_names(m, *hp);
  EXPECT_TRUE(src.is_ok()) << src.status().message();
  GgufWriter w;
  hparams_to_gguf(*hp, w);
  MixModelInfo mix{static_cast<int>(hp->n_layers), static_cast<int>(hp->n_heads), static_cast<int>(hp->n_kv_heads), true};
  ConvertOptions opt;
  opt.n_threads = 1;
  opt.quiet = true;
  Status s = write_gguf(*src, w, ft, mix, out.string(), opt);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return out.string();
}

class TinyModelTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = data_dir(GetParam());
    if (!fs::exists(dir_ / "model.safetensors")) GTEST_FAIL() << dir_ << " missing: run scripts/ref/model_numpy_ref.py";
    tokens_ = read_tokens(dir_);
    numpy_ = read_f32(dir_ / "logits_numpy.f32");
    if (fs::exists(dir_ / "logits_hf.f32")) hf_ = read_f32(dir_ / "logits_hf.f32");
  }
  fs::path dir_;
  std::vector<int32_t> tokens_;
  std::vector<float> numpy_, hf_;
};

// An unsupported model_type from config.json is quoted on one line (control bytes escaped).
TEST(HfConfig, UnsupportedModelTypeIsOneLine) {
  auto hp = hparams_from_hf_config(nlohmann::json{{"model_type", "qw\nen\u001b[2J"}});
  ASSERT_FALSE(hp.is_ok());
  EXPECT_EQ(hp.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(hp.status().message().find('\n'), std::string::npos) << hp.status().message();
  EXPECT_NE(hp.status().message().find("'qw\\x0aen\\x1b[2J'"), std::string::npos) << hp.status().message();
}

TEST_P(TinyModelTest, SafetensorsF32MatchesReferences) {
  auto m = load(dir_.string());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->weights().source, "safetensors");
  auto logits = all_logits(*m, tokens_);
  Diff d = compare(logits, numpy_);
  EXPECT_LE(d.rel(), 1e-4) << GetParam() << " vs numpy: max|diff| " << d.max_abs_diff << " max|ref| " << d.max_abs_ref;
  if (!hf_.empty()) {
    Diff h = compare(logits, hf_);
    EXPECT_LE(h.rel(), 1e-4) << GetParam() << " vs transformers: max|diff| " << h.max_abs_diff << " max|ref| " << h.max_abs_ref;
  }
}

TEST_P(TinyModelTest, GgufF32MatchesNumpy) {
  const std::string path = to_gguf(GetParam(), FileType::kAllF32);
  auto m = load(path);
  ASSERT_TRUE(m);
  Diff d = compare(all_logits(*m, tokens_), numpy_);
  EXPECT_LE(d.rel(), 1e-4) << GetParam() << ": max|diff| " << d.max_abs_diff << " max|ref| " << d.max_abs_ref;
  fs::remove(path);
}

TEST_P(TinyModelTest, GgufF16AndQ8_0CloseToNumpy) {
  // F16 weights and activations (and an F16 cache): ~1e-3 relative; Q8_0: a few 1e-3.
  for (auto [ft, tol] : {std::pair{FileType::kF16, 1e-2}, std::pair{FileType::kQ8_0, 3e-2}}) {
    const std::string path = to_gguf(GetParam(), ft);
    auto m = load(path, DType::kF16);
    ASSERT_TRUE(m);
    Diff d = compare(all_logits(*m, tokens_), numpy_);
    EXPECT_LE(d.rel(), tol) << GetParam() << " " << file_type_name(static_cast<uint32_t>(ft)) << ": max|diff| "
                            << d.max_abs_diff << " max|ref| " << d.max_abs_ref;
    fs::remove(path);
  }
}

TEST_P(TinyModelTest, SafetensorsBf16AndFp8CloseToNumpy) {
  // The checkpoint rewritten as BF16 and as FP8 E4M3 with each scale layout; the decoder's
  // projections become FP8 (embeddings stay BF16). Tolerances follow the formats' precision.
  const struct {
    SafetensorsOutType type;
    double tol;
  } kinds[] = {{SafetensorsOutType::kBF16, 2e-2},
               {SafetensorsOutType::kFP8PerTensor, 0.12},
               {SafetensorsOutType::kFP8PerChannel, 0.12},
               {SafetensorsOutType::kFP8Block, 0.12}};
  auto st = SafetensorsModel::open(dir_.string());
  ASSERT_TRUE(st.is_ok());
  std::shared_ptr<SafetensorsModel> m(std::move(st.value()));
  auto src = safetensors_tensor_source_hf_names(m);
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  for (const auto& k : kinds) {
    const fs::path out = fs::temp_directory_path() /
                         ("duet_model_tiny_st_" + std::string(GetParam()) + "_" + std::to_string(static_cast<int>(k.type)) +
                          "_" + std::to_string(::getpid()));
    fs::create_directories(out);
    ConvertOptions opt;
    opt.n_threads = 1;
    opt.quiet = true;
    ASSERT_TRUE(write_safetensors(*src, k.type, (out / "model.safetensors").string(), opt).is_ok());
    nlohmann::json cfg = m->config();
    if (k.type != SafetensorsOutType::kBF16) cfg["quantization_config"] = fp8_quantization_config(k.type);
    std::ofstream(out / "config.json") << cfg.dump();
    auto model = load(out.string(), DType::kF32);
    ASSERT_TRUE(model);
    Diff d = compare(all_logits(*model, tokens_), numpy_);
    const auto fp8_logits = all_logits(*model, tokens_);
    EXPECT_LE(d.rel(), k.tol) << GetParam() << " type " << static_cast<int>(k.type) << ": max|diff| " << d.max_abs_diff
                              << " max|ref| " << d.max_abs_ref;
    if (k.type != SafetensorsOutType::kBF16) {
      // The scales: the same FP8 checkpoint dequantized by the converter into an F32 GGUF must
      // give the same logits, up to the BF16 rounding of the activations that meet the BF16
      // embedding / lm_head (~2e-3; a misapplied scale is off by orders of magnitude more).
      auto fst = SafetensorsModel::open(out.string());
      ASSERT_TRUE(fst.is_ok());
      std::shared_ptr<SafetensorsModel> fm(std::move(fst.value()));
      auto hp = hparams_from_hf_config(fm->config());
      ASSERT_TRUE(hp.is_ok());
      auto gsrc = safetensors_tensor_source_gguf_names(fm, *hp);
      ASSERT_TRUE(gsrc.is_ok()) << gsrc.status().message();
      GgufWriter w;
      hparams_to_gguf(*hp, w);
      MixModelInfo mix{static_cast<int>(hp->n_layers), static_cast<int>(hp->n_heads), static_cast<int>(hp->n_kv_heads), true};
      const std::string gguf = (out / "dequant.gguf").string();
      ASSERT_TRUE(write_gguf(*gsrc, w, FileType::kAllF32, mix, gguf, opt).is_ok());
      auto g = load(gguf, DType::kF32);
      ASSERT_TRUE(g);
      Diff e = compare(fp8_logits, all_logits(*g, tokens_));
      EXPECT_LE(e.rel(), 5e-3) << GetParam() << " FP8 type " << static_cast<int>(k.type) << " vs its dequantized GGUF";
    }
    fs::remove_all(out);
  }
}

TEST_P(TinyModelTest, PagedCacheEqualsOneLargeBlock) {
  auto big = load(dir_.string(), DType::kF32, /*block=*/256);
  ASSERT_TRUE(big);
  const auto ref = all_logits(*big, tokens_);
  for (uint32_t block : {1u, 3u, 16u}) {
    auto m = load(dir_.string(), DType::kF32, block);
    ASSERT_TRUE(m);
    // Fragment the pool first so the sequence's blocks are not consecutive.
    Session s(*m);
    int filler = s.add_sequence();
    std::vector<float> junk;
    ASSERT_TRUE(s.eval(filler, std::vector<int32_t>(7, 3), false, &junk).is_ok());
    int seq = s.add_sequence();
    std::vector<float> logits;
    ASSERT_TRUE(s.eval(seq, tokens_, true, &logits).is_ok());
    EXPECT_GT(s.block_table(seq).blocks().size(), 1u);
    EXPECT_EQ(logits, ref) << GetParam() << " kv_block_size " << block;
  }
}

TEST_P(TinyModelTest, DecodeStepsMatchPrefill) {
  // Batches of one token use llama.cpp's decode summation order, longer ones its prefill order,
  // so an F16 cache gives results equal up to F16 rounding; an F32 cache agrees to float noise.
  for (auto [kv, tol] : {std::pair{DType::kF32, 1e-5}, std::pair{DType::kF16, 5e-3}}) {
    auto m = load(dir_.string(), kv, 4);
    ASSERT_TRUE(m);
    const auto ref = all_logits(*m, tokens_);
    Session s(*m, /*max_batch_tokens=*/7);
    int seq = s.add_sequence();
    std::vector<float> got, part;
    size_t i = 0;
    const size_t vocab = m->hparams().vocab_size;
    for (size_t chunk : {5, 1, 1, 9, 1, 100}) {
      const size_t n = std::min(chunk, tokens_.size() - i);
      if (n == 0) break;
      ASSERT_TRUE(s.eval(seq, std::span<const int32_t>(tokens_.data() + i, n), true, &part).is_ok());
      got.insert(got.end(), part.begin(), part.end());
      i += n;
    }
    ASSERT_EQ(got.size(), tokens_.size() * vocab);
    Diff d = compare(got, ref);
    EXPECT_LE(d.rel(), tol) << GetParam() << " kv " << dtype_name(kv);
  }
}

TEST_P(TinyModelTest, BatchedSequencesEqualEachAlone) {
  auto m = load(dir_.string(), DType::kF16, 4);
  ASSERT_TRUE(m);
  const size_t vocab = m->hparams().vocab_size;
  const size_t lens[3] = {10, 17, 3};
  // Three sequences decoded together, one token each per step...
  Session s(*m);
  std::vector<int> seqs;
  std::vector<float> logits;
  for (size_t len : lens) {
    int q = s.add_sequence();
    seqs.push_back(q);
    ASSERT_TRUE(s.eval(q, std::span<const int32_t>(tokens_.data(), len), false, &logits).is_ok());
  }
  // ...and the same sequences decoded alone, in another session: identical bits.
  Session alone(*m);
  std::vector<int> solo;
  for (size_t len : lens) {
    int q = alone.add_sequence();
    solo.push_back(q);
    ASSERT_TRUE(alone.eval(q, std::span<const int32_t>(tokens_.data(), len), false, &logits).is_ok());
  }
  std::vector<float> one;
  for (int step = 0; step < 6; ++step) {
    std::vector<int32_t> next;
    for (size_t k = 0; k < 3; ++k) next.push_back(tokens_[lens[k] + step]);
    ASSERT_TRUE(s.step(seqs, next, &logits).is_ok());
    for (size_t k = 0; k < 3; ++k) {
      ASSERT_TRUE(alone.eval(solo[k], std::span<const int32_t>(&next[k], 1), false, &one).is_ok());
      ASSERT_TRUE(std::equal(one.begin(), one.end(), logits.begin() + k * vocab))
          << GetParam() << " seq " << k << " step " << step;
    }
  }
}

// The greedy forms (ForwardModel::forward_greedy; the CPU model's default) give the argmax of
// the logits the plain calls return, in two sessions fed the same tokens: a prompt split over
// batches of 7 (only the last token's row is an output), then steps of three sequences.
TEST_P(TinyModelTest, GreedyCallsEqualArgmaxOfLogits) {
  auto m = load(dir_.string(), DType::kF16, 4);
  ASSERT_TRUE(m);
  const int64_t vocab = m->hparams().vocab_size;
  Session plain(*m, 7), greedy(*m, 7);
  std::vector<int> ps, gs;
  std::vector<float> logits;
  const size_t lens[3] = {10, 17, 3};
  for (size_t len : lens) {
    ps.push_back(plain.add_sequence());
    gs.push_back(greedy.add_sequence());
    ASSERT_TRUE(plain.eval(ps.back(), std::span<const int32_t>(tokens_.data(), len), false, &logits).is_ok());
    int32_t next = -1;
    ASSERT_TRUE(greedy.eval_greedy(gs.back(), std::span<const int32_t>(tokens_.data(), len), &next).is_ok());
    EXPECT_EQ(next, argmax(logits.data(), vocab)) << GetParam() << " prompt of " << len;
    EXPECT_EQ(greedy.n_past(gs.back()), len);
  }
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> toks, next(3, -1);
    for (size_t k = 0; k < 3; ++k) toks.push_back(tokens_[lens[k] + step]);
    ASSERT_TRUE(plain.step(ps, toks, &logits).is_ok());
    ASSERT_TRUE(greedy.step_greedy(gs, toks, next.data()).is_ok());
    for (size_t k = 0; k < 3; ++k)
      EXPECT_EQ(next[k], argmax(logits.data() + k * vocab, vocab)) << GetParam() << " seq " << k << " step " << step;
  }
  int32_t none = -1;
  EXPECT_FALSE(greedy.eval_greedy(gs[0], std::span<const int32_t>(), &none).is_ok());
}

// A backend's profile (pause_profile) must cover exactly the forwards run_bench times: a model
// that counts its forwards, paused and not, around the tiny llama. With -p 8 -n 4 -r 2 and one
// batch of 3 sequences (5-token prompts): per timed round 1 prompt forward + 4 decode forwards
// (the 1-token prompt before them is untimed), the warm-up round untimed, then 4 of the 6 batch
// steps; the batch prompts untimed. The profile is left running afterwards. (Under ASan this
// also caught run_bench reading one token past its list in the batch steps.)
class CountingModel : public ForwardModel {
 public:
  explicit CountingModel(ForwardModel& m) : m_(m) {}
  const HParams& hparams() const override { return m_.hparams(); }
  uint32_t kv_block_size() const override { return m_.kv_block_size(); }
  uint32_t n_kv_blocks() const override { return m_.n_kv_blocks(); }
  uint32_t max_context() const override { return m_.max_context(); }
  std::string device_name() const override { return m_.device_name(); }
  Status forward(const ForwardBatch& b, float* logits) override {
    ++(paused_ ? paused_forwards : profiled_forwards);
    if (!paused_) profiled_batches.emplace_back(b.positions.begin(), b.positions.end());
    return m_.forward(b, logits);
  }
  void pause_profile(bool paused) override { paused_ = paused; }
  bool paused() const { return paused_; }
  int paused_forwards = 0, profiled_forwards = 0;
  std::vector<std::vector<int32_t>> profiled_batches;  // the positions of each profiled forward

 private:
  ForwardModel& m_;
  bool paused_ = false;
};

TEST(Bench, ProfileCoversOnlyTimedForwards) {
  auto m = load(data_dir("llama").string());
  ASSERT_TRUE(m);
  for (bool logits : {false, true}) {
    CountingModel c(*m);
    auto r = run_bench(c, 8, 4, 2, {3}, 5, logits);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(c.profiled_forwards, 2 * (1 + 4) + 4) << "logits " << logits;
    EXPECT_EQ(c.paused_forwards, (1 + 1 + 4) + 2 * 1 + 3 + 2) << "logits " << logits;
    EXPECT_FALSE(c.paused());
    EXPECT_GT(r->pp_tok_s, 0);
    EXPECT_GT(r->tg_tok_s, 0);
    ASSERT_EQ(r->batch_step_ms.size(), 1u);
    EXPECT_EQ(r->batch_step_ms[0].first, 3);
  }
  CountingModel c(*m);
  EXPECT_FALSE(run_bench(c, 0, 0, 1, {0}).is_ok());  // a batch of no sequences
  EXPECT_FALSE(c.paused());
  EXPECT_FALSE(run_bench(c, 0, 0, 1, {2}, 0).is_ok());  // batch contexts of no tokens
  EXPECT_FALSE(run_bench(c, -1, 4, 1, {}).is_ok());
  EXPECT_EQ(c.profiled_forwards + c.paused_forwards, 0);
}

// llama-bench's -d: with 20 tokens already in the cache, each timed pp forward evaluates positions
// 20 .. 23 in one batch and the timed tg forwards decode positions 20, 21, 22 one at a time (the
// pp rounds first, then the tg rounds); the two depth prefills (one per test) and each test's
// warm-up round are untimed.
TEST(Bench, DepthRunsTheTestsAfterThePrefilledTokens) {
  auto m = load(data_dir("llama").string());
  ASSERT_TRUE(m);
  CountingModel c(*m);
  auto r = run_bench(c, 4, 3, 2, {}, 128, false, 20);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GT(r->pp_tok_s, 0);
  EXPECT_GT(r->tg_tok_s, 0);
  EXPECT_EQ(c.paused_forwards, 2 + 1 + 3);
  const std::vector<int32_t> pp = {20, 21, 22, 23};
  const std::vector<std::vector<int32_t>> want = {pp, pp, {20}, {21}, {22}, {20}, {21}, {22}};
  EXPECT_EQ(c.profiled_batches, want);
  EXPECT_FALSE(c.paused());
  // A depth the model's context cannot hold fails cleanly; a negative one is refused.
  EXPECT_FALSE(run_bench(c, 4, 3, 1, {}, 128, false, static_cast<int>(m->max_context())).is_ok());
  EXPECT_FALSE(run_bench(c, 4, 3, 1, {}, 128, false, -1).is_ok());
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyModelTest, ::testing::ValuesIn(kArchs),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

TEST(ModelForward, RejectsBadBatches) {
  auto m = load(data_dir("llama").string());
  if (!m) GTEST_FAIL();
  Session s(*m);
  int seq = s.add_sequence();
  std::vector<float> logits;
  Status st = s.eval(seq, std::vector<int32_t>{1, 999999}, false, &logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_EQ(s.n_past(seq), 0u);
  st = s.eval(seq, std::vector<int32_t>(300, 1), false, &logits);  // beyond max_context 256
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.message();
  // A block id outside the cache.
  const int32_t bad_block = static_cast<int32_t>(m->n_kv_blocks());
  const int32_t tok = 1, pos = 0, sid = 0, row = 0;
  SeqKvView view{&bad_block, 1};
  ForwardBatch b{std::span<const int32_t>(&tok, 1), std::span<const int32_t>(&pos, 1), std::span<const int32_t>(&sid, 1),
                 std::span<const SeqKvView>(&view, 1), std::span<const int32_t>(&row, 1)};
  logits.resize(m->hparams().vocab_size);
  EXPECT_EQ(m->forward(b, logits.data()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace duet
