// The llama-bench style speed measurement of a ForwardModel (duet bench, duet run --bench):
// prompt and decode tokens/s of one sequence, and decode steps of several sequences.
#pragma once

#include <utility>
#include <vector>

#include "base/status.h"
#include "model/forward_model.h"

namespace duet {

struct BenchResult {
  double pp_tok_s = 0, tg_tok_s = 0;
  std::vector<std::pair<int, double>> batch_step_ms;  // (sequences, decode step ms)
};

// llama-bench's tests: prefill of n_pp random tokens into an empty cache; decode of n_tg tokens
// one at a time after a 1-token prompt; best of `reps`, after one untimed round. For each B in
// batch_seqs, the time of one decode step of B sequences with short (ctx_short tokens) contexts,
// median of max(n_tg, 3) steps after two untimed ones. Every evaluation ends as generation does:
// greedy sampling of each sequence's next token (ForwardModel::forward_greedy: on the GPU only
// the ids come back); logits = true reads the logits rows back to the host instead (what
// llama-bench's decode does). The model's profile (ForwardModel::pause_profile) covers only the
// timed evaluations.
// depth > 0 (llama-bench's -d): the pp and tg tests run with `depth` tokens already in the
// sequence's cache: pp evaluates n_pp tokens at positions depth .. depth + n_pp - 1, tg decodes
// n_tg tokens at positions depth .. depth + n_tg - 1. The depth is prefilled once per test,
// untimed, in batches of max(n_pp, 512) tokens (the model must take batches that large), and each
// round truncates the sequence back to it; all pp rounds run before the tg rounds.
Result<BenchResult> run_bench(ForwardModel& model, int n_pp, int n_tg, int reps, const std::vector<int>& batch_seqs,
                              int ctx_short = 128, bool logits = false, int depth = 0);

}  // namespace duet
