// Pre-tokenizers: split text into the words BPE runs on, with hand-written matchers that reproduce
// the families' split regexes exactly (leftmost-first alternation, greedy, with the backtracking
// the regexes imply), over Unicode general categories. Stateless; any thread.
// Names follow llama.cpp's GGUF `tokenizer.ggml.pre` values; tokenizer.json regexes map onto them.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/unicode.h"

namespace duet::tok {

enum class PreTokenizerKind : uint8_t {
  kNone,        // whole text is one word (SPM)
  kGpt2,        // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kSmollm,      // \p{N} isolated, then kGpt2 (also StarCoder, Refact, Command-R, ...)
  kLlama3,      // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,       // as kLlama3 with \p{N} (single digits)
  kDeepseekV3,  // \p{N}{1,3}; CJK/kana runs; then the punctuation-aware word regex
};

const char* pre_tokenizer_name(PreTokenizerKind kind);
// Maps a llama.cpp pre-tokenizer name (GGUF tokenizer.ggml.pre) onto a kind.
Result<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name);

struct PreTokenizerOptions {
  PreTokenizerKind kind = PreTokenizerKind::kNone;
  // Category tables to use, and contraction matching: HF's (?i:'s|...) folds U+017F (long s)
  // to 's' (Oniguruma case folding); llama.cpp rewrites the group as '[sS]' and does not.
  UnicodeFlavor flavor = UnicodeFlavor::kHf;
};

// Appends [begin, end) byte ranges of the words of `text` (valid UTF-8) to `out`, in order,
// covering the text exactly.
void pre_tokenize(const PreTokenizerOptions& opts, std::string_view text,
                  std::vector<std::pair<uint32_t, uint32_t>>* out);

}  // namespace duet::tok
