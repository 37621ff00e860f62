// WeightMatrix: a view of one weight matrix in its file's bytes (any DType), shared by the CPU
// kernels, the CUDA upload and the model binding. Plain C++17 (CUDA 11.8 sources include it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace duet {

// n_rows x n_cols weights; row r starts at data + r * row_bytes. FP8 rows have scales:
// scale(r, c) = fp8_scales[(r / fp8_block_rows) * fp8_scale_cols + c / fp8_block_cols]
// (per-tensor: block = whole matrix; per-channel: block_rows = 1, block_cols = n_cols).
struct WeightMatrix {
  DType dtype = DType::kF32;
  const uint8_t* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  size_t row_bytes = 0;
  const float* fp8_scales = nullptr;
  int64_t fp8_block_rows = 0;
  int64_t fp8_block_cols = 0;
  int64_t fp8_scale_cols = 0;
};

}  // namespace duet
