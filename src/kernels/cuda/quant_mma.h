// Tensor-core products of block-quantized weights with small batches of F16 activations
// (batched decode, 2 <= n_tokens <= 64): the quantized blocks are read once per call and turned
// into F16 in registers (no dequantized copy of W), mma.sync m16n8k16 F16 x F16 -> F32 (sm_80+).
// Owns no memory and no stream; the caller (MatmulContext) converts the activations to F16 first
// (kernels::launch_convert_act) and launches on its stream. Host declarations; kernels in
// quant_mma.cu.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_matrix.h"

namespace duet::cuda::kernels {

constexpr int kMmaMaxTokens = 64;

// True for the weight types launch_matmul_mma implements (Q4_K, Q5_K, Q6_K, Q8_0).
bool mma_supported(DType t);

// y[t * ldy + r] = sum_c W[r, c] * x[t * ldx + c] for t < n, r < w.n_rows. w: a matrix from
// upload_matrix whose dtype is mma_supported (n_cols a multiple of its block: 256, Q8_0 32); x: F16
// [n][ldx] device memory, 16-byte aligned, ldx % 8 == 0, ldx >= w.n_cols; y: float [n][ldy], ldy >=
// w.n_rows. 1 <= n <= kMmaMaxTokens. Launches on s, never allocates or synchronises (capturable in
// a CUDA graph); where it splits the K dimension over blocks it zeroes y first (cudaMemset2DAsync
// on s) and adds with atomics, so the float sums of one call are then not in a fixed order. Needs
// an sm_80+ device. accumulate: y[..] += the product instead (no zeroing: a caller that zeroed y
// itself, or the residual add fused into the product). pdl: launched programmatically (sm_90;
// kernels/cuda/common.cuh launch_maybe_pdl): the weights of the first stages are requested before
// the kernel waits for the previous kernel. zero: a side job, p[0 .. n) = 0 (p 16-byte aligned),
// done by the whole grid after that wait: the zeroed output of a later product, which a small
// producer kernel would otherwise write alone.
struct ZeroJob {
  float* p = nullptr;
  int64_t n = 0;
};
void launch_matmul_mma(const DeviceMatrix& w, const __half* x, int64_t ldx, int n, float* y,
                       int64_t ldy, cudaStream_t s, bool accumulate = false, bool pdl = false,
                       ZeroJob zero = {});

}  // namespace duet::cuda::kernels
