// Small CPU ops: RMSNorm, RoPE (both layouts), gated activations, sampling, the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/thread_pool.h"

namespace duet {
namespace {

TEST(RmsNorm, MatchesDouble) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const int64_t n = 576;
  std::vector<float> x(2 * n), w(n), y(2 * n);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = 1.0f + 0.1f * nd(rng);
  rms_norm(x.data(), n, w.data(), 1e-5f, n, 2, y.data(), n);
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[r * n + i], x[r * n + i] * scale * w[i], 1e-5 * std::fabs(y[r * n + i]) + 1e-6);
  }
}

TEST(Rope, NormalOnPermutedRowsEqualsNeox) {
  // GGML's adjacent-pair RoPE on a head whose dims were interleaved (i, i + d/2) -> (2i, 2i+1)
  // is NEOX RoPE on the original head: the converter's llama q/k permutation relies on it.
  const int64_t hd = 64, heads = 3;
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(heads * hd), perm(heads * hd), cs(hd);
  for (auto& v : x) v = nd(rng);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      perm[h * hd + 2 * i] = x[h * hd + i];
      perm[h * hd + 2 * i + 1] = x[h * hd + i + hd / 2];
    }
  rope_cache(17, 10000.0f, hd, nullptr, cs.data());
  rope_apply(x.data(), heads, hd, cs.data(), RopeStyle::kNeox);
  rope_apply(perm.data(), heads, hd, cs.data(), RopeStyle::kNormal);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      EXPECT_EQ(perm[h * hd + 2 * i], x[h * hd + i]);
      EXPECT_EQ(perm[h * hd + 2 * i + 1], x[h * hd + i + hd / 2]);
    }
}

TEST(Rope, AnglesAndNorm) {
  const int64_t hd = 8;
  std::vector<float> cs(hd);
  rope_cache(3, 100.0f, hd, nullptr, cs.data());
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double theta = 3.0 * std::pow(100.0, -2.0 * i / hd);
    EXPECT_NEAR(cs[2 * i], std::cos(theta), 1e-6);
    EXPECT_NEAR(cs[2 * i + 1], std::sin(theta), 1e-6);
  }
  const std::vector<float> factors = {1.0f, 2.0f, 4.0f, 8.0f};
  std::vector<float> cs2(hd);
  rope_cache(3, 100.0f, hd, factors.data(), cs2.data());
  EXPECT_NEAR(cs2[6], std::cos(3.0 * std::pow(100.0, -6.0 / hd) / 8.0), 1e-6);
}

TEST(Activation, SiluAndGelu) {
  std::vector<float> g = {-20.0f, -3.0f, -0.5f, 0.0f, 0.7f, 2.0f, 9.5f, 12.0f, 1.0f};
  std::vector<float> u(g.size(), 2.0f), out(g.size());
  gated_activation(Activation::kSilu, GeluMode::kExact, g.data(), u.data(), out.data(), g.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(out[i], 2.0 * g[i] / (1.0 + std::exp(-g[i])), 1e-6 * (1 + std::fabs(out[i])));
  for (GeluMode mode : {GeluMode::kExact, GeluMode::kF16Table}) {
    gated_activation(Activation::kGeluTanh, mode, g.data(), u.data(), out.data(), g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double x = g[i];
      const double want = 2.0 * 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      EXPECT_NEAR(out[i], want, (mode == GeluMode::kExact ? 1e-6 : 2e-3) * (1 + std::fabs(want))) << x;
    }
  }
}

// The SIMD paths of the gated activations give the generic code's bits (every element, the
// GELU table's +-10 cut-offs, tails shorter than a vector).
TEST(Activation, SimdEqualsGeneric) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::vector<float> g(1003), u(g.size());
  for (auto& x : g) x = nd(rng);
  for (auto& x : u) x = nd(rng);
  g[0] = -10.0f, g[1] = 10.0f, g[2] = -10.001f, g[3] = 9.999f, g[4] = 0.0f, g[5] = -0.0f, g[6] = 65504.0f;
  const SimdLevel best = cpu_features().level;
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    for (GeluMode mode : {GeluMode::kExact, GeluMode::kF16Table}) {
      std::vector<float> simd(g.size()), generic(g.size());
      gated_activation(act, mode, g.data(), u.data(), simd.data(), g.size());
      set_simd_level(SimdLevel::kGeneric);
      gated_activation(act, mode, g.data(), u.data(), generic.data(), g.size());
      set_simd_level(best);
      for (size_t i = 0; i < g.size(); ++i)
        ASSERT_EQ(simd[i], generic[i]) << "act " << static_cast<int>(act) << " mode " << static_cast<int>(mode) << " g " << g[i];
    }
  }
}

TEST(Sampling, GreedyTopKAndSeeds) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.5f};
  EXPECT_EQ(argmax(logits.data(), 5), 1);
  Sampler greedy({});
  EXPECT_EQ(greedy.sample(logits.data(), 5), 1);
  Sampler top1({1.0f, 1, 1.0f, 7});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(top1.sample(logits.data(), 5), 1);
  Sampler a({0.8f, 0, 0.95f, 42}), b({0.8f, 0, 0.95f, 42});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits.data(), 5), b.sample(logits.data(), 5));
}

TEST(Sampling, FrequenciesFollowTheDistribution) {
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};  // p = k/10
  Sampler s({1.0f, 0, 1.0f, 123});
  std::map<int, int> count;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++count[s.sample(logits.data(), 4)];
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(count[k] / static_cast<double>(n), (k + 1) / 10.0, 0.015) << k;
  // top-p 0.5 keeps {3 (0.4), 2 (0.3)}: 0.4 < 0.5 <= 0.7.
  Sampler nucleus({1.0f, 0, 0.5f, 5});
  std::map<int, int> c2;
  for (int i = 0; i < 5000; ++i) ++c2[nucleus.sample(logits.data(), 4)];
  EXPECT_EQ(c2[0] + c2[1], 0);
  EXPECT_NEAR(c2[3] / 5000.0, 4.0 / 7.0, 0.03);
  // top-k 1 with temperature is greedy.
  Sampler k1({5.0f, 1, 1.0f, 1});
  EXPECT_EQ(k1.sample(logits.data(), 4), 3);
}

TEST(ThreadPool, RunsEveryTaskOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.n_threads(), threads);
    for (int n : {0, 1, 3, 100, 5000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> bad_thread{0};
      pool.run(n, [&](int task, int thread) {
        hits[task].fetch_add(1);
        if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n << " task " << i;
      EXPECT_EQ(bad_thread.load(), 0);
    }
  }
}

TEST(ThreadPool, ManySmallJobsBackToBack) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 20000; ++job) pool.run(3, [&](int task, int) { sum.fetch_add(task + 1); });
  EXPECT_EQ(sum.load(), 20000 * 6);
}

}  // namespace
}  // namespace duet
