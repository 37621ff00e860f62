// Byte-level BPE merges (see bpe_model.h). Short words use a linear scan over cached pair ranks,
// long ones (whitespace runs, long CJK runs) a binary heap; both apply the lowest rank first and
// the leftmost pair on ties, which is what HF tokenizers and llama.cpp do.
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "tokenizer/unicode.h"

namespace duet::tok {
namespace {

struct ByteMaps {
  uint32_t to_cp[256];
  int16_t from_cp[512];  // images are all below U+0144
  ByteMaps() {
    std::fill(std::begin(from_cp), std::end(from_cp), int16_t{-1});
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMaps& byte_maps() {
  static const ByteMaps m;
  return m;
}

struct Sym {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t rank;   // rank of the pair (this, next); kNoRank when none
  int32_t merged;  // id the pair (this, next) merges into
};
constexpr uint32_t kNoRank = ~0u;
constexpr size_t kSmallWord = 48;

thread_local std::vector<Sym> t_syms;

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return byte_maps().to_cp[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_maps().from_cp[cp] : -1; }

bool byte_level_decode(std::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size();) {
    int b = unicode_to_byte(utf8_decode(text, &i));
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
  }
  return true;
}

std::string byte_level_encode(std::string_view raw) {
  std::string s;
  s.reserve(raw.size() * 2);
  for (unsigned char c : raw) utf8_append(byte_to_unicode(c), &s);
  return s;
}

uint32_t TokenIndex::hash(std::string_view s) {
  // 64-bit multiply-mix over 8-byte chunks; token texts are short.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 32;
  return static_cast<uint32_t>(h);
}

void TokenIndex::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{0, -1, 0, 0});
  mask_ = cap - 1;
  for (const Slot& e : old) {
    if (e.id < 0) continue;
    size_t i = e.hash & mask_;
    while (slots_[i].id >= 0) i = (i + 1) & mask_;
    slots_[i] = e;
  }
}

void TokenIndex::insert(std::string_view key, int32_t id, bool overwrite) {
  if ((size_ + 1) * 2 > slots_.size()) reserve(std::max<size_t>(16, size_ + 1));
  uint32_t h = hash(key);
  size_t i = h & mask_;
  while (slots_[i].id >= 0) {
    const Slot& e = slots_[i];
    if (e.hash == h && std::string_view(arena_.data() + e.off, e.len) == key) {
      if (overwrite) slots_[i].id = id;
      return;
    }
    i = (i + 1) & mask_;
  }
  slots_[i] = Slot{h, id, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size())};
  arena_.append(key);
  ++size_;
}

int32_t TokenIndex::find(std::string_view key) const {
  if (slots_.empty()) return -1;
  uint32_t h = hash(key);
  size_t i = h & mask_;
  while (true) {
    const Slot& e = slots_[i];
    if (e.id < 0) return -1;
    if (e.hash == h && e.len == key.size() &&
        std::memcmp(arena_.data() + e.off, key.data(), key.size()) == 0) {
      return e.id;
    }
    i = (i + 1) & mask_;
  }
}

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Entry{kEmpty, 0, 0});
  mask_ = cap - 1;
  size_ = 0;
}

void MergeTable::insert(int32_t a, int32_t b, uint32_t rank, int32_t id, bool keep_first) {
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Entry> old = std::move(slots_);
    reserve(std::max<size_t>(16, old.size()));
    for (const Entry& e : old) {
      if (e.key != kEmpty)
        insert(int32_t(e.key >> 32), int32_t(e.key & 0xffffffffu), e.rank, e.id, true);
    }
  }
  uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  size_t i = hash(key) & mask_;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == key) {
    if (!keep_first) slots_[i] = Entry{key, rank, id};
    return;
  }
  slots_[i] = Entry{key, rank, id};
  ++size_;
}

Status BpeModel::build(const TokenizerSpec& spec, const TokenIndex& text_to_id) {
  ignore_merges_ = spec.ignore_merges;
  // A byte without a token becomes unk in HF (when it has one); llama.cpp drops it.
  unk_id_ = spec.flavor == TokenizerFlavor::kHf ? spec.unk_id : -1;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(byte_to_unicode(static_cast<uint8_t>(b)), &s);
    byte_id_[b] = text_to_id.find(s);
  }
  const bool keep_first = spec.flavor == TokenizerFlavor::kLlamaCpp;
  merges_.reserve(spec.merges.size());
  std::string joined;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    int32_t ia = text_to_id.find(a);
    int32_t ib = text_to_id.find(b);
    joined.assign(a);
    joined.append(b);
    int32_t im = text_to_id.find(joined);
    // Merges naming unknown tokens can never fire; HF rejects such files, llama.cpp ignores them.
    if (ia < 0 || ib < 0 || im < 0) continue;
    merges_.insert(ia, ib, static_cast<uint32_t>(r), im, keep_first);
  }
  if (ignore_merges_) {
    std::string raw;
    raw_to_id_.reserve(spec.tokens.size());
    for (size_t id = 0; id < spec.tokens.size(); ++id) {
      if (byte_level_decode(spec.tokens[id], &raw))
        raw_to_id_.insert(raw, static_cast<int32_t>(id), false);
    }
  }
  return Status::ok();
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    int32_t id = byte_id_[static_cast<uint8_t>(word[0])];
    if (id >= 0)
      out->push_back(id);
    else if (unk_id_ >= 0)
      out->push_back(unk_id_);
    return;
  }
  if (ignore_merges_) {
    int32_t id = raw_to_id_.find(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<Sym>& syms = t_syms;
  syms.clear();
  for (unsigned char c : word) {
    // A byte without a token stays a symbol that never merges (-1 is dropped at the end).
    int32_t id = byte_id_[c] >= 0 ? byte_id_[c] : unk_id_;
    int32_t k = static_cast<int32_t>(syms.size());
    syms.push_back(Sym{id, k - 1, k + 1, kNoRank, -1});
  }
  if (syms.empty()) return;
  syms.back().next = -1;
  if (syms.size() <= kSmallWord) {
    merge_small(out);
  } else {
    merge_heap(out);
  }
}

void BpeModel::merge_small(std::vector<int32_t>* out) const {
  std::vector<Sym>& s = t_syms;
  auto set_rank = [&](int32_t i) {
    if (i < 0 || s[i].next < 0) return;
    const MergeTable::Entry* e = merges_.find(s[i].id, s[s[i].next].id);
    s[i].rank = e ? e->rank : kNoRank;
    s[i].merged = e ? e->id : -1;
  };
  for (int32_t i = 0; i >= 0; i = s[i].next) set_rank(i);
  while (true) {
    uint32_t best = kNoRank;
    int32_t at = -1;
    for (int32_t i = 0; i >= 0; i = s[i].next) {
      if (s[i].rank < best) {
        best = s[i].rank;
        at = i;
      }
    }
    if (at < 0) break;
    int32_t j = s[at].next;
    s[at].id = s[at].merged;
    s[at].next = s[j].next;
    if (s[j].next >= 0) s[s[j].next].prev = at;
    s[at].rank = kNoRank;
    set_rank(at);
    set_rank(s[at].prev);
  }
  for (int32_t i = 0; i >= 0; i = s[i].next) {
    if (s[i].id >= 0) out->push_back(s[i].id);
  }
}

void BpeModel::merge_heap(std::vector<int32_t>* out) const {
  std::vector<Sym>& s = t_syms;
  struct Cand {
    uint32_t rank;
    int32_t pos;
    int32_t merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto push = [&](int32_t i) {
    if (i < 0 || s[i].next < 0) return;
    const MergeTable::Entry* e = merges_.find(s[i].id, s[s[i].next].id);
    if (e) q.push(Cand{e->rank, i, e->id});
  };
  for (int32_t i = 0; i >= 0; i = s[i].next) push(i);
  while (!q.empty()) {
    Cand c = q.top();
    q.pop();
    Sym& a = s[c.pos];
    if (a.next < 0 || s[a.next].id < 0) continue;  // nothing (mergeable) to its right any more
    const MergeTable::Entry* e = merges_.find(a.id, s[a.next].id);
    if (!e || e->rank != c.rank) continue;  // the pair changed since it was queued
    int32_t j = a.next;
    a.id = e->id;
    a.next = s[j].next;
    if (s[j].next >= 0) s[s[j].next].prev = c.pos;
    s[j].next = -1;  // removed: stale queue entries at j now fail the check above
    push(a.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = s[i].next) {
    if (s[i].id >= 0) out->push_back(s[i].id);
  }
}

}  // namespace duet::tok
