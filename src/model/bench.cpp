// The llama-bench style speed measurement (see bench.h).
#include "model/bench.h"

#include <algorithm>
#include <random>
#include <span>
#include <string>

#include "base/log.h"
#include "model/session.h"

namespace duet {

Result<BenchResult> run_bench(ForwardModel& model, int n_pp, int n_tg, int reps, const std::vector<int>& batch_seqs,
                              int ctx_short, bool want_logits, int depth) {
  if (n_pp < 0 || n_tg < 0 || reps < 0 || depth < 0 || (!batch_seqs.empty() && ctx_short < 1))
    return invalid_argument("bench: negative token count, repetitions or depth, or batch contexts of " +
                            std::to_string(ctx_short) + " tokens");
  std::mt19937 rng(0);
  const int32_t vocab = static_cast<int32_t>(model.hparams().vocab_size);
  std::uniform_int_distribution<int32_t> dist(100, std::max(101, std::min(vocab - 1, 30000)));
  // Enough for the prompt, the decoded tokens, and each batch's prompt plus its steps (two
  // untimed, then max(n_tg, 3)).
  const int n_steps = std::max(n_tg, 3) + 2;
  std::vector<int32_t> toks(std::max({n_pp, n_tg + 1, ctx_short + n_steps}) + static_cast<size_t>(depth));
  for (auto& t : toks) t = dist(rng);
  BenchResult best;
  std::vector<float> logits;
  std::vector<int32_t> next(1);  // greedy ids: one per sequence of the evaluation
  // The evaluation of a sequence's tokens, ending in greedy sampling (or the logits).
  auto eval = [&](Session& s, int q, std::span<const int32_t> t) {
    return want_logits ? s.eval(q, t, false, &logits) : s.eval_greedy(q, t, next.data());
  };
  // The profile covers only the timed evaluations; whatever happens, it is left running.
  struct ProfileGuard {
    ForwardModel& m;
    ~ProfileGuard() { m.pause_profile(false); }
  } guard{model};
  // At depth > 0 each test in turn, on one sequence (one Session at a time: every Session's block
  // pool covers the whole cache): the depth prefilled once, untimed, then the sequence cut back to
  // it before each round (the untimed warm-up round first).
  if (depth > 0) {
    const uint32_t depth_batch = static_cast<uint32_t>(std::max(n_pp, 512));
    for (const bool pp : {true, false}) {
      if ((pp && n_pp == 0) || (!pp && n_tg == 0)) continue;
      double& rate = pp ? best.pp_tok_s : best.tg_tok_s;
      Session s(model, depth_batch);
      const int q = s.add_sequence();
      model.pause_profile(true);
      DUET_RETURN_IF_ERROR(eval(s, q, std::span<const int32_t>(toks.data(), depth)));
      for (int r = 0; r <= reps; ++r) {
        const bool timed = r > 0;
        s.truncate(q, static_cast<uint32_t>(depth));
        const int n = pp ? n_pp : timed ? n_tg : std::min(n_tg, 4);
        model.pause_profile(!timed);
        const double t0 = now_seconds();
        if (pp) {
          DUET_RETURN_IF_ERROR(eval(s, q, std::span<const int32_t>(toks.data() + depth, n_pp)));
        } else {
          for (int i = 0; i < n; ++i)
            DUET_RETURN_IF_ERROR(eval(s, q, std::span<const int32_t>(toks.data() + depth + i, 1)));
        }
        if (timed) rate = std::max(rate, n / (now_seconds() - t0));
      }
    }
  }
  // One untimed warm-up of each shape (first-use allocations, graph capture).
  for (int r = 0; r <= reps && depth == 0; ++r) {
    const bool timed = r > 0;
    if (n_pp > 0) {
      Session s(model, static_cast<uint32_t>(n_pp));
      const int q = s.add_sequence();
      model.pause_profile(!timed);
      const double t0 = now_seconds();
      DUET_RETURN_IF_ERROR(eval(s, q, std::span<const int32_t>(toks.data(), n_pp)));
      if (timed) best.pp_tok_s = std::max(best.pp_tok_s, n_pp / (now_seconds() - t0));
    }
    if (n_tg > 0) {
      Session s(model);
      const int q = s.add_sequence();
      model.pause_profile(true);
      DUET_RETURN_IF_ERROR(eval(s, q, std::span<const int32_t>(toks.data(), 1)));
      const int n = timed ? n_tg : std::min(n_tg, 4);
      model.pause_profile(!timed);
      const double t0 = now_seconds();
      for (int i = 0; i < n; ++i) DUET_RETURN_IF_ERROR(eval(s, q, std::span<const int32_t>(toks.data() + 1 + i, 1)));
      if (timed) best.tg_tok_s = std::max(best.tg_tok_s, n / (now_seconds() - t0));
    }
  }
  for (int b : batch_seqs) {
    if (b < 1) return invalid_argument("batch of " + std::to_string(b) + " sequences");
    next.resize(std::max<size_t>(next.size(), static_cast<size_t>(b)));
    Session s(model, static_cast<uint32_t>(std::max(ctx_short, 1)));
    std::vector<int> seqs;
    model.pause_profile(true);
    for (int i = 0; i < b; ++i) {
      seqs.push_back(s.add_sequence());
      DUET_RETURN_IF_ERROR(eval(s, seqs.back(), std::span<const int32_t>(toks.data(), ctx_short)));
    }
    std::vector<int32_t> step_toks(b);
    std::vector<double> ms;
    for (int i = 0; i < n_steps; ++i) {
      for (int j = 0; j < b; ++j) step_toks[j] = toks[ctx_short + i];
      model.pause_profile(i < 2);
      const double t0 = now_seconds();
      DUET_RETURN_IF_ERROR(want_logits ? s.step(seqs, step_toks, &logits)
                                       : s.step_greedy(seqs, step_toks, next.data()));
      if (i >= 2) ms.push_back((now_seconds() - t0) * 1e3);  // two warm-up steps
    }
    std::sort(ms.begin(), ms.end());
    best.batch_step_ms.emplace_back(b, ms[ms.size() / 2]);
  }
  return best;
}

}  // namespace duet
