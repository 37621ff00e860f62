// Loading a TokenizerSpec from Hugging Face files: tokenizer.json (model, added tokens,
// normalizer, pre-tokenizer, post-processor) and optionally tokenizer_config.json (bos/eos
// tokens, add_bos_token/add_eos_token, chat_template). Only the byte-level BPE pipelines this
// tokenizer reproduces are accepted; anything else is an kUnsupported Status naming the part.
// The files are untrusted input: every field is type-checked, every id range-checked.
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace duet {

// `config_path` may be empty: then tokenizer_config.json next to tokenizer.json is used if
// present.
Result<TokenizerSpec> tokenizer_spec_from_hf_json(const std::string& tokenizer_json_path,
                                                  const std::string& config_path = "");
// Same from in-memory JSON texts (`config_json` may be empty).
Result<TokenizerSpec> tokenizer_spec_from_hf_json_text(const std::string& tokenizer_json,
                                                       const std::string& config_json);

// Adds to spec->eog_ids the eos id and the ids of well-known end-of-turn tokens present in the
// vocabulary ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", ...), without duplicates.
void tokenizer_spec_add_default_eog_ids(TokenizerSpec* spec);

}  // namespace duet
