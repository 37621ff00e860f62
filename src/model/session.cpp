// Session (see session.h).
#include "model/session.h"

#include <algorithm>

#include "base/check.h"

namespace duet {

Session::Session(ForwardModel& model, uint32_t max_batch_tokens)
    : model_(model), max_batch_tokens_(std::max<uint32_t>(1, max_batch_tokens)), pool_(model.n_kv_blocks()) {}

int Session::add_sequence() {
  tables_.emplace_back(model_.kv_block_size());
  n_past_.push_back(0);
  return static_cast<int>(tables_.size() - 1);
}

void Session::clear(int seq) { truncate(seq, 0); }

void Session::truncate(int seq, uint32_t n) {
  DUET_CHECK_MSG(seq >= 0 && static_cast<size_t>(seq) < tables_.size(), "sequence %d of %zu", seq, tables_.size());
  if (n >= n_past_[seq]) return;
  tables_[seq].truncate(n, pool_);
  n_past_[seq] = n;
}

Status Session::reserve(int seq, uint32_t n_tokens) {
  if (n_tokens > model_.max_context())
    return out_of_range("sequence of " + std::to_string(n_tokens) + " tokens exceeds the context of " +
                        std::to_string(model_.max_context()));
  if (!tables_[seq].reserve(n_tokens, pool_))
    return out_of_range("KV cache full: " + std::to_string(pool_.n_free()) + " free blocks of " +
                        std::to_string(model_.kv_block_size()) + " tokens, sequence needs " + std::to_string(n_tokens) +
                        " tokens");
  return Status::ok();
}

Status Session::eval(int seq, std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits) {
  return eval_from(seq, tokens, all_logits || tokens.empty() ? 0 : tokens.size() - 1, logits);
}

Status Session::eval_from(int seq, std::span<const int32_t> tokens, size_t first_logit, std::vector<float>* logits) {
  return eval_impl(seq, tokens, first_logit, logits, nullptr);
}

Status Session::eval_greedy(int seq, std::span<const int32_t> tokens, int32_t* next) {
  if (tokens.empty()) return invalid_argument("eval_greedy: no tokens");
  return eval_impl(seq, tokens, tokens.size() - 1, nullptr, next);
}

Status Session::eval_impl(int seq, std::span<const int32_t> tokens, size_t first_logit, std::vector<float>* logits,
                          int32_t* greedy) {
  DUET_CHECK_MSG(seq >= 0 && static_cast<size_t>(seq) < tables_.size(), "sequence %d of %zu", seq, tables_.size());
  first_logit = std::min(first_logit, tokens.size());
  const uint32_t vocab = model_.hparams().vocab_size;
  const uint32_t start = n_past_[seq];
  DUET_RETURN_IF_ERROR(reserve(seq, start + static_cast<uint32_t>(tokens.size())));
  if (logits) logits->resize((tokens.size() - first_logit) * vocab);
  // Members reused between calls: no allocation per decode step.
  std::vector<int32_t>& pos = pos_;
  std::vector<int32_t>& ids = ids_;
  std::vector<int32_t>& rows = rows_;
  for (size_t b0 = 0; b0 < tokens.size(); b0 += max_batch_tokens_) {
    const size_t n = std::min<size_t>(max_batch_tokens_, tokens.size() - b0);
    pos.resize(n);
    ids.assign(n, 0);
    for (size_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(start + b0 + i);
    rows.clear();
    for (size_t i = 0; i < n; ++i)
      if (b0 + i >= first_logit) rows.push_back(static_cast<int32_t>(i));
    const SeqKvView view{tables_[seq].blocks().data(), static_cast<uint32_t>(tables_[seq].blocks().size())};
    ForwardBatch fb{tokens.subspan(b0, n), pos, ids, std::span<const SeqKvView>(&view, 1), rows};
    const size_t done = b0 > first_logit ? b0 - first_logit : 0;  // output rows of earlier batches
    Status st = greedy ? model_.forward_greedy(fb, greedy + done) : model_.forward(fb, logits->data() + done * vocab);
    if (!st.is_ok()) {
      tables_[seq].truncate(start, pool_);
      n_past_[seq] = start;
      return st;
    }
    n_past_[seq] = static_cast<uint32_t>(start + b0 + n);
  }
  return Status::ok();
}

Status Session::step(std::span<const int> seqs, std::span<const int32_t> tokens, std::vector<float>* logits) {
  return step_impl(seqs, tokens, logits, nullptr);
}

Status Session::step_greedy(std::span<const int> seqs, std::span<const int32_t> tokens, int32_t* next) {
  return step_impl(seqs, tokens, nullptr, next);
}

Status Session::step_impl(std::span<const int> seqs, std::span<const int32_t> tokens, std::vector<float>* logits,
                          int32_t* greedy) {
  if (seqs.size() != tokens.size())
    return invalid_argument(std::to_string(seqs.size()) + " sequences but " + std::to_string(tokens.size()) + " tokens");
  std::vector<SeqKvView>& views = views_;
  std::vector<int32_t>& pos = pos_;
  std::vector<int32_t>& ids = ids_;
  std::vector<int32_t>& rows = rows_;
  views.resize(seqs.size());
  pos.resize(seqs.size());
  ids.resize(seqs.size());
  rows.resize(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int sq = seqs[i];
    DUET_CHECK_MSG(sq >= 0 && static_cast<size_t>(sq) < tables_.size(), "sequence %d of %zu", sq, tables_.size());
    DUET_RETURN_IF_ERROR(reserve(sq, n_past_[sq] + 1));
    pos[i] = static_cast<int32_t>(n_past_[sq]);
    ids[i] = static_cast<int32_t>(i);
    rows[i] = static_cast<int32_t>(i);
  }
  for (size_t i = 0; i < seqs.size(); ++i)
    views[i] = SeqKvView{tables_[seqs[i]].blocks().data(), static_cast<uint32_t>(tables_[seqs[i]].blocks().size())};
  ForwardBatch fb{tokens, pos, ids, views, rows};
  if (greedy) {
    DUET_RETURN_IF_ERROR(model_.forward_greedy(fb, greedy));
  } else {
    logits->resize(seqs.size() * model_.hparams().vocab_size);
    DUET_RETURN_IF_ERROR(model_.forward(fb, logits->data()));
  }
  for (int sq : seqs) ++n_past_[sq];
  return Status::ok();
}

}  // namespace duet
