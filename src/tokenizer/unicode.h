// Unicode helpers for the tokenizer: UTF-8 decoding/encoding, general categories, White_Space,
// HF-compatible NFC, and lossy UTF-8 repair (U+FFFD per maximal invalid subpart, as Rust's
// String::from_utf8_lossy). Tables come from unicode_tables.inc (scripts/ref/
// tokenizer_gen_unicode.py). Pure functions; safe from any thread after first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace duet::tok {

// General categories, in the order the generator writes them.
enum class GeneralCategory : uint8_t {
  kCn,
  kLu,
  kLl,
  kLt,
  kLm,
  kLo,
  kMn,
  kMc,
  kMe,
  kNd,
  kNl,
  kNo,
  kPc,
  kPd,
  kPs,
  kPe,
  kPi,
  kPf,
  kPo,
  kSm,
  kSc,
  kSk,
  kSo,
  kZs,
  kZl,
  kZp,
  kCc,
  kCf,
  kCs,
  kCo,
};

// Which Unicode data the category lookups follow: HF tokenizers (Unicode 16.0) or llama.cpp
// (its own tables, 15.1 at the vendored version).
enum class UnicodeFlavor : uint8_t { kHf, kLlamaCpp };

// Per-code-point class bits used by the pre-tokenizer matchers.
enum CpClass : uint8_t {
  kClassL = 1,
  kClassN = 2,
  kClassP = 4,
  kClassS = 8,
  kClassM = 16,
  kClassSpace = 32,  // \s
  kClassZ = 64,
  kClassC = 128,
};

constexpr uint32_t kReplacementChar = 0xFFFD;

GeneralCategory general_category(uint32_t cp, UnicodeFlavor flavor = UnicodeFlavor::kHf);
// Bit set of CpClass for cp (kClassSpace is White_Space, independent of the category bits).
uint8_t cp_class(uint32_t cp, UnicodeFlavor flavor);
bool is_white_space(uint32_t cp);

// Decodes one code point at s[i]; on invalid or truncated UTF-8 returns kReplacementChar and
// advances by the length of the maximal invalid subpart (at least 1).
uint32_t utf8_decode(std::string_view s, size_t* i);
void utf8_append(uint32_t cp, std::string* out);
// Length of a complete, valid UTF-8 sequence starting at s[i], or 0 if invalid/truncated.
size_t utf8_valid_len(std::string_view s, size_t i);
bool utf8_is_valid(std::string_view s);
// Replaces each maximal invalid subpart with U+FFFD (String::from_utf8_lossy).
std::string utf8_lossy(std::string_view s);

// Unicode NFC with HF tokenizers' data. Returns false (and leaves *out untouched) when s is
// already NFC by the quick check, so callers avoid a copy.
bool nfc_normalize(std::string_view s, std::string* out);

}  // namespace duet::tok
