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
// gated: the gated activation of a fused [gate; up] product (ff gate rows, then ff up rows), applied
// in the same launch: as each block of features completes (every CTA's adds counted in
// counters[ff / 128], which must be zero at the launch and are zero again after it), the CTA that
// completes it writes out[t * ldo + f] = act(y[t][f]) * y[t][ff + f] rounded to F16 for f < ff,
// t < n (detail::gated_value: the values of launch_gated_activation_f16 on the same y), so that no
// activation launch runs between this product and the down product that reads out. y still gets
// the product. Needs mma_gated_ok(w, ff), y 16-byte aligned with ldy % 4 == 0, out 8-byte aligned
// with ldo % 4 == 0, and y zeroed where the product adds (as without it). Runs separate kernel
// instances; measured slower than the product and activation launches so far (quant_mma.cu,
// gated_tail), so the model uses it only under DUET_MMA_GATED=1.
struct GatedJob {
  int mode = -1;  // detail::gated_mode (kernels/cuda/gated.cuh); < 0: no activation
  int64_t ff = 0;
  __half* out = nullptr;
  int64_t ldo = 0;
  unsigned* counters = nullptr;
};
constexpr int64_t kMmaGatedAlign = 256;  // ff a multiple of every CTA shape's row block
// True when w (2 ff rows) can take a GatedJob of ff features.
bool mma_gated_ok(const DeviceMatrix& w, int64_t ff);
void launch_matmul_mma(const DeviceMatrix& w, const __half* x, int64_t ldx, int n, float* y,
                       int64_t ldy, cudaStream_t s, bool accumulate = false, bool pdl = false,
                       ZeroJob zero = {}, const GatedJob& gated = {});

}  // namespace duet::cuda::kernels
