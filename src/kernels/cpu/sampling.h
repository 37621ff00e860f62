// Token sampling from a row of logits: greedy (temperature <= 0), or temperature -> top-k ->
// top-p -> a draw from the renormalized distribution (HF / vLLM order), with a seeded
// generator so a seed reproduces a run. A Sampler holds its generator and scratch; one thread
// uses it at a time. Cost: O(vocab) plus a partial sort of the top-k candidates.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace duet {

struct SamplingConfig {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0: all tokens
  float top_p = 1.0f;        // >= 1: no nucleus cut
  uint64_t seed = 0;
  // The draw is the argmax (what Sampler::sample returns then, without touching the generator).
  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

// Index of the largest logit (the first one on ties).
int32_t argmax(const float* logits, int64_t n);

class Sampler {
 public:
  explicit Sampler(const SamplingConfig& config);
  int32_t sample(const float* logits, int64_t vocab_size);
  const SamplingConfig& config() const { return config_; }

 private:
  SamplingConfig config_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace duet
