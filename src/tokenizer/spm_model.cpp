// llama.cpp's SPM merge loop (see spm_model.h). A queued bigram is stale when either side has
// been merged since; sizes only grow, so comparing the summed size is an exact staleness test.
#include "tokenizer/spm_model.h"

#include <cstdio>
#include <queue>

namespace duet::tok {

Status SpmModel::build(const TokenizerSpec& spec, const TokenIndex* text_to_id) {
  text_to_id_ = text_to_id;
  scores_ = spec.scores;
  scores_.resize(spec.tokens.size(), 0.0f);
  unk_id_ = spec.unk_id;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = text_to_id->find(std::string_view(hex));
    if (id < 0) {
      // llama.cpp falls back to the byte itself as a token.
      char one[1] = {static_cast<char>(b)};
      id = text_to_id->find(std::string_view(one, 1));
    }
    byte_id_[b] = id;
  }
  return Status::ok();
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>* out) const {
  struct Sym {
    uint32_t off;
    uint32_t n;
    int32_t prev;
    int32_t next;
  };
  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;
    int32_t id;
  };
  struct Less {
    bool operator()(const Bigram& l, const Bigram& r) const {
      return l.score < r.score || (l.score == r.score && l.left > r.left);
    }
  };
  std::vector<Sym> syms;
  for (size_t off = 0; off < text.size();) {
    auto b = static_cast<uint8_t>(text[off]);
    size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;  // llama.cpp's unicode_len_utf8
    if ((b & 0xC0) == 0x80) len = 1;
    len = std::min(len, text.size() - off);
    int32_t k = static_cast<int32_t>(syms.size());
    syms.push_back(Sym{static_cast<uint32_t>(off), static_cast<uint32_t>(len), k - 1, k + 1});
    off += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, Less> q;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    std::string_view s = text.substr(syms[l].off, syms[l].n + syms[r].n);
    int32_t id = text_to_id_->find(s);
    if (id < 0) return;
    q.push(Bigram{scores_[id], l, r, static_cast<uint32_t>(s.size()), id});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
  while (!q.empty()) {
    Bigram bg = q.top();
    q.pop();
    Sym& l = syms[bg.left];
    Sym& r = syms[bg.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }
  for (int32_t i = 0; i != -1; i = syms[i].next) {
    const Sym& s = syms[i];
    if (s.n == 0) continue;
    std::string_view piece = text.substr(s.off, s.n);
    int32_t id = text_to_id_->find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Only unmerged single characters can miss the vocabulary: emit them as byte tokens.
    for (unsigned char c : piece) {
      if (byte_id_[c] >= 0)
        out->push_back(byte_id_[c]);
      else if (unk_id_ >= 0)
        out->push_back(unk_id_);
    }
  }
}

}  // namespace duet::tok
