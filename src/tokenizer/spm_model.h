// SentencePiece-style vocabulary (Gemma, Llama 2) tokenized the way llama.cpp does it: start from
// UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the vocabulary entry
// with the highest score (leftmost on ties), then map leftovers to <0xNN> byte tokens.
// Immutable after build(); encode() is safe from many threads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/tokenizer_spec.h"

namespace duet::tok {

class SpmModel {
 public:
  Status build(const TokenizerSpec& spec, const TokenIndex* text_to_id);
  // `text` is already whitespace-escaped ('▁' for ' ').
  void encode(std::string_view text, std::vector<int32_t>* out) const;

 private:
  const TokenIndex* text_to_id_ = nullptr;
  std::vector<float> scores_;
  int32_t byte_id_[256];
  int32_t unk_id_ = -1;
};

}  // namespace duet::tok
