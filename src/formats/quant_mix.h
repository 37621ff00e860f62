// File types (llama.cpp's llama_ftype numbering, stored as general.file_type) and the per-tensor
// type choice of the standard K-quant mixes (Q4_K_M and friends): which tensors get more bits,
// decided the way llama.cpp's quantizer decides, so that sizes and quality match its files.
// A QuantMixPlanner is stateful (counts attn_v / ffn_down tensors as they are planned, in order).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace duet {

enum class FileType : uint32_t {
  kAllF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9, kQ2_K = 10,
  kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16,
  kQ5_K_M = 17, kQ6_K = 18, kBF16 = 32,
};

std::optional<FileType> file_type_from_name(const std::string& name);  // "Q4_K_M", "q8_0", "f16"
std::string file_type_name(uint32_t ftype);  // "Q4_K_M" or "unknown(N)"
DType file_type_default(FileType ft);
std::vector<std::string> file_type_names();

struct MixModelInfo {
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  bool has_output = true;  // false when output shares token_embd (tied embeddings)
};

class QuantMixPlanner {
 public:
  QuantMixPlanner(FileType ft, MixModelInfo info, int n_attn_v_tensors);
  // Type for a tensor given its GGUF name and GGML shape (shape[0] = row length). Call once per
  // tensor in file order (counters advance). Tensors that are not quantized keep `keep_type`.
  DType choose(const std::string& name, const std::vector<uint64_t>& shape, DType keep_type);
  static bool is_quantizable(const std::string& name, const std::vector<uint64_t>& shape);

 private:
  FileType ft_;
  MixModelInfo info_;
  int n_attn_v_;
  int i_attn_v_ = 0;
  int i_ffn_down_ = 0;
};

}  // namespace duet
