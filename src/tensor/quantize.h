// Reference (scalar, exact) dequantize and quantize for every DType. These define the numbers:
// SIMD and CUDA kernels are tested against them. Dequantize is bit-exact with ggml / gguf-py;
// quantize of Q4_0..Q8_0 is bit-exact with ggml's reference quantizer; the K-quant quantizers
// (kquant.cpp) search scales like llama.cpp's and match its squared error.
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace duet {

bool can_dequantize(DType t);
bool can_quantize(DType t);

// n must be a multiple of the type's block size (DUET_CHECK'd).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Per-type K-quant reference quantizers (kquant.cpp). n is a multiple of 256.
void quantize_row_q2_K(const float* x, void* y, int64_t n);
void quantize_row_q3_K(const float* x, void* y, int64_t n);
void quantize_row_q4_K(const float* x, void* y, int64_t n);
void quantize_row_q5_K(const float* x, void* y, int64_t n);
void quantize_row_q6_K(const float* x, void* y, int64_t n);
void quantize_row_q8_K(const float* x, void* y, int64_t n);

// The CUDA kernels' Q4_K block (kernels/cuda/quant_types.cuh; upload_matrix writes it): src's
// 144 bytes with qs reordered so that qs byte 16p + i (p < 8, i < 16) holds weight 16p + i in its
// low nibble and weight 128 + 16p + i in its high one (the file pairs 64j + i with 64j + 32 + i).
// d, dmin and scales are unchanged. src and dst do not overlap.
void repack_q4_K_for_gpu(const void* src, void* dst);

}  // namespace duet
