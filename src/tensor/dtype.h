// DType: every element type duet stores, with its block geometry. Owns the one table of sizes;
// quant block layouts live in quant_blocks.h. GGUF type ids are kept as the enum values so a
// GGUF file's type field maps 1:1; FP8 (safetensors only) takes an id outside GGUF's range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace duet {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kF8_E4M3 = 1000,  // safetensors only; never written to GGUF
};

struct DTypeInfo {
  DType dtype;
  std::string_view name;   // "Q4_K", as llama.cpp and gguf-py spell it
  uint32_t block_size;     // elements per block (1 for plain types)
  uint32_t type_size;      // bytes per block
  bool quantized;
  bool in_gguf;            // may appear in a GGUF tensor info
};

// nullopt for ids duet does not know (e.g. IQ types or removed ids 4/5).
std::optional<DTypeInfo> dtype_info(uint32_t id);
const DTypeInfo& dtype_info(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive

// Bytes for one row of n elements; nullopt when n is not a multiple of the block size.
std::optional<uint64_t> row_bytes(DType t, uint64_t n);

}  // namespace duet
