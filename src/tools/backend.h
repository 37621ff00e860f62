// Backend selection for the commands that evaluate a model (run, bench, perplexity): the
// --device / --fp8 / --no-graphs / -t / --kv-f32 options, and opening a CPU Model or a CUDA model
// behind the ForwardModel seam (the speed measurement they share: model/bench.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/bench.h"
#include "model/forward_model.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace duet {

struct BackendOptions {
  std::string device = "auto";  // auto (CUDA when built with it and a GPU is present), cpu, cuda, cuda:N
  std::string fp8 = "auto";     // auto, native, weight-only (CUDA)
  bool no_graphs = false;       // CUDA: run decode steps eagerly
  int n_threads = 0;            // CPU threads (0: all cores)
  bool kv_f32 = false;
  uint32_t max_context = 0;
  uint32_t max_seqs = 1;
  uint32_t max_batch_tokens = 512;
  bool verbose = true;
};

void add_backend_options(CLI::App& app, BackendOptions& o);

// The model's own tokenizer: GGUF metadata, or tokenizer.json (+ tokenizer_config.json) beside a
// safetensors checkpoint (`path` is the file or directory the weights came from).
Result<std::unique_ptr<Tokenizer>> load_model_tokenizer(const ModelWeights& w, const std::string& path);

// Opens the backend o.device names (kInvalidArgument for an unknown or unavailable device).
Result<std::unique_ptr<ForwardModel>> open_backend(ModelWeights weights, const BackendOptions& o);

// What one decode token reads and one prompt token computes, from the weights alone.
struct WeightStats {
  uint64_t decode_bytes = 0;     // every matrix but the embedding table (read one row a token)
  uint64_t macs_per_token = 0;   // weight-matrix multiply-adds per token
  DType main_dtype = DType::kF32;  // the type of most matrix bytes
};
WeightStats weight_stats(const ModelWeights& w);

}  // namespace duet
