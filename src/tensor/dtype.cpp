// The DType table (see dtype.h).
#include "tensor/dtype.h"

#include <cctype>

#include "tensor/quant_blocks.h"

namespace duet {
namespace {

constexpr DTypeInfo kTable[] = {
    {DType::kF32, "F32", 1, 4, false, true},
    {DType::kF16, "F16", 1, 2, false, true},
    {DType::kQ4_0, "Q4_0", kQK4_0, sizeof(BlockQ4_0), true, true},
    {DType::kQ4_1, "Q4_1", kQK4_1, sizeof(BlockQ4_1), true, true},
    {DType::kQ5_0, "Q5_0", kQK5_0, sizeof(BlockQ5_0), true, true},
    {DType::kQ5_1, "Q5_1", kQK5_1, sizeof(BlockQ5_1), true, true},
    {DType::kQ8_0, "Q8_0", kQK8_0, sizeof(BlockQ8_0), true, true},
    {DType::kQ8_1, "Q8_1", kQK8_1, sizeof(BlockQ8_1), true, true},
    {DType::kQ2_K, "Q2_K", kQK_K, sizeof(BlockQ2_K), true, true},
    {DType::kQ3_K, "Q3_K", kQK_K, sizeof(BlockQ3_K), true, true},
    {DType::kQ4_K, "Q4_K", kQK_K, sizeof(BlockQ4_K), true, true},
    {DType::kQ5_K, "Q5_K", kQK_K, sizeof(BlockQ5_K), true, true},
    {DType::kQ6_K, "Q6_K", kQK_K, sizeof(BlockQ6_K), true, true},
    {DType::kQ8_K, "Q8_K", kQK_K, sizeof(BlockQ8_K), true, true},
    {DType::kI8, "I8", 1, 1, false, true},
    {DType::kI16, "I16", 1, 2, false, true},
    {DType::kI32, "I32", 1, 4, false, true},
    {DType::kI64, "I64", 1, 8, false, true},
    {DType::kF64, "F64", 1, 8, false, true},
    {DType::kBF16, "BF16", 1, 2, false, true},
    {DType::kF8_E4M3, "F8_E4M3", 1, 1, false, false},
};

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  for (const auto& e : kTable)
    if (static_cast<uint32_t>(e.dtype) == id) return e;
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& e : kTable)
    if (e.dtype == t) return e;
  static const DTypeInfo kBad{DType::kF32, "?", 1, 0, false, false};
  return kBad;
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& e : kTable) {
    if (e.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size(); ++i)
      if (std::toupper(static_cast<unsigned char>(name[i])) != e.name[i]) eq = false;
    if (eq) return e.dtype;
  }
  return std::nullopt;
}

std::optional<uint64_t> row_bytes(DType t, uint64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n % info.block_size != 0) return std::nullopt;
  return n / info.block_size * info.type_size;
}

}  // namespace duet
