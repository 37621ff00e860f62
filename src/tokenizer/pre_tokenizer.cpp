// Hand-written matchers for the pre-tokenizer regexes (see pre_tokenizer.h). Each matcher works on
// decoded code points with their class bits over one piece [lo, hi) and returns the end of the
// match at i, or i when no alternative matches there. Lookaheads such as (?!\S) see the piece end
// as end of input, as HF's Split does for every piece of a Sequence.
#include "tokenizer/pre_tokenizer.h"

#include <cstdint>
#include <string>

#include "base/text.h"

namespace duet::tok {
namespace {

struct Cps {
  std::vector<uint32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> off;  // byte offset of each code point, plus one past the end
};

inline bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

using Range = std::pair<uint32_t, uint32_t>;

class Matcher {
 public:
  Matcher(const Cps& c, bool hf) : cp_(c.cp.data()), cls_(c.cls.data()), hf_(hf) {}

  bool is(size_t k, uint8_t mask) const { return (cls_[k] & mask) != 0; }
  bool is_other(size_t k) const { return (cls_[k] & (kClassSpace | kClassL | kClassN)) == 0; }

  // Run of code points in [k, hi) having any bit of `mask`.
  size_t run(size_t k, size_t hi, uint8_t mask) const {
    while (k < hi && is(k, mask)) ++k;
    return k;
  }

  uint32_t fold(uint32_t c) const {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (hf_ && c == 0x17F) return 's';  // LATIN SMALL LETTER LONG S folds to 's'
    return c;
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d) or the case-sensitive GPT-2 form.
  size_t contraction(size_t i, size_t hi, bool insensitive) const {
    if (cp_[i] != '\'' || i + 1 >= hi) return i;
    uint32_t a = insensitive ? fold(cp_[i + 1]) : cp_[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= hi) return i;
    uint32_t b = insensitive ? fold(cp_[i + 2]) : cp_[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
  }

  // \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace code point i.
  size_t spaces(size_t i, size_t hi, bool with_newline_rule) const {
    size_t r = run(i, hi, kClassSpace);
    if (with_newline_rule) {
      // \s* backtracks to the last CR/LF of the run; [\r\n]+ then takes it.
      for (size_t k = r; k > i; --k) {
        if (is_crlf(cp_[k - 1])) return k;
      }
    }
    if (r == hi || r - i < 2) return r;  // \s+(?!\S) at the end, or \s+
    return r - 1;                        // \s+(?!\S): leave one space before the \S
  }

  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  size_t gpt2(size_t i, size_t hi) const {
    size_t e = contraction(i, hi, false);
    if (e != i) return e;
    size_t k = (cp_[i] == ' ' && i + 1 < hi) ? i + 1 : i;
    if (is(k, kClassL)) return run(k + 1, hi, kClassL);
    if (is(k, kClassN)) return run(k + 1, hi, kClassN);
    if (is_other(k)) {
      size_t j = k + 1;
      while (j < hi && is_other(j)) ++j;
      return j;
    }
    return spaces(i, hi, false);
  }

  // Llama 3 (max_digits 3) and Qwen2 (max_digits 1):
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,n}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  size_t llama3(size_t i, size_t hi, size_t max_digits) const {
    size_t e = contraction(i, hi, true);
    if (e != i) return e;
    uint32_t c = cp_[i];
    if (is(i, kClassL)) return run(i + 1, hi, kClassL);
    if (!is_crlf(c) && !is(i, kClassN) && i + 1 < hi && is(i + 1, kClassL)) {
      return run(i + 2, hi, kClassL);
    }
    if (is(i, kClassN)) {
      size_t j = i + 1;
      while (j < hi && j < i + max_digits && is(j, kClassN)) ++j;
      return j;
    }
    size_t k = (c == ' ' && i + 1 < hi && is_other(i + 1)) ? i + 1 : i;
    if (is_other(k)) {
      size_t j = k + 1;
      while (j < hi && is_other(j)) ++j;
      while (j < hi && is_crlf(cp_[j])) ++j;
      return j;
    }
    return spaces(i, hi, true);
  }

  // DeepSeek V3's third split:
  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
  // ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // Returns i when nothing matches (the code point joins a gap piece).
  size_t deepseek_v3(size_t i, size_t hi) const {
    uint32_t c = cp_[i];
    auto ascii_alpha = [&](size_t k) {
      uint32_t x = cp_[k] | 0x20;
      return x >= 'a' && x <= 'z';
    };
    auto ascii_punct = [](uint32_t x) {
      return (x >= '!' && x <= '/') || (x >= ':' && x <= '@') || (x >= '[' && x <= '`') ||
             (x >= '{' && x <= '~');
    };
    if (ascii_punct(c) && i + 1 < hi && ascii_alpha(i + 1)) {
      size_t j = i + 2;
      while (j < hi && ascii_alpha(j)) ++j;
      return j;
    }
    if (is(i, kClassL | kClassM)) return run(i + 1, hi, kClassL | kClassM);
    if (!is_crlf(c) && !is(i, kClassP | kClassS) && i + 1 < hi && is(i + 1, kClassL | kClassM)) {
      return run(i + 2, hi, kClassL | kClassM);
    }
    size_t k = (c == ' ' && i + 1 < hi && is(i + 1, kClassP | kClassS)) ? i + 1 : i;
    if (is(k, kClassP | kClassS)) {
      size_t j = run(k + 1, hi, kClassP | kClassS);
      while (j < hi && is_crlf(cp_[j])) ++j;
      return j;
    }
    if (is(i, kClassSpace)) return spaces(i, hi, true);
    return i;
  }

 private:
  const uint32_t* cp_;
  const uint8_t* cls_;
  bool hf_;
};

inline bool is_cjk_kana(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x309F) ||
         (c >= 0x30A0 && c <= 0x30FF);
}

// Split "Isolated" by a predicate-run regex: runs where pred holds (chunked by max_len) and the
// gaps between them become pieces.
template <typename Pred>
void split_runs(Range piece, size_t max_len, Pred pred, std::vector<Range>* out) {
  size_t gap = piece.first;
  size_t i = piece.first;
  while (i < piece.second) {
    if (!pred(i)) {
      ++i;
      continue;
    }
    if (gap < i) out->push_back({static_cast<uint32_t>(gap), static_cast<uint32_t>(i)});
    size_t j = i + 1;
    while (j < piece.second && pred(j) && j - i < max_len) ++j;
    out->push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(j)});
    i = gap = j;
  }
  if (gap < piece.second)
    out->push_back({static_cast<uint32_t>(gap), static_cast<uint32_t>(piece.second)});
}

}  // namespace

const char* pre_tokenizer_name(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kNone:
      return "none";
    case PreTokenizerKind::kGpt2:
      return "gpt-2";
    case PreTokenizerKind::kSmollm:
      return "smollm";
    case PreTokenizerKind::kLlama3:
      return "llama3";
    case PreTokenizerKind::kQwen2:
      return "qwen2";
    case PreTokenizerKind::kDeepseekV3:
      return "deepseek-v3";
  }
  return "?";
}

Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name) {
  struct Entry {
    const char* name;
    PreTokenizerKind kind;
  };
  // The llama.cpp names whose regexes are one of the families implemented here.
  static const Entry kEntries[] = {
      {"llama3", PreTokenizerKind::kLlama3},
      {"llama-v3", PreTokenizerKind::kLlama3},
      {"llama-bpe", PreTokenizerKind::kLlama3},
      {"falcon3", PreTokenizerKind::kLlama3},
      {"falcon-h1", PreTokenizerKind::kLlama3},
      {"pixtral", PreTokenizerKind::kLlama3},
      {"midm-2.0", PreTokenizerKind::kLlama3},
      {"lfm2", PreTokenizerKind::kLlama3},
      {"jina-v5-nano", PreTokenizerKind::kLlama3},
      {"dbrx", PreTokenizerKind::kLlama3},
      {"smaug-bpe", PreTokenizerKind::kLlama3},
      {"chatglm-bpe", PreTokenizerKind::kLlama3},
      {"glm4", PreTokenizerKind::kLlama3},
      {"glm5", PreTokenizerKind::kLlama3},
      {"qwen2", PreTokenizerKind::kQwen2},
      {"deepseek-r1-qwen", PreTokenizerKind::kQwen2},
      {"kormo", PreTokenizerKind::kQwen2},
      {"f2llmv2", PreTokenizerKind::kQwen2},
      {"stablelm2", PreTokenizerKind::kQwen2},
      {"hunyuan", PreTokenizerKind::kQwen2},
      {"solar-open", PreTokenizerKind::kQwen2},
      {"megrez", PreTokenizerKind::kQwen2},
      {"grok-2", PreTokenizerKind::kQwen2},
      {"deepseek-v3", PreTokenizerKind::kDeepseekV3},
      {"hunyuan-dense", PreTokenizerKind::kDeepseekV3},
      {"joyai-llm", PreTokenizerKind::kDeepseekV3},
      {"hy_v4", PreTokenizerKind::kDeepseekV3},
      {"gpt-2", PreTokenizerKind::kGpt2},
      {"phi-2", PreTokenizerKind::kGpt2},
      {"jina-es", PreTokenizerKind::kGpt2},
      {"jina-de", PreTokenizerKind::kGpt2},
      {"gigachat", PreTokenizerKind::kGpt2},
      {"jina-v2-es", PreTokenizerKind::kGpt2},
      {"jina-v2-de", PreTokenizerKind::kGpt2},
      {"a.x-4.0", PreTokenizerKind::kGpt2},
      {"mellum", PreTokenizerKind::kGpt2},
      {"modern-bert", PreTokenizerKind::kGpt2},
      {"mpt", PreTokenizerKind::kGpt2},
      {"olmo", PreTokenizerKind::kGpt2},
      {"jais", PreTokenizerKind::kGpt2},
      {"trillion", PreTokenizerKind::kGpt2},
      {"granite-docling", PreTokenizerKind::kGpt2},
      {"exaone4", PreTokenizerKind::kGpt2},
      {"jina-v1-en", PreTokenizerKind::kGpt2},
      {"jina-v2-code", PreTokenizerKind::kGpt2},
      {"roberta-bpe", PreTokenizerKind::kGpt2},
      {"smollm", PreTokenizerKind::kSmollm},
      {"starcoder", PreTokenizerKind::kSmollm},
      {"refact", PreTokenizerKind::kSmollm},
      {"command-r", PreTokenizerKind::kSmollm},
      {"codeshell", PreTokenizerKind::kSmollm},
      {"exaone", PreTokenizerKind::kSmollm},
      {"minerva-7b", PreTokenizerKind::kSmollm},
      {"mellum2", PreTokenizerKind::kSmollm},
  };
  for (const Entry& e : kEntries) {
    if (name == e.name) return e.kind;
  }
  return unsupported(
      "pre-tokenizer '" + printable(std::string(name)) +
      "' is not implemented (supported: llama3, qwen2, deepseek-v3, gpt-2, smollm families)");
}

void pre_tokenize(const PreTokenizerOptions& opts, std::string_view text, std::vector<Range>* out) {
  if (text.empty()) return;
  if (opts.kind == PreTokenizerKind::kNone) {
    out->push_back({0, static_cast<uint32_t>(text.size())});
    return;
  }
  thread_local Cps c;
  thread_local std::vector<Range> stage_a, stage_b;
  c.cp.clear();
  c.cls.clear();
  c.off.clear();
  for (size_t i = 0; i < text.size();) {
    c.off.push_back(static_cast<uint32_t>(i));
    uint32_t cp = utf8_decode(text, &i);
    c.cp.push_back(cp);
    c.cls.push_back(cp_class(cp, opts.flavor));
  }
  c.off.push_back(static_cast<uint32_t>(text.size()));
  const size_t n = c.cp.size();
  Matcher m(c, opts.flavor == UnicodeFlavor::kHf);
  auto emit = [&](size_t a, size_t b) { out->push_back({c.off[a], c.off[b]}); };

  // Runs a full-coverage matcher over one piece.
  auto run_matcher = [&](Range piece, auto&& match) {
    size_t i = piece.first;
    size_t gap = i;
    while (i < piece.second) {
      size_t e = match(i, piece.second);
      if (e == i) {
        ++i;
        continue;
      }
      if (gap < i) emit(gap, i);
      emit(i, e);
      i = gap = e;
    }
    if (gap < piece.second) emit(gap, piece.second);
  };

  switch (opts.kind) {
    case PreTokenizerKind::kGpt2:
      run_matcher({0, n}, [&](size_t i, size_t hi) { return m.gpt2(i, hi); });
      break;
    case PreTokenizerKind::kSmollm: {
      stage_a.clear();
      split_runs(
          {0, static_cast<uint32_t>(n)}, 1, [&](size_t k) { return m.is(k, kClassN); }, &stage_a);
      for (Range p : stage_a) run_matcher(p, [&](size_t i, size_t hi) { return m.gpt2(i, hi); });
      break;
    }
    case PreTokenizerKind::kLlama3:
      run_matcher({0, n}, [&](size_t i, size_t hi) { return m.llama3(i, hi, 3); });
      break;
    case PreTokenizerKind::kQwen2:
      run_matcher({0, n}, [&](size_t i, size_t hi) { return m.llama3(i, hi, 1); });
      break;
    case PreTokenizerKind::kDeepseekV3: {
      stage_a.clear();
      stage_b.clear();
      split_runs(
          {0, static_cast<uint32_t>(n)}, 3, [&](size_t k) { return m.is(k, kClassN); }, &stage_a);
      for (Range p : stage_a) {
        split_runs(
            p, SIZE_MAX, [&](size_t k) { return is_cjk_kana(c.cp[k]); }, &stage_b);
      }
      for (Range p : stage_b)
        run_matcher(p, [&](size_t i, size_t hi) { return m.deepseek_v3(i, hi); });
      break;
    }
    case PreTokenizerKind::kNone:
      break;
  }
}

}  // namespace duet::tok
