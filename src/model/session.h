// Session: sequences evaluated on one ForwardModel (CPU or CUDA), with their KV blocks managed by kvcache/ (a
// BlockPool over the model's cache, a BlockTable per sequence). The convenience layer used by
// `duet run`, `duet perplexity` and the tests: prompts are split into batches of at most
// max_batch_tokens, several sequences can step together (one token each). The engine's runner
// will drive ForwardModel::forward directly with its own scheduler. One thread uses a Session.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "kvcache/block_pool.h"
#include "kvcache/block_table.h"
#include "model/forward_model.h"

namespace duet {

class Session {
 public:
  explicit Session(ForwardModel& model, uint32_t max_batch_tokens = 512);

  ForwardModel& model() { return model_; }
  int add_sequence();                       // returns the sequence index
  uint32_t n_past(int seq) const { return n_past_[seq]; }
  void clear(int seq);                      // forgets the tokens, returns the blocks
  // Keeps the first n tokens of seq (for re-evaluating a suffix); blocks past them are freed.
  void truncate(int seq, uint32_t n);
  const BlockTable& block_table(int seq) const { return tables_[seq]; }
  uint32_t n_free_blocks() const { return pool_.n_free(); }

  // Appends tokens to seq and evaluates them. logits gets vocab_size floats per token when
  // all_logits, else those of the last token only. Fails (kOutOfRange) when the KV cache has
  // no room, leaving the sequence unchanged.
  Status eval(int seq, std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits);
  // The same with logits for tokens[first_logit:] only (vocab_size floats each, in order).
  Status eval_from(int seq, std::span<const int32_t> tokens, size_t first_logit, std::vector<float>* logits);
  // One token for each of seqs (distinct sequences) in one batch; logits in that order.
  Status step(std::span<const int> seqs, std::span<const int32_t> tokens, std::vector<float>* logits);
  // Greedy forms (ForwardModel::forward_greedy: on the GPU only the ids come back): *next = the
  // argmax of the last token's logits; next[i] = that of seqs[i]'s token.
  Status eval_greedy(int seq, std::span<const int32_t> tokens, int32_t* next);
  Status step_greedy(std::span<const int> seqs, std::span<const int32_t> tokens, int32_t* next);

 private:
  Status reserve(int seq, uint32_t n_tokens);
  // eval_from / step with either logits (host) or greedy ids as the output.
  Status eval_impl(int seq, std::span<const int32_t> tokens, size_t first_logit, std::vector<float>* logits,
                   int32_t* greedy);
  Status step_impl(std::span<const int> seqs, std::span<const int32_t> tokens, std::vector<float>* logits,
                   int32_t* greedy);

  ForwardModel& model_;
  uint32_t max_batch_tokens_;
  BlockPool pool_;
  std::vector<BlockTable> tables_;
  std::vector<uint32_t> n_past_;
  // Batch descriptions of eval_from / step, kept between calls (no allocation per decode step).
  std::vector<int32_t> pos_, ids_, rows_;
  std::vector<SeqKvView> views_;
};

}  // namespace duet
