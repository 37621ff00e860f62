// Added-token splitting (see added_tokens.h): a byte trie over token contents, walked from every
// position whose first byte can start a token.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/unicode.h"

namespace duet::tok {

AddedTokenSplitter::AddedTokenSplitter(std::vector<Entry> entries, TokenizerFlavor flavor)
    : entries_(std::move(entries)), flavor_(flavor) {
  std::fill(std::begin(root_next_), std::end(root_next_), 0u);
  nodes_.emplace_back();
  for (size_t e = 0; e < entries_.size(); ++e) {
    const std::string& s = entries_[e].content;
    if (s.empty()) continue;
    uint32_t node = 0;
    for (unsigned char b : s) {
      uint32_t nx = child(node, b);
      if (nx == 0) {
        nx = static_cast<uint32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& edges = nodes_[node].next;
        edges.insert(
            std::upper_bound(edges.begin(), edges.end(), std::make_pair(b, 0u),
                             [](const auto& x, const auto& y) { return x.first < y.first; }),
            {b, nx});
        if (node == 0) root_next_[b] = nx;
      }
      node = nx;
    }
    // Duplicate contents: HF keeps the last registered id for a content, llama.cpp the first
    // in its length order; both are the same token in practice.
    if (nodes_[node].entry < 0 || flavor_ == TokenizerFlavor::kHf)
      nodes_[node].entry = static_cast<int32_t>(e);
  }
  by_length_.resize(entries_.size());
  for (size_t i = 0; i < by_length_.size(); ++i) by_length_[i] = static_cast<uint32_t>(i);
  std::stable_sort(by_length_.begin(), by_length_.end(), [&](uint32_t a, uint32_t b) {
    return entries_[a].content.size() > entries_[b].content.size();
  });
}

uint32_t AddedTokenSplitter::child(uint32_t node, uint8_t b) const {
  if (node == 0) return root_next_[b];
  for (const auto& [c, nx] : nodes_[node].next) {
    if (c == b) return nx;
    if (c > b) break;
  }
  return 0;
}

void AddedTokenSplitter::split(std::string_view text, bool parse_special,
                               std::vector<Segment>* out) const {
  if (text.empty()) {
    out->push_back(Segment{0, 0, -1});
    return;
  }
  if (entries_.empty()) {
    out->push_back(Segment{0, static_cast<uint32_t>(text.size()), -1});
    return;
  }
  if (flavor_ == TokenizerFlavor::kHf) {
    split_hf(text, parse_special, out);
  } else {
    split_llama(text, parse_special, out);
  }
}

namespace {

// Byte index where the run of White_Space code points ending at `end` starts.
size_t whitespace_run_start(std::string_view s, size_t end) {
  size_t i = end;
  while (i > 0) {
    size_t k = i - 1;
    while (k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
    size_t j = k;
    uint32_t cp = utf8_decode(s, &j);
    if (!is_white_space(cp)) break;
    i = k;
  }
  return i;
}

size_t whitespace_run_end(std::string_view s, size_t begin) {
  size_t i = begin;
  while (i < s.size()) {
    size_t j = i;
    if (!is_white_space(utf8_decode(s, &j))) break;
    i = j;
  }
  return i;
}

// Unicode \w as HF's single_word check sees it: Alphabetic, marks, decimal digits, connector
// punctuation and joiners. Alphabetic = letters, Nl, and Other_Alphabetic (marks, covered by M,
// plus the circled/squared Latin letter symbols below).
bool is_word_char(uint32_t cp) {
  uint8_t c = cp_class(cp, UnicodeFlavor::kHf);
  if (c & (kClassL | kClassM)) return true;
  GeneralCategory gc = general_category(cp);
  if (gc == GeneralCategory::kNd || gc == GeneralCategory::kNl || gc == GeneralCategory::kPc)
    return true;
  return cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) ||
         (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
         (cp >= 0x1F170 && cp <= 0x1F189);
}

bool is_word_cp(std::string_view s, size_t at, bool before) {
  if (before) {
    if (at == 0) return false;
    size_t k = at - 1;
    while (k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
    return is_word_char(utf8_decode(s, &k));
  }
  if (at >= s.size()) return false;
  return is_word_char(utf8_decode(s, &at));
}

}  // namespace

void AddedTokenSplitter::split_hf(std::string_view text, bool parse_special,
                                  std::vector<Segment>* out) const {
  const size_t n = text.size();
  const auto* p8 = reinterpret_cast<const uint8_t*>(text.data());
  size_t start_offset = 0;
  size_t p = 0;
  while (p < n) {
    if (root_next_[p8[p]] == 0) {
      ++p;
      continue;
    }
    uint32_t node = 0;
    int32_t best = -1;
    size_t best_len = 0;
    for (size_t q = p; q < n; ++q) {
      node = child(node, p8[q]);
      if (node == 0) break;
      if (nodes_[node].entry >= 0) {
        best = nodes_[node].entry;
        best_len = q - p + 1;
      }
    }
    if (best < 0) {
      ++p;
      continue;
    }
    const Entry& e = entries_[best];
    size_t start = p, stop = p + best_len;
    p = stop;  // the matcher resumes after the match even when it is discarded below
    if (e.special && !parse_special) continue;
    if (e.single_word && (is_word_cp(text, start, true) || is_word_cp(text, stop, false))) continue;
    if (e.lstrip) start = std::max(whitespace_run_start(text, start), start_offset);
    if (e.rstrip) stop = whitespace_run_end(text, stop);
    if (start_offset < start) out->push_back(Segment{uint32_t(start_offset), uint32_t(start), -1});
    out->push_back(Segment{uint32_t(start), uint32_t(stop), e.id});
    start_offset = stop;
    p = std::max(p, stop);
  }
  if (start_offset < n) out->push_back(Segment{uint32_t(start_offset), uint32_t(n), -1});
}

void AddedTokenSplitter::split_llama(std::string_view text, bool parse_special,
                                     std::vector<Segment>* out) const {
  const size_t n = text.size();
  const auto* p8 = reinterpret_cast<const uint8_t*>(text.data());
  // Which entries occur at all (one trie walk per position that can start a token).
  std::vector<uint8_t> occurs(entries_.size(), 0);
  bool any = false;
  for (size_t p = 0; p < n; ++p) {
    if (root_next_[p8[p]] == 0) continue;
    uint32_t node = 0;
    for (size_t q = p; q < n; ++q) {
      node = child(node, p8[q]);
      if (node == 0) break;
      int32_t en = nodes_[node].entry;
      if (en >= 0 && (parse_special || !entries_[en].special)) occurs[en] = any = 1;
    }
  }
  if (!any) {
    out->push_back(Segment{0, static_cast<uint32_t>(n), -1});
    return;
  }
  // llama.cpp's partition: each occurring token, longest first, claims its non-overlapping
  // occurrences inside the still-free fragments, left to right; lstrip/rstrip drop the ASCII
  // whitespace next to a claimed token from the neighbouring fragments.
  struct Range {
    uint32_t b, e;
  };
  std::vector<Range> free_ranges = {{0, static_cast<uint32_t>(n)}}, next;
  std::vector<Segment> claimed;
  for (uint32_t idx : by_length_) {
    if (!occurs[idx]) continue;
    const Entry& e = entries_[idx];
    const std::string_view tok = e.content;
    next.clear();
    for (Range r : free_ranges) {
      size_t b = r.b;
      while (true) {
        std::string_view frag = text.substr(b, r.e - b);
        size_t hit = frag.find(tok);
        if (hit == std::string_view::npos) break;
        size_t at = b + hit;
        size_t left_end = at;
        if (e.lstrip) {
          while (left_end > b && std::isspace(p8[left_end - 1])) --left_end;
        }
        if (left_end > b)
          next.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(left_end)});
        claimed.push_back(
            Segment{static_cast<uint32_t>(at), static_cast<uint32_t>(at + tok.size()), e.id});
        b = at + tok.size();
        if (e.rstrip) {
          while (b < r.e && std::isspace(p8[b])) ++b;
        }
      }
      if (b < r.e) next.push_back({static_cast<uint32_t>(b), r.e});
    }
    free_ranges.swap(next);
  }
  std::sort(claimed.begin(), claimed.end(),
            [](const Segment& a, const Segment& b) { return a.begin < b.begin; });
  // Merge free ranges (text) and claimed tokens by position.
  size_t fi = 0;
  for (const Segment& c : claimed) {
    while (fi < free_ranges.size() && free_ranges[fi].b < c.begin) {
      out->push_back(Segment{free_ranges[fi].b, free_ranges[fi].e, -1});
      ++fi;
    }
    out->push_back(c);
  }
  for (; fi < free_ranges.size(); ++fi)
    out->push_back(Segment{free_ranges[fi].b, free_ranges[fi].e, -1});
}

}  // namespace duet::tok
