// Model: a decoder-only transformer (llama, qwen2, qwen3, gemma3) on the CPU. Owns the bound
// weights (model/weights.h), the physical paged KV cache (model/kv_store.h) and a thread pool;
// forward() runs one batch of tokens from any number of sequences, each reading and extending
// its own KV blocks through a block table the caller manages (kvcache/, or model/session.h).
// Token-id based: tokenization is the caller's. One thread calls forward() at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/ops.h"
#include "model/forward_model.h"
#include "model/kv_store.h"
#include "model/weights.h"

namespace duet {

// Whose numerics to reproduce where references differ: llama.cpp's (GELU from an F16 table) or
// the float32 reference (transformers). Everything else is identical in both modes. kAuto picks
// llama.cpp's for GGUF files and the reference for safetensors checkpoints.
enum class Numerics { kAuto, kLlamaCpp, kReference };

struct ModelOptions {
  int n_threads = 0;                // 0: hardware concurrency
  DType kv_dtype = DType::kF16;     // kF16 or kF32
  uint32_t kv_block_size = 16;      // tokens per KV block
  uint32_t max_context = 0;         // tokens per sequence; 0: min(context_length, 4096)
  uint32_t max_seqs = 1;            // sizes the cache: max_seqs full-length sequences
  uint32_t n_kv_blocks = 0;         // overrides the size computed from the two above
  Numerics numerics = Numerics::kAuto;
};

class Model : public ForwardModel {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelOptions& options = {});
  static Result<std::unique_ptr<Model>> create(ModelWeights weights, const ModelOptions& options = {});
  ~Model();

  const HParams& hparams() const override { return w_.hp; }
  const ModelWeights& weights() const { return w_; }
  const ModelOptions& options() const { return opt_; }
  uint32_t kv_block_size() const override { return kv_.kv_block_size(); }
  uint32_t n_kv_blocks() const override { return kv_.n_kv_blocks(); }
  uint32_t max_context() const override { return opt_.max_context; }
  std::string device_name() const override { return "cpu"; }
  const KvStore& kv_store() const { return kv_; }
  ThreadPool& pool() { return *pool_; }

  // logits: output_rows.size() x vocab_size floats. Bad ids, positions or block ids in the batch
  // return kInvalidArgument before anything is computed.
  Status forward(const ForwardBatch& batch, float* logits) override;

 private:
  struct Scratch;
  Model(ModelWeights w, const ModelOptions& opt, KvStore kv);
  void layer_forward(uint32_t il, const ForwardBatch& b);

  ModelWeights w_;
  ModelOptions opt_;
  KvStore kv_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Scratch> s_;
  GeluMode gelu_mode_ = GeluMode::kExact;
};

}  // namespace duet
