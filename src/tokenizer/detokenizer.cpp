// Streaming UTF-8 repair (see detokenizer.h). Lossy decoding replaces each maximal invalid
// subpart; whether a subpart is maximal depends only on the bytes after it, so holding a trailing
// prefix that may still complete and deciding once more bytes arrive gives the same result as
// repairing the whole byte string at once.
#include "tokenizer/detokenizer.h"

#include "tokenizer/unicode.h"

namespace duet {
namespace {

// Needed length of the sequence starting with lead byte b, 0 when b cannot start one.
size_t sequence_len(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// True when s[i..] (shorter than a full sequence) is a prefix of some well-formed sequence.
bool is_incomplete_prefix(const std::string& s, size_t i) {
  auto b0 = static_cast<uint8_t>(s[i]);
  size_t need = sequence_len(b0);
  size_t have = s.size() - i;
  if (need == 0 || have >= need) return false;
  for (size_t k = 1; k < have; ++k) {
    auto b = static_cast<uint8_t>(s[i + k]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    if (b < lo || b > hi) return false;
  }
  return true;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, DecodeOptions opts)
    : tokenizer_(tokenizer), opts_(opts) {}

void IncrementalDetokenizer::reset() {
  pending_.clear();
  n_tokens_ = 0;
}

void IncrementalDetokenizer::push(int32_t id, std::string* out) {
  tokenizer_.append_token_bytes(id, n_tokens_++, opts_, &pending_);
  const std::string& s = pending_;
  size_t i = 0;
  size_t emitted = 0;  // s[emitted, i) is valid UTF-8 not yet copied to *out
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = tok::utf8_valid_len(s, i);
    if (len > 0) {
      i += len;
      continue;
    }
    if (is_incomplete_prefix(s, i)) break;  // wait for the next token's bytes
    out->append(s, emitted, i - emitted);
    // Invalid for good: one U+FFFD for this maximal subpart, exactly as utf8_lossy.
    tok::utf8_decode(s, &i);  // advances past the maximal invalid subpart
    out->append("\xEF\xBF\xBD");
    emitted = i;
  }
  out->append(s, emitted, i - emitted);
  pending_.erase(0, i);
}

void IncrementalDetokenizer::finish(std::string* out) {
  if (!pending_.empty()) out->append(tok::utf8_lossy(pending_));
  pending_.clear();
}

}  // namespace duet
