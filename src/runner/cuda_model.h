// CudaModel: the decoder forward pass (llama, qwen2, qwen3, gemma3) on one CUDA device, the same
// function as the CPU Model (model/model.h) over the same paged-KV contract. Owns the uploaded
// weights (quantized blocks stay quantized on the device), the device KV cache (layout of
// kernels/cuda/attention.h), activation scratch, a MatmulContext and one stream. forward() copies
// the batch description up in one transfer, runs every op on the stream, and reads back only the
// requested logits; decode-shaped batches replay a captured CUDA graph. One thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "kernels/cuda/matmul.h"
#include "model/forward_model.h"
#include "model/model.h"
#include "model/weights.h"
#include "runtime/device.h"

namespace duet::cuda {

struct CudaModelOptions {
  int device = 0;
  DType kv_dtype = DType::kF16;  // kF16 or kF32
  uint32_t kv_block_size = 16;
  uint32_t max_context = 0;       // tokens per sequence; 0: min(context_length, 4096)
  uint32_t max_seqs = 1;          // sizes the cache: max_seqs full-length sequences
  uint32_t n_kv_blocks = 0;       // overrides the size computed from the two above
  uint32_t max_batch_tokens = 512;  // largest batch forward() takes without regrowing scratch
  Fp8Mode fp8 = Fp8Mode::kAuto;
  bool cuda_graphs = true;        // capture and replay decode steps
  Numerics numerics = Numerics::kAuto;
  bool verbose = true;            // upload progress on stderr
};

class CudaModel : public ForwardModel {
 public:
  static Result<std::unique_ptr<CudaModel>> load(const std::string& path, const CudaModelOptions& options = {});
  static Result<std::unique_ptr<CudaModel>> create(ModelWeights weights, const CudaModelOptions& options = {});
  ~CudaModel() override;

  const HParams& hparams() const override;
  uint32_t kv_block_size() const override;
  uint32_t n_kv_blocks() const override;
  uint32_t max_context() const override;
  std::string device_name() const override;
  Status forward(const ForwardBatch& batch, float* logits) override;
  // The argmax of each output row on the device (inside the decode graph); only the ids come
  // back to the host.
  Status forward_greedy(const ForwardBatch& batch, int32_t* tokens) override;
  // Copies the first n_rows output rows of the last forward's logits (still on the device after
  // forward_greedy) into out (n_rows x vocab). For tests and diagnostics: it synchronises.
  Status last_logits(int n_rows, float* out) const;
  std::string profile_report() const override;
  void pause_profile(bool paused) override;

  const DeviceInfo& device() const;
  Fp8Mode fp8_mode() const;
  // Bytes of weight matrices a decode step reads (every matrix but the embedding table, which is
  // read one row a token): the numerator of the decode roofline.
  uint64_t decode_weight_bytes() const;
  // Multiply-adds per token of the weight matrices (the prompt FLOPs are twice this, plus attention).
  uint64_t matmul_macs_per_token() const;

 private:
  Status run(const ForwardBatch& batch, float* logits, int32_t* tokens);
  struct Impl;
  explicit CudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace duet::cuda
