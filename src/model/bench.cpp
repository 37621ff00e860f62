// The llama-bench style speed measurement (see bench.h).
#include "model/bench.h"

#include <algorithm>
#include <memory>
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
  // At depth > 0 each test's sequence: the depth prefilled once (untimed), then truncated back to
  // it before each round.
  const uint32_t depth_batch = static_cast<uint32_t>(std::max(n_pp, 512));
  std::unique_ptr<Session> pp_s, tg_s;
  int pp_q = 0, tg_q = 0;
  auto prefill_depth = [&](std::unique_ptr<Session>& s, int& q) -> Status {
    s = std::make_unique<Session>(model, depth_batch);
    q = s->add_sequence();
    model.pause_profile(true);
    return eval(*s, q, std::span<const int32_t>(toks.data(), depth));
  };
  if (depth > 0 && n_pp > 0) DUET_RETURN_IF_ERROR(prefill_depth(pp_s, pp_q));
  if (depth > 0 && n_tg > 0) DUET_RETURN_IF_ERROR(prefill_depth(tg_s, tg_q));
  // One untimed warm-up of each shape (first-use allocations, graph capture).
  for (int r = 0; r <= reps; ++r) {
    const bool timed = r > 0;
    if (depth > 0) {
      if (n_pp > 0) {
        pp_s->truncate(pp_q, static_cast<uint32_t>(depth));
        model.pause_profile(!timed);
        const double t0 = now_seconds();
        DUET_RETURN_IF_ERROR(eval(*pp_s, pp_q, std::span<const int32_t>(toks.data() + depth, n_pp)));
        if (timed) best.pp_tok_s = std::max(best.pp_tok_s, n_pp / (now_seconds() - t0));
      }
      if (n_tg > 0) {
        tg_s->truncate(tg_q, static_cast<uint32_t>(depth));
        const int n = timed ? n_tg : std::min(n_tg, 4);
        model.pause_profile(!timed);
        const double t0 = now_seconds();
        for (int i = 0; i < n; ++i)
          DUET_RETURN_IF_ERROR(eval(*tg_s, tg_q, std::span<const int32_t>(toks.data() + depth + i, 1)));
        if (timed) best.tg_tok_s = std::max(best.tg_tok_s, n / (now_seconds() - t0));
      }
      continue;
    }
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
