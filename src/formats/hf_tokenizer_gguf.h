// Turns a Hugging Face byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json) into the
// GGUF tokenizer.* metadata llama.cpp and duet read, padding the vocabulary to the model's
// embedding rows with [PAD<i>] tokens. Also copies tokenizer.* keys from an existing GGUF.
#pragma once

#include <string>

#include "base/status.h"
#include "formats/gguf.h"

namespace duet {

// dir holds tokenizer.json (and optionally tokenizer_config.json). pre: GGUF tokenizer.ggml.pre
// value ("qwen2", "llama-bpe", "deepseek-v3", ...). vocab_size: rows of token_embd (>= tokens).
Status hf_tokenizer_to_gguf(const std::string& dir, const std::string& pre, uint32_t vocab_size,
                            GgufWriter& w);
// Copies every tokenizer.* key of src (and pads/truncation is not done: sizes must agree).
Status copy_gguf_tokenizer(const GgufFile& src, GgufWriter& w);

}  // namespace duet
