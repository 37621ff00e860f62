// K-quant mix rules (see quant_mix.h). The rules follow llama.cpp's quantizer for dense models:
// the output head (or tied embedding) gets Q6_K, V projections and FFN down projections of the
// first, last and every third middle layer get more bits, and a type whose block does not divide
// the row length falls back to a 32-block type.
#include "formats/quant_mix.h"

#include <cctype>

namespace duet {
namespace {

struct FtName {
  FileType ft;
  const char* name;
  DType base;
};
constexpr FtName kFileTypes[] = {
    {FileType::kAllF32, "F32", DType::kF32},   {FileType::kF16, "F16", DType::kF16},
    {FileType::kBF16, "BF16", DType::kBF16},   {FileType::kQ4_0, "Q4_0", DType::kQ4_0},
    {FileType::kQ4_1, "Q4_1", DType::kQ4_1},   {FileType::kQ5_0, "Q5_0", DType::kQ5_0},
    {FileType::kQ5_1, "Q5_1", DType::kQ5_1},   {FileType::kQ8_0, "Q8_0", DType::kQ8_0},
    {FileType::kQ2_K, "Q2_K", DType::kQ2_K},   {FileType::kQ3_K_S, "Q3_K_S", DType::kQ3_K},
    {FileType::kQ3_K_M, "Q3_K_M", DType::kQ3_K}, {FileType::kQ3_K_L, "Q3_K_L", DType::kQ3_K},
    {FileType::kQ4_K_S, "Q4_K_S", DType::kQ4_K}, {FileType::kQ4_K_M, "Q4_K_M", DType::kQ4_K},
    {FileType::kQ5_K_S, "Q5_K_S", DType::kQ5_K}, {FileType::kQ5_K_M, "Q5_K_M", DType::kQ5_K},
    {FileType::kQ6_K, "Q6_K", DType::kQ6_K},
};

bool contains(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

// Layers that get more bits: the first and last eighth, and every third layer between.
bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// A 256-block type that does not divide the row falls back to the nearest 32-block type.
DType fit_block(DType t, uint64_t ncols) {
  const uint32_t bs = dtype_info(t).block_size;
  if (ncols % bs == 0) return t;
  DType r = t;
  switch (t) {
    case DType::kQ2_K: case DType::kQ3_K: r = DType::kQ4_0; break;
    case DType::kQ4_K: r = DType::kQ5_0; break;
    case DType::kQ5_K: r = DType::kQ5_1; break;
    case DType::kQ6_K: r = DType::kQ8_0; break;
    default: break;
  }
  if (ncols % dtype_info(r).block_size != 0) r = DType::kF16;
  return r;
}

}  // namespace

std::optional<FileType> file_type_from_name(const std::string& name) {
  std::string up;
  for (char c : name) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& e : kFileTypes)
    if (up == e.name) return e.ft;
  return std::nullopt;
}

std::string file_type_name(uint32_t ftype) {
  for (const auto& e : kFileTypes)
    if (static_cast<uint32_t>(e.ft) == ftype) return e.name;
  return "unknown(" + std::to_string(ftype) + ")";
}

DType file_type_default(FileType ft) {
  for (const auto& e : kFileTypes)
    if (e.ft == ft) return e.base;
  return DType::kF32;
}

std::vector<std::string> file_type_names() {
  std::vector<std::string> v;
  for (const auto& e : kFileTypes) v.push_back(e.name);
  return v;
}

QuantMixPlanner::QuantMixPlanner(FileType ft, MixModelInfo info, int n_attn_v_tensors)
    : ft_(ft), info_(info), n_attn_v_(n_attn_v_tensors) {}

bool QuantMixPlanner::is_quantizable(const std::string& name, const std::vector<uint64_t>& shape) {
  int n_dims = 0;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 1 || i == 0) n_dims = static_cast<int>(i) + 1;
  if (n_dims < 2) return false;
  if (name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0) return false;
  if (contains(name, "_norm.weight")) return false;
  if (contains(name, "ffn_gate_inp.weight")) return false;
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  return true;
}

DType QuantMixPlanner::choose(const std::string& name, const std::vector<uint64_t>& shape,
                              DType keep_type) {
  const DType base = file_type_default(ft_);
  const bool quantized_ft = dtype_info(base).quantized;
  if (!is_quantizable(name, shape)) return keep_type;
  if (!quantized_ft) return base;
  const uint64_t ncols = shape[0];
  const FileType ft = ft_;
  DType t = base;
  const bool is_output = name == "output.weight";
  const bool is_tok_embd = name == "token_embd.weight";
  const bool is_attn_v = contains(name, "attn_v.weight") || contains(name, "attn_qkv.weight");
  const int n_gqa = info_.n_kv_heads > 0 ? info_.n_heads / info_.n_kv_heads : 1;

  if (is_output || (!info_.has_output && is_tok_embd)) {
    if (ncols % dtype_info(base).block_size != 0) t = DType::kQ8_0;
    else if (base != DType::kQ8_0) t = DType::kQ6_K;
  } else if (is_tok_embd) {
    // Untied token embeddings keep the file type's base type.
  } else if (is_attn_v) {
    const int i = i_attn_v_++;
    if (ft == FileType::kQ2_K) t = n_gqa >= 4 ? DType::kQ4_K : DType::kQ3_K;
    else if (ft == FileType::kQ3_K_M) t = i < 2 ? DType::kQ5_K : DType::kQ4_K;
    else if (ft == FileType::kQ3_K_L) t = DType::kQ5_K;
    else if ((ft == FileType::kQ4_K_M || ft == FileType::kQ5_K_M) && more_bits(i, n_attn_v_)) t = DType::kQ6_K;
    else if (ft == FileType::kQ4_K_S && i < 4) t = DType::kQ5_K;
  } else if (contains(name, "ffn_down")) {
    const int i = i_ffn_down_++;
    const int n = info_.n_layers;
    if (ft == FileType::kQ2_K) t = DType::kQ3_K;
    else if (ft == FileType::kQ3_K_M) t = i < n / 16 ? DType::kQ5_K : DType::kQ4_K;
    else if (ft == FileType::kQ3_K_L) t = DType::kQ5_K;
    else if (ft == FileType::kQ4_K_M && more_bits(i, n)) t = DType::kQ6_K;
    else if (ft == FileType::kQ5_K_M && more_bits(i, n)) t = DType::kQ6_K;
    else if (ft == FileType::kQ4_K_S && i < n / 8) t = DType::kQ5_K;
  } else if (contains(name, "attn_output.weight")) {
    if (ft == FileType::kQ2_K) t = DType::kQ3_K;
    else if (ft == FileType::kQ3_K_M) t = DType::kQ4_K;
    else if (ft == FileType::kQ3_K_L) t = DType::kQ5_K;
  }
  return fit_block(t, ncols);
}

}  // namespace duet
