// Sampling (see sampling.h).
#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>

namespace duet {

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingConfig& config) : config_(config), rng_(config.seed) {}

int32_t Sampler::sample(const float* logits, int64_t vocab_size) {
  if (config_.greedy()) return argmax(logits, vocab_size);
  const float inv_t = 1.0f / config_.temperature;
  cand_.resize(vocab_size);
  for (int64_t i = 0; i < vocab_size; ++i) cand_[i] = {logits[i] * inv_t, static_cast<int32_t>(i)};
  auto by_logit = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t n = cand_.size();
  if (config_.top_k > 0 && static_cast<size_t>(config_.top_k) < n) {
    n = static_cast<size_t>(config_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + n, cand_.end(), by_logit);
  } else if (config_.top_p < 1.0f) {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Probabilities of the kept candidates (sorted descending when a cut applies).
  float mx = -INFINITY;
  for (size_t i = 0; i < n; ++i) mx = std::max(mx, cand_[i].first);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].first = std::exp(cand_[i].first - mx);
    sum += cand_[i].first;
  }
  if (config_.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].first / sum;
      if (cum >= config_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    sum = 0;
    for (size_t i = 0; i < n; ++i) sum += cand_[i].first;
  }
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0) * sum;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += cand_[i].first;
    if (u < acc) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace duet
