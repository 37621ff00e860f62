// IncrementalDetokenizer: turns a stream of token ids into text chunks for streaming responses.
// Every chunk is valid UTF-8; bytes of a character split across tokens (byte-fallback tokens,
// byte-level BPE pieces) are held until the character completes, and bytes that can no longer
// form a character become U+FFFD immediately. The concatenation of all chunks plus finish() is
// byte-identical to Tokenizer::decode of the whole sequence. One instance per sequence; not
// thread-safe; the Tokenizer must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace duet {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, DecodeOptions opts = {});

  // Appends the text that became final with `id` (possibly nothing) to *out.
  void push(int32_t id, std::string* out);
  std::string push(int32_t id) {
    std::string s;
    push(id, &s);
    return s;
  }
  // End of sequence: appends what is still held (an incomplete character becomes U+FFFD).
  void finish(std::string* out);
  std::string finish() {
    std::string s;
    finish(&s);
    return s;
  }
  void reset();
  size_t n_tokens() const { return n_tokens_; }
  size_t n_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  DecodeOptions opts_;
  std::string pending_;  // at most 3 bytes: a prefix of a well-formed UTF-8 sequence
  size_t n_tokens_ = 0;
};

}  // namespace duet
