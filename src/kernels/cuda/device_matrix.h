// DeviceMatrix: a weight matrix resident on the GPU, in the bytes of its file's DType (the same
// block layouts as tensor/quant_blocks.h, rows of row_bytes) or in a form prepared for the GPU
// at upload (see matmul.h: upload_matrix). Owned by a DeviceWeight; the view is trivially copyable
// and passed to kernels by value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/device_buffer.h"
#include "tensor/dtype.h"

namespace duet::cuda {

struct DeviceMatrix {
  DType dtype = DType::kF32;
  const void* data = nullptr;  // device memory
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  size_t row_bytes = 0;
  // FP8 E4M3 weights: dequantized value = fp8 * scale of its (row / block_rows, col / block_cols)
  // block; per-tensor: one block; per-channel: block_rows 1, block_cols n_cols. Device memory.
  const float* fp8_scales = nullptr;
  int64_t fp8_block_rows = 0;
  int64_t fp8_block_cols = 0;
  int64_t fp8_scale_cols = 0;
};

// A DeviceMatrix and the allocations behind it.
struct DeviceWeight {
  DeviceMatrix m;
  DeviceBuffer data;
  DeviceBuffer scales;
};

}  // namespace duet::cuda
