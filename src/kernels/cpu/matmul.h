// Matrix products of weight matrices (any DType, read in place from the model file) with a batch
// of activation rows: y[t][r] = W[r] . x[t]. The activation rows are quantized once to the weight
// type's activation type (quant_dot.h) and may feed several matrices (q/k/v, gate/up) in one
// parallel dispatch. Work is split into row tiles over the ThreadPool; each tile runs its rows
// against all tokens in token tiles, so a tile of weights is read from memory once per call.
// Memory-bound at n_tokens <= 8 (expect most of DRAM bandwidth), compute-bound for prompts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/thread_pool.h"
#include "tensor/dtype.h"
#include "tensor/weight_matrix.h"

namespace duet {

// Activation rows quantized for one activation type.
struct QuantizedRows {
  DType act = DType::kF32;
  int64_t n_cols = 0;
  int n_rows = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> data;
  std::vector<float> block_scales;  // Q8_0 / Q8_1: (d, s) per block as floats, for the multi-row kernels
  const uint8_t* row(int t) const { return data.data() + static_cast<size_t>(t) * row_bytes; }
  const float* scales(int t) const {
    return block_scales.empty() ? nullptr : block_scales.data() + static_cast<size_t>(t) * (n_cols / 32) * 2;
  }
};

// Quantizes n_tokens rows of x (row stride x_stride floats) for weights of type w.
void quantize_rows(DType w, const float* x, int n_tokens, int64_t n_cols, size_t x_stride, QuantizedRows* out,
                   ThreadPool& pool);

// How llama.cpp would have batched an activation row: the number of rows its sequence has in
// this batch and the row's index among them. Picks the kernel whose summation order a row
// reproduces (quant_dot.h DotVariant): tinyBLAS for F32/F16/BF16 when seq_rows >= 2, repacked
// Q4_K gemm for rows in complete groups of four, gemv for the rest, the tiled K-quant matmul for
// other K-quant matrices when seq_rows >= 8. Default: a row alone.
struct RowBatching {
  int32_t seq_rows = 1;
  int32_t seq_index = 0;
};

// The variant for activation row `b` against a weight matrix (its type and shape decide whether
// llama.cpp would repack it or hand it to tinyBLAS).
DotVariant dot_variant_for(const WeightMatrix& w, const RowBatching& b);

struct MatmulJob {
  const WeightMatrix* w;
  const QuantizedRows* x;  // x->act == activation_type(w->dtype), x->n_cols == w->n_cols
  float* y;                // y[t * y_stride + r]
  size_t y_stride;
};

// Runs every job over all x->n_rows tokens in one parallel dispatch. batching: one entry per
// token, or empty (every row alone).
void matmul(std::span<const MatmulJob> jobs, ThreadPool& pool, std::span<const RowBatching> batching = {});

// Convenience: quantize x and multiply by one matrix.
void matmul_f32(const WeightMatrix& w, const float* x, int n_tokens, size_t x_stride, float* y, size_t y_stride,
                ThreadPool& pool);

// Reference for tests: y[t][r] = dequantized W[r] . dequantized quantized x[t], in double.
void matmul_reference(const WeightMatrix& w, const QuantizedRows& x, float* y, size_t y_stride);

}  // namespace duet
