// Tensor-core decode products (1-8 token rows) of FP8 E4M3, F16 and BF16 weights
// (kernels/cuda/matvec_mma.cu; internal to kernels/cuda, chosen by MatmulContext on the native
// path of sm_80+ cards). Runs on the given stream; never allocates or synchronises.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_matrix.h"

namespace duet::cuda::kernels {

// How the kernel multiplies, i.e. how it rounds the float activations:
enum class MatvecMmaKind {
  kF16,        // F16 weights x F16 activations (sm_80+)
  kBf16,       // BF16 weights x BF16 activations (sm_80+)
  kFp8Soft,    // FP8 weights turned into F16 by bit arithmetic x F16 activations (sm_80+)
  kFp8Hw,      // FP8 weights turned into F16 by cvt.rn.f16x2.e4m3x2 x F16 activations (sm_89+)
  kFp8Native,  // FP8 x FP8: activations as E4M3 with a scale per token and 64 columns (sm_89+)
};

// Whether W suits `kind`: its DType, rows of whole 16-byte pieces, FP8 block scales of 16-row
// and 64-column multiples (per-tensor and per-channel scales always).
bool matvec_mma_fits(const DeviceMatrix& w, MatvecMmaKind kind);

// y[t * ldy + r] = W[r] . x[t] (+= when accumulate) for t < n <= 8: x float [n][ldx], 16-byte
// aligned rows, readable and zero beyond n_cols up to W's padded row length (row_bytes / element
// size). pdl: launched programmatically (weights are loaded before the wait for x's producer).
// The device must be sm_80+ (sm_89+ for kFp8Hw and kFp8Native). Products that accumulate split
// their rows' columns between CTAs (stream-K: the sums are added atomically, so their order, and
// the result's last bits, vary between runs); a non-accumulating product can have it too by
// adding into a y zeroed beforehand. zero[0 .. zero_n): a side job, zeroed after the launch wait
// (a later product's output; only where matvec_mma_zeroes()).
void launch_matvec_mma(const DeviceMatrix& w, MatvecMmaKind kind, const float* x, int64_t ldx, int n, float* y,
                       int64_t ldy, bool accumulate, bool pdl, cudaStream_t s, float* zero = nullptr,
                       int64_t zero_n = 0);
// Whether launch_matvec_mma takes a zero side job (the streaming kernel runs: DUET_MATVEC_STREAM).
bool matvec_mma_zeroes();

// FP8 decode products with their activations staged once per product, in the words the kernel
// multiplies (F16 pairs for weight-only, E4M3 with a scale per token and 64 columns for native),
// instead of rounded again by every CTA for every chunk it multiplies: launch_stage_act_mma
// writes them from x (as launch_matvec_mma reads it) into xs (and xsc, native), sized by
// matvec_mma_stage_size; launch_matvec_mma_staged is launch_matvec_mma from them, bit-identical
// to it (same rounding, same sums). matvec_mma_stages(kind, n): whether MatmulContext stages a
// product of n tokens from float input by that launch (FP8 kinds on the streaming kernel: native
// always, weight-only from two tokens on); matvec_mma_producers_stage(): whether a producer may
// write a weight-only product's staged F16 input itself (MatmulContext::takes_f16). A/B knob
// DUET_MATVEC_STAGE=0: neither; =1: always the launch, never producers.
bool matvec_mma_stages(MatvecMmaKind kind, int n);
bool matvec_mma_producers_stage();
int matvec_mma_producers_min_tokens();  // 2 (DUET_MATVEC_STAGE=3: 1, an A/B knob)
struct MatvecMmaStage {
  size_t xs_bytes;     // for n tokens of n_cols columns
  size_t xsc_floats;
};
MatvecMmaStage matvec_mma_stage_size(int n, int64_t n_cols);
void launch_stage_act_mma(const DeviceMatrix& w, MatvecMmaKind kind, const float* x, int64_t ldx, int n, void* xs,
                          float* xsc, bool pdl, cudaStream_t s);
void launch_matvec_mma_staged(const DeviceMatrix& w, MatvecMmaKind kind, const void* xs, const float* xsc, int n,
                              float* y, int64_t ldy, bool accumulate, bool pdl, cudaStream_t s, float* zero = nullptr,
                              int64_t zero_n = 0);

}  // namespace duet::cuda::kernels
