// Matrix products with weight matrices on the GPU, for every weight DType duet loads (F32, F16,
// BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, FP8 E4M3 with its scales), plus the embedding
// lookup (rows of the same matrices). Launchers pick the variant:
//   - n_tokens <= 8: a decode kernel reading the quantized blocks directly (dequant fused;
//     memory-bound: expect >= 70% of HBM bandwidth on a 7B-shaped matrix); FP8 (and F16/BF16
//     from 2 rows) on sm_80+ through the tensor-core decode kernel (kernels/cuda/matvec_mma.h);
//     K-quant / Q8_0 weights from mma_min_tokens() rows on (sm_80+ native) through the fused MMA
//     kernel below instead;
//   - more rows: a tensor-core path (dequantize tiles to F16/BF16 and cuBLAS(Lt), or fused MMA);
//   - FP8 checkpoints: native FP8 tensor cores (sm_89+, Fp8Mode::kNative) or weight-only (FP8
//     read as 1 byte per weight and turned into F16 in registers, any card).
// Everything runs on the caller's stream and never allocates or synchronises inside matmul(),
// so a decode step can be captured in a CUDA graph once reserve() has sized the workspace.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "tensor/weight_matrix.h"
#include "kernels/cuda/device_matrix.h"
#include "runtime/device.h"

namespace duet::cuda {

enum class Fp8Mode { kAuto, kNative, kWeightOnly };  // kAuto: native where the card has FP8

// Copies a host WeightMatrix (a view into a mapped file) to the device, in the layout the kernels
// of `dev` want (may repack blocks, or turn BF16 into F16 on cards without BF16). Fails with a
// Status when the type cannot run on this device/path or memory runs out.
Result<DeviceWeight> upload_matrix(const WeightMatrix& w, const DeviceInfo& dev, Fp8Mode fp8);

// One context per stream (its workspace and cached cuBLASLt plans are not shared between threads).
// matmul() and get_rows() take only matrices made by upload_matrix (device layouts: see
// kernels/cuda/quant_types.cuh).
class MatmulContext {
 public:
  MatmulContext(const DeviceInfo& dev, Fp8Mode fp8);
  ~MatmulContext();
  MatmulContext(const MatmulContext&) = delete;
  MatmulContext& operator=(const MatmulContext&) = delete;

  // Sizes the workspace for products of up to max_tokens rows of x against matrices of up to
  // max_cols columns and max_rows rows (allocates; call before capturing a graph).
  void reserve(int max_tokens, int64_t max_cols, int64_t max_rows);

  // y[t * ldy + r] = sum_c W[r, c] * x[t * ldx + c] for t < n_tokens, r < w.n_rows (float32 in and
  // out, device memory). n_tokens <= the reserved max_tokens. accumulate: y[..] += the product
  // (the residual add fused into the product); only where accumulates(w, n_tokens).
  // zero / zero_n: also zero[0 .. zero_n) = 0 (the output of a later product, which then adds
  // into it): in the same launch where streams_decode(w, n_tokens), else by a memset after it.
  void matmul(const DeviceMatrix& w, const float* x, int64_t ldx, int n_tokens, float* y, int64_t ldy,
              cudaStream_t stream, bool accumulate = false, float* zero = nullptr, int64_t zero_n = 0);
  // True when matmul(w, .., n_tokens, ..) runs the streaming tensor-core decode kernel of F16 /
  // BF16 / FP8 weights (kernels/cuda/matvec_mma.h), which splits the columns of products that
  // add into y between CTAs and takes a zero side job.
  bool streams_decode(const DeviceMatrix& w, int n_tokens) const;

  // Fused producers. Decode batches of block-quantized weights read int8 activations with one
  // float4 per 32 values (kernels/cuda/quant_kernels.cuh, launch_quantize_act_q8); a producer
  // kernel (RMSNorm, gated activation: ops.h) can write them into q8_input() directly, and
  // matmul_q8() then runs the product without quantizing again.
  struct Q8Input {
    int8_t* q = nullptr;   // [n_tokens][n_cols]
    float4* m = nullptr;   // [n_tokens][n_cols / 32]
  };
  Q8Input q8_input() const;
  // True when matmul(w, .., n_tokens, ..) would quantize its input to that format.
  bool takes_q8(const DeviceMatrix& w, int n_tokens) const;
  // y (+)= W x for the n_tokens rows a producer wrote into q8_input() (takes_q8(w, n_tokens)).
  void matmul_q8(const DeviceMatrix& w, int n_tokens, float* y, int64_t ldy, cudaStream_t stream,
                 bool accumulate = false);
  // y1 = W1 x and y2 = W2 x (rows ldy apart) for the n_tokens rows in q8_input(), in one launch
  // where the kernels allow (two K-quant matrices of the same columns, e.g. Q4_K_M's [wq; wk] and
  // Q6_K wv): each exactly as matmul_q8 writes it. Returns false, launching nothing, otherwise.
  bool matmul_q8_pair(const DeviceMatrix& w1, float* y1, const DeviceMatrix& w2, float* y2, int64_t ldy, int n_tokens,
                      cudaStream_t stream);
  // Batches of mma_min_tokens()-64 rows on the quantized tensor-core kernel (kernels/cuda/quant_mma.h) read F16
  // activations, and so do FP8 weight-only decode batches (2-8 rows, hardware E4M3 conversion)
  // on the streaming kernel (kernels/cuda/matvec_mma.h, its staged input); a producer
  // (launch_rms_norm_f16, launch_gated_activation_f16, attention's F16 output: ops.h) can write
  // them into f16_input(w) directly, zeroing the product's output itself where the product is not
  // to add into a live sum, and matmul_f16() then adds W x into y without converting again.
  struct F16Input {
    __half* h = nullptr;  // [n_tokens][ld]
    int64_t ld = 0;       // row stride: n_cols rounded up to 16 (to 64 for FP8 weights)
  };
  // True when matmul(w, .., n_tokens, ..) would run that kernel (and may add into y).
  bool takes_f16(const DeviceMatrix& w, int n_tokens) const;
  F16Input f16_input(const DeviceMatrix& w) const;
  // y += W x for the n_tokens rows a producer wrote into f16_input(w) (takes_f16(w, n_tokens)).
  // zero / zero_n: also zero[0 .. zero_n) = 0, in the same launch (zero 16-byte aligned): the
  // output of a later product whose producer would otherwise zero it.
  void matmul_f16(const DeviceMatrix& w, int n_tokens, float* y, int64_t ldy, cudaStream_t stream,
                  float* zero = nullptr, int64_t zero_n = 0);
  // Native FP8 prompt products (cuBLASLt with per-token activation scales) read x as E4M3 rows,
  // one scale per row; a producer (launch_gated_activation_fp8_rows, ops.h) can write them into
  // fp8_rows_input(w) directly. takes_fp8_rows(w, n) says whether matmul() would quantize its
  // input that way (FP8 weights, native mode and card, per-row or per-tensor scales, after a
  // first such product has run); matmul_fp8_rows() then runs the product on that input, or
  // returns false when cuBLASLt runs nothing for this shape (y untouched: the caller computes
  // the float input and calls matmul()).
  struct Fp8RowsInput {
    uint8_t* q = nullptr;       // [n_tokens][ld]
    float* scales = nullptr;    // [n_tokens]
    int64_t ld = 0;             // row stride: n_cols rounded up to 16
  };
  bool takes_fp8_rows(const DeviceMatrix& w, int n_tokens) const;
  Fp8RowsInput fp8_rows_input(const DeviceMatrix& w) const;
  // accumulate: y += W x, in the GEMM's epilogue (cuBLASLt's beta = 1, y read and written in place).
  bool matmul_fp8_rows(const DeviceMatrix& w, int n_tokens, float* y, int64_t ldy, cudaStream_t stream,
                       bool accumulate = false);

  // matmul() can add into y for batches of n_tokens rows of any matrix the decode kernels take.
  static bool can_accumulate(int n_tokens);
  // ... of this matrix (the decode kernels, or the quantized tensor-core kernel's batches).
  bool accumulates(const DeviceMatrix& w, int n_tokens) const;
  // True when matmul(w, .., n_tokens, ..) runs the quantized tensor-core kernel (whose split rows
  // add with atomics: sums not in a fixed order).
  bool takes_mma(const DeviceMatrix& w, int n_tokens) const;
  // The fewest rows of a K-quant / Q8_0 batch that the quantized tensor-core kernel takes on
  // sm_80+ native paths (fewer: the int8 matrix-vector kernels; DUET_MMA_MIN_TOKENS overrides).
  static int mma_min_tokens();
  // Decode kernels are launched programmatically (sm_90, native path): producers writing their
  // inputs may be launched the same way (kernels/cuda/common.cuh, launch_maybe_pdl).
  bool pdl() const;

  // out[i * w.n_cols + c] = W[rows[i], c] * scale (embedding lookup); rows: device int32, each
  // already validated to be < w.n_rows.
  void get_rows(const DeviceMatrix& w, const int32_t* rows, int n, float scale, float* out, cudaStream_t stream);

  const DeviceInfo& device() const;
  Fp8Mode fp8_mode() const;  // the resolved mode (never kAuto)

  // How a decode product (1-8 rows) of w and n_tokens rows rounds its float activations: not at
  // all (float kernels), to int8 per 32 values (block-quantized weights), to F16 or BF16
  // (tensor-core decode of FP8 weight-only / F16 / BF16), or to E4M3 per token and 64 columns
  // (native FP8 decode).
  enum class DecodeInput { kFloat, kInt8, kF16, kBf16, kE4M3 };
  DecodeInput decode_input(const DeviceMatrix& w, int n_tokens) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace duet::cuda
