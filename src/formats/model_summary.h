// ModelSummary: what `duet inspect` reports about a model file, from headers only (GGUF metadata
// or safetensors headers + config.json + tokenizer_config.json). Never touches tensor data.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace duet {

struct ModelSummary {
  std::string path;
  std::string format;        // "gguf" or "safetensors"
  std::string architecture;  // "qwen2", "llama", "gemma3", ...
  std::string name;
  uint64_t n_params = 0;
  uint64_t file_bytes = 0;
  std::string file_type;     // "Q4_K_M", "BF16", "FP8 (block 128x128)", ...
  uint64_t context_length = 0;
  uint64_t vocab_size = 0;
  uint64_t n_layers = 0;
  uint64_t d_model = 0;
  struct TypeStat {
    uint64_t n_tensors = 0;
    uint64_t n_bytes = 0;
    uint64_t n_elements = 0;
  };
  std::map<std::string, TypeStat> by_type;
  std::vector<std::pair<std::string, std::string>> special_tokens;  // role -> "id 'text'"
  bool has_chat_template = false;
  std::string fp8_layout;    // safetensors only: none / per-tensor / per-channel / block
  std::string extra;         // free-form notes (GGUF version, shard count, ...)
  struct TensorRow {
    std::string name, type;
    std::vector<uint64_t> shape;
    uint64_t n_bytes;
  };
  std::vector<TensorRow> tensors;
};

// path: .gguf file, .safetensors file, index json, or model directory.
Result<ModelSummary> summarize_model(const std::string& path);
nlohmann::ordered_json summary_to_json(const ModelSummary& s, bool with_tensors);
std::string summary_to_text(const ModelSummary& s, bool with_tensors);

}  // namespace duet
