// Helpers shared by the conversion commands (quantize, synth): error printing, path tests,
// tokenizer lookup, and writing a safetensors model directory with its config.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "formats/arch.h"
#include "formats/convert.h"

namespace duet {

int tool_error(const char* cmd, const std::string& msg);  // prints, returns 1
bool is_gguf_file(const std::string& path);
std::string basename_of(const std::string& path);
std::optional<SafetensorsOutType> safetensors_out_type(const std::string& name);
// Locates a tokenizer directory: an existing path, or a name under shared/tokenizers (searched
// in $DUET_TOKENIZERS, ./shared/tokenizers, ../shared/tokenizers, and beside the executable).
std::optional<std::string> find_tokenizer_dir(const std::string& name_or_path);
// Adds tokenizer.* metadata: from a GGUF (tokenizer_from), else from hf_dir's tokenizer.json.
Status add_tokenizer(GgufWriter& w, const HParams& hp, const std::string& tokenizer_from,
                     const std::string& hf_dir, const std::string& pre);
// Writes out_dir/model.safetensors + config.json (with quantization_config for FP8), and copies
// generation_config.json and tokenizer files from src_dir when present.
Status write_safetensors_dir(const TensorSourceSet& src, SafetensorsOutType type, nlohmann::json config,
                             const std::string& src_dir, const std::string& out_dir, const ConvertOptions& opt);

}  // namespace duet
