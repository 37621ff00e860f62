// Tokenizer: text <-> token ids for byte-level BPE and SPM vocabularies, built from a
// TokenizerSpec. Owns the vocabulary maps, merge tables, added-token splitters and the decoded
// bytes of every token. Immutable after create(); encode/decode are safe from many threads.
// It does not render chat templates (chat_template*.h) and does not stream (detokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace duet {

struct EncodeOptions {
  bool add_special = false;   // add BOS/EOS where the spec says so (add_bos / add_eos)
  bool parse_special = true;  // special tokens written in the text become their ids
};

struct DecodeOptions {
  // Drop special tokens: HF skip_special_tokens; for GGUF, control tokens render as nothing
  // (llama.cpp's unparse_special = false).
  bool skip_special = false;
};

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerSpec spec);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text is UTF-8; invalid sequences are first replaced with U+FFFD. Texts over 2 GiB are
  // encoded in 2 GiB pieces cut at character boundaries (offsets inside are 32-bit).
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const;
  void encode(std::string_view text, const EncodeOptions& opts, std::vector<int32_t>* out) const;

  // Ids outside [0, vocab_size) contribute nothing (as in HF). Invalid UTF-8 formed by the
  // token bytes becomes U+FFFD per maximal invalid subpart.
  std::string decode(const std::vector<int32_t>& ids, const DecodeOptions& opts = {}) const;
  // Appends the raw bytes token `id` contributes when it is the `index`-th token decoded
  // (the first token may lose its leading space for SPM vocabularies with a space prefix).
  void append_token_bytes(int32_t id, size_t index, const DecodeOptions& opts,
                          std::string* out) const;

  int32_t vocab_size() const { return static_cast<int32_t>(token_text_.size()); }
  bool valid_id(int32_t id) const { return id >= 0 && id < vocab_size(); }
  const std::string& token_text(int32_t id) const { return token_text_[id]; }
  int32_t token_to_id(std::string_view text) const;  // -1 when absent
  bool is_special(int32_t id) const { return valid_id(id) && special_[id]; }
  bool is_eog(int32_t id) const;

  TokenizerModel model() const { return spec_.model; }
  TokenizerFlavor flavor() const { return spec_.flavor; }
  const std::string& pre_type() const { return spec_.pre_type; }
  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  bool add_bos() const { return spec_.add_bos; }
  bool add_eos() const { return spec_.add_eos; }
  const std::vector<int32_t>& eog_ids() const { return spec_.eog_ids; }
  const std::string& chat_template() const { return spec_.chat_template; }

 private:
  struct Impl;
  Tokenizer() = default;
  void encode_text(std::string_view text, std::vector<int32_t>* out) const;

  TokenizerSpec spec_;  // without tokens/merges/scores (moved into the models)
  std::vector<std::string> token_text_;
  std::vector<std::string> token_bytes_;  // decoded bytes of each token
  std::vector<uint8_t> special_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace duet
