// duet against llama.cpp on the real models in models/ (skipped when absent): the fixtures in
// tests/data/model/llamacpp_*.json come from scripts/ref/model_llamacpp_ref.py. Greedy 64-token
// continuations of 10 prompts (decoded as one batch of 10 sequences) must be identical for at
// least 8 of them; teacher-forced top-1 over a text must agree at >= 99% of positions; the
// perplexity of that text (llama-perplexity's method, c = 128) must be within 1%.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/sampling.h"
#include "model/model.h"
#include "model/session.h"

namespace duet {
namespace {

namespace fs = std::filesystem;

class LlamaCppParity : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const fs::path src(DUET_SOURCE_DIR);
    const fs::path model = src / "models" / (std::string(GetParam()) + ".gguf");
    const fs::path fixture = src / "tests" / "data" / "model" / ("llamacpp_" + std::string(GetParam()) + ".json");
    if (!fs::exists(model)) GTEST_FAIL() << model << " missing (run scripts/setup.sh)";
    ASSERT_TRUE(fs::exists(fixture)) << fixture;
    std::ifstream f(fixture);
    ref_ = nlohmann::json::parse(f);
    ModelOptions o;
    o.n_threads = 2;
    o.max_context = 1024;
    o.max_seqs = 10;
    auto m = Model::load(model.string(), o);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = std::move(m.value());
  }
  nlohmann::json ref_;
  std::unique_ptr<Model> model_;
};

TEST_P(LlamaCppParity, GreedyContinuations) {
  const size_t vocab = model_->hparams().vocab_size;
  Session s(*model_);
  std::vector<int> seqs;
  std::vector<int32_t> next;
  std::vector<float> logits;
  std::vector<std::vector<int32_t>> got;
  for (const auto& p : ref_["prompts"]) {
    int q = s.add_sequence();
    seqs.push_back(q);
    const auto toks = p["tokens"].get<std::vector<int32_t>>();
    ASSERT_TRUE(s.eval(q, toks, false, &logits).is_ok());
    next.push_back(argmax(logits.data(), vocab));
    got.push_back({next.back()});
  }
  const size_t n_gen = ref_["prompts"][0]["continuation"].size();
  for (size_t step = 1; step < n_gen; ++step) {
    ASSERT_TRUE(s.step(seqs, next, &logits).is_ok());
    for (size_t k = 0; k < seqs.size(); ++k) {
      next[k] = argmax(logits.data() + k * vocab, vocab);
      got[k].push_back(next[k]);
    }
  }
  int identical = 0;
  for (size_t k = 0; k < seqs.size(); ++k) {
    const auto want = ref_["prompts"][k]["continuation"].get<std::vector<int32_t>>();
    size_t first_diff = 0;
    while (first_diff < want.size() && got[k][first_diff] == want[first_diff]) ++first_diff;
    if (first_diff == want.size()) ++identical;
    else std::printf("  prompt %zu: first difference at token %zu of %zu\n", k, first_diff, want.size());
  }
  std::printf("%s: %d/%zu greedy continuations identical to llama.cpp\n", GetParam(), identical, seqs.size());
  EXPECT_GE(identical, 8);
}

TEST_P(LlamaCppParity, TeacherForcedTop1AndPerplexity) {
  const size_t vocab = model_->hparams().vocab_size;
  const auto toks = ref_["text"]["tokens"].get<std::vector<int32_t>>();
  const auto top1 = ref_["text"]["top1"].get<std::vector<int32_t>>();
  Session s(*model_);
  int q = s.add_sequence();
  std::vector<float> logits;
  ASSERT_TRUE(s.eval(q, toks, true, &logits).is_ok());
  size_t agree = 0;
  for (size_t i = 0; i < toks.size(); ++i) agree += argmax(logits.data() + i * vocab, vocab) == top1[i];
  const double frac = static_cast<double>(agree) / toks.size();
  std::printf("%s: teacher-forced top-1 agreement %zu/%zu = %.4f\n", GetParam(), agree, toks.size(), frac);
  EXPECT_GE(frac, 0.99);

  // Perplexity as llama-perplexity computes it (c tokens per chunk, BOS first, second half).
  const size_t c = ref_["text"]["ppl_ctx"].get<size_t>();
  const bool bos = ref_["add_bos"].get<bool>();
  double nll = 0;
  size_t count = 0;
  for (size_t k = 0; k + 1 <= toks.size() / c; ++k) {
    std::vector<int32_t> chunk(toks.begin() + k * c, toks.begin() + (k + 1) * c);
    if (bos) chunk[0] = toks[0];  // the fixture's text starts with BOS when the model adds one
    s.clear(q);
    ASSERT_TRUE(s.eval(q, chunk, true, &logits).is_ok());
    for (size_t i = c / 2; i + 1 < c; ++i) {
      const float* l = logits.data() + i * vocab;
      double mx = l[argmax(l, vocab)], sum = 0;
      for (size_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(l[v]) - mx);
      nll -= static_cast<double>(l[chunk[i + 1]]) - mx - std::log(sum);
      ++count;
    }
  }
  const double ppl = std::exp(nll / count), want = ref_["text"]["ppl"].get<double>();
  std::printf("%s: perplexity (c=%zu) duet %.4f llama.cpp %.4f\n", GetParam(), c, ppl, want);
  EXPECT_NEAR(ppl, want, 0.01 * want);
}

INSTANTIATE_TEST_SUITE_P(RealModels, LlamaCppParity,
                         ::testing::Values("SmolLM2-135M-Instruct.Q4_1", "gemma-3-270m-q4_k_m"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string n = i.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace duet
