// Architecture descriptions shared by converters, synth and (later) model loading: hyper-
// parameters (HParams) read from HF config.json or GGUF metadata and written back to GGUF, the
// GGUF tensor list of each architecture, and HF -> GGUF tensor name mapping. Pure data, no I/O
// beyond the GgufFile/GgufWriter objects passed in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "formats/gguf.h"

namespace duet {

enum class Arch { kLlama, kQwen2, kQwen3, kGemma3 };
const char* arch_name(Arch a);  // GGUF general.architecture spelling
std::optional<Arch> arch_from_name(const std::string& s);

struct HParams {
  Arch arch = Arch::kLlama;
  uint32_t n_layers = 0;
  uint32_t d_model = 0;
  uint32_t d_ff = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t vocab_size = 0;
  uint32_t context_length = 0;
  float rope_theta = 10000.0f;
  float rope_theta_local = 10000.0f;  // gemma3 sliding-window layers
  float rms_eps = 1e-6f;
  bool tied_embeddings = false;
  uint32_t sliding_window = 0;          // gemma3
  uint32_t sliding_window_pattern = 0;  // gemma3: every Nth layer is global
  float query_pre_attn_scalar = 0;      // gemma3 (0: head_dim)

  Status validate() const;  // every count positive, head_dim * n_heads consistent, limits
};

Result<HParams> hparams_from_hf_config(const nlohmann::json& config);
Result<HParams> hparams_from_gguf(const GgufFile& g);
void hparams_to_gguf(const HParams& hp, GgufWriter& w);
nlohmann::json hparams_to_hf_config(const HParams& hp);  // a config.json transformers can load

// Named shapes of real models for `duet synth`: qwen2-7b, qwen2-0.5b, qwen3-8b, llama3-8b, ...
std::optional<HParams> hparams_preset(const std::string& shape);
std::vector<std::string> hparams_preset_names();

struct TensorDecl {
  std::string name;             // GGUF name
  std::vector<uint64_t> shape;  // GGML order
};
std::vector<TensorDecl> arch_tensors(const HParams& hp);

// HF tensor name -> GGUF name; nullopt for tensors duet does not use (e.g. rotary inv_freq).
// *qk_permute is set for llama q/k projections, whose rows are reordered (HF rotate-half layout
// to GGML's interleaved RoPE). *norm_shift gets 1.0 for gemma norms (HF stores weight - 1).
std::optional<std::string> gguf_name_from_hf(const std::string& hf, Arch arch, int* qk_permute_heads,
                                             const HParams& hp, float* norm_shift);

// GGUF name -> HF name (inverse of the above, without permutation), for safetensors output.
std::optional<std::string> hf_name_from_gguf(const std::string& gguf, Arch arch);

}  // namespace duet
