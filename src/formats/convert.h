// Streaming model conversion: a list of source tensors that can produce F32 rows on demand
// (from GGUF, safetensors, or a random generator) is written tensor by tensor to GGUF of any
// file type (with the K-quant mix) or to safetensors (BF16, or FP8 E4M3 with per-tensor,
// per-channel or 128x128 block scales). Rows are quantized by a pool of worker threads in
// bounded chunks, so memory stays independent of model size. Runs on the caller's thread + pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/arch.h"
#include "formats/gguf.h"
#include "formats/quant_mix.h"
#include "formats/safetensors.h"

namespace duet {

struct SourceTensor {
  std::string name;              // name in the output file's naming scheme
  std::vector<uint64_t> shape;   // GGML order: shape[0] = row length
  DType src_dtype = DType::kF32;
  // Fills rows [row0, row0 + n) (each shape[0] floats) into dst. Must be thread-safe.
  std::function<void(uint64_t row0, uint64_t n, float* dst)> read_rows;
  // Optional: called once the tensor has been written, to drop its source pages from RSS.
  std::function<void()> release;
  uint64_t n_rows() const {
    uint64_t r = 1;
    for (size_t i = 1; i < shape.size(); ++i) r *= shape[i];
    return r;
  }
};

// Keeps whatever the sources read from (mappings) alive with the tensor list.
struct TensorSourceSet {
  std::vector<SourceTensor> tensors;
  std::vector<std::shared_ptr<void>> keep_alive;
};

Result<TensorSourceSet> gguf_tensor_source(const std::string& path, std::shared_ptr<GgufFile>* file_out);
// HF checkpoint -> tensors under GGUF names (q/k permuted for llama, gemma norms shifted, FP8
// weights dequantized with their scales). hp comes from the checkpoint's config.json.
Result<TensorSourceSet> safetensors_tensor_source_gguf_names(std::shared_ptr<SafetensorsModel> m,
                                                             const HParams& hp);
// HF checkpoint tensors under their own names and shapes (for safetensors -> safetensors).
Result<TensorSourceSet> safetensors_tensor_source_hf_names(std::shared_ptr<SafetensorsModel> m);
// Random N(0, std) weights with the exact tensor list of hp (GGUF names); 1-D tensors are
// 1 + N(0, std) so norms stay near identity. Deterministic in seed, independent of threading.
TensorSourceSet random_tensor_source(const HParams& hp, uint64_t seed, float std = 0.02f);

struct ConvertOptions {
  int n_threads = 0;  // 0: hardware concurrency
  bool quiet = false;
};

// `w` already holds the metadata; general.file_type and general.quantization_version are set here.
Status write_gguf(const TensorSourceSet& src, GgufWriter& w, FileType ft, const MixModelInfo& mix,
                  const std::string& out_path, const ConvertOptions& opt);

enum class SafetensorsOutType { kBF16, kFP8PerTensor, kFP8PerChannel, kFP8Block };
// Tensors named as HF names (shape GGML order, converted to row-major on write). Linear weights
// of decoder layers become FP8 for the FP8 types; everything else is BF16.
Status write_safetensors(const TensorSourceSet& src, SafetensorsOutType type, const std::string& out_file,
                         const ConvertOptions& opt);
// The quantization_config block that goes into config.json for an FP8 output type.
nlohmann::json fp8_quantization_config(SafetensorsOutType type);

}  // namespace duet
