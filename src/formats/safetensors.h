// Hugging Face safetensors: reader for single-file and sharded checkpoints (with config.json and
// generation_config.json beside them), FP8 scale-layout detection, and a streaming writer.
// Owns the mappings; tensor data is never copied. Headers are untrusted and fully validated.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "formats/mmap_file.h"
#include "tensor/dtype.h"

namespace duet {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;  // row-major, as in PyTorch: shape.back() is contiguous
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;
  size_t shard = 0;  // index into shard_paths()
};

// How FP8 weights carry their scales (quantization_config of config.json + tensor names).
enum class Fp8ScaleLayout { kNone, kPerTensor, kPerChannel, kBlock };
const char* fp8_layout_name(Fp8ScaleLayout l);

struct Fp8Info {
  Fp8ScaleLayout layout = Fp8ScaleLayout::kNone;
  std::string quant_method;       // "compressed-tensors" or "fp8"
  uint32_t block_rows = 0;        // kBlock: weight_block_size
  uint32_t block_cols = 0;
  bool static_input_scale = false;  // compressed-tensors input_scale present (else dynamic)
  uint64_t n_fp8_tensors = 0;
};

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100ull << 20;
  uint32_t max_dims = 8;
};

class SafetensorsModel {
 public:
  // path: a .safetensors file, a model.safetensors.index.json, or a directory holding either.
  static Result<std::unique_ptr<SafetensorsModel>> open(const std::string& path,
                                                        const SafetensorsLimits& limits = {});
  // Parses one in-memory file (tests, fuzzing); the buffer must outlive the model.
  static Result<std::unique_ptr<SafetensorsModel>> parse(const uint8_t* data, uint64_t size,
                                                         const std::string& name = "<memory>",
                                                         const SafetensorsLimits& limits = {});

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  const nlohmann::json& config() const { return config_; }             // {} when absent
  const nlohmann::json& generation_config() const { return gen_config_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }
  const std::string& dir() const { return dir_; }
  uint64_t total_bytes() const;
  const Fp8Info& fp8() const { return fp8_; }
  // Drops the tensor's pages from RSS (the mapping stays valid; pages reload on access).
  void release(const SafetensorsTensor& t) const;

 private:
  SafetensorsModel() = default;
  Status add_shard(const uint8_t* data, uint64_t size, const std::string& name, size_t shard,
                   const SafetensorsLimits& limits);
  Status detect_fp8();

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<std::string> shard_paths_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  nlohmann::json config_ = nlohmann::json::object();
  nlohmann::json gen_config_ = nlohmann::json::object();
  std::string dir_;
  Fp8Info fp8_;
};

std::optional<DType> safetensors_dtype(const std::string& s);  // "BF16" -> kBF16
const char* safetensors_dtype_name(DType t);                    // kBF16 -> "BF16"

// Streaming writer: add every tensor, open() writes the header, then write each tensor's bytes
// in order.
class SafetensorsWriter {
 public:
  ~SafetensorsWriter();
  Status add_tensor(const std::string& name, DType dtype, std::vector<uint64_t> shape);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  Status open(const std::string& path);
  Status write_tensor(size_t index, const void* data, uint64_t n_bytes);
  Status finish();
  size_t n_tensors() const { return tensors_.size(); }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<uint64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> tensors_;
  std::map<std::string, std::string> metadata_;
  std::FILE* f_ = nullptr;
  std::string path_;
  size_t next_ = 0;
};

}  // namespace duet
