// ModelWeights: every tensor of a decoder (llama, qwen2, qwen3, gemma3) bound to its bytes in a
// mapped GGUF or safetensors file. Matrices stay in the mapping (never copied) as WeightMatrix
// views of any supported DType; 1-D tensors (norms, biases) are small and are converted to owned
// float vectors, with the Gemma +1 shift applied for HF checkpoints. Validated once at bind time:
// names, shapes, types, FP8 scale counts. Immutable afterwards; shared read-only by threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/arch.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rope.h"

namespace duet {

struct LayerWeights {
  WeightMatrix wq, wk, wv, wo;     // rows: n_heads*head_dim, n_kv*head_dim, n_kv*head_dim, d_model
  WeightMatrix w_gate, w_up, w_down;
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> post_attn_norm, post_ffn_norm;  // gemma3
  std::vector<float> q_norm, k_norm;                 // qwen3, gemma3 (head_dim each)
  std::vector<float> bq, bk, bv;                     // qwen2
};

struct ModelWeights {
  HParams hp;
  RopeStyle rope_style = RopeStyle::kNeox;
  WeightMatrix tok_embd;  // vocab_size rows of d_model
  WeightMatrix output;    // the same view as tok_embd when embeddings are tied
  std::vector<float> output_norm;
  std::vector<float> rope_freqs;  // head_dim / 2 divisors (Llama 3 GGUF rope_freqs.weight), or empty
  std::vector<uint8_t> sliding;   // per layer: 1 = sliding-window attention with rope_theta_local
  std::vector<LayerWeights> layers;
  std::string source;  // "gguf" or "safetensors"

  // Keeps the mapping and FP8 scale storage alive.
  std::shared_ptr<GgufFile> gguf;
  std::shared_ptr<SafetensorsModel> safetensors;
  std::vector<std::shared_ptr<std::vector<float>>> owned;
};

Result<ModelWeights> bind_gguf_weights(std::shared_ptr<GgufFile> file);
Result<ModelWeights> bind_safetensors_weights(std::shared_ptr<SafetensorsModel> model);

// Opens `path` as GGUF (by its magic) or as a safetensors file / directory / index and binds it.
Result<ModelWeights> load_model_weights(const std::string& path);

}  // namespace duet
