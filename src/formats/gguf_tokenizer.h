// Fills a TokenizerSpec from GGUF tokenizer metadata (tokenizer.ggml.*, tokenizer.chat_template),
// reproducing llama.cpp's defaults and fix-ups (default special ids per model type, add_bos
// rules, end-of-turn tokens forced to control type). Lives in formats/ so tokenizer/ never
// depends on the GGUF reader. Pure function of the parsed header; any thread.
#pragma once

#include "base/status.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer_spec.h"

namespace duet {

Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& file);

}  // namespace duet
