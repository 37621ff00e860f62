// Launchers of the weight-matrix kernels behind matmul.h (internal to kernels/cuda): decode
// matrix-vector kernels (quant_matvec.cu), dequantize/convert/get_rows kernels (dequant.cu).
// Each launches on the given stream, never allocates and never synchronises. Matrices are in the
// device layouts of quant_types.cuh (what upload_matrix writes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_matrix.h"

namespace duet::cuda::kernels {

constexpr int kDecodeMaxTokens = 8;

bool is_block_quant(DType t);  // Q4_0 .. Q6_K (decoded in 32-weight chunks)

// --- decode (quant_matvec.cu) ---
// x [n][ldx] float -> xq [n][k] int8 + xm [n][k / 32] float4 (d, d * sum q[0..15], d * sum
// q[16..31], 0) per 32 values. k % 32 == 0, n <= kDecodeMaxTokens. pdl_ok: the device and path
// allow programmatic dependent launch (sm_90+, native path): the quantizer then waits for its
// producer programmatically and lets the product start early. Fused producers of this format:
// launch_rms_norm_q8, launch_gated_activation_q8 (ops.h).
void launch_quantize_act_q8(const float* x, int64_t ldx, int n, int64_t k, int8_t* xq, float4* xm, bool pdl_ok,
                            cudaStream_t s);
// x [n][ldx] float -> xs [n][kpad] float, zero beyond k.
void launch_stage_act_f32(const float* x, int64_t ldx, int n, int64_t k, float* xs, int64_t kpad, cudaStream_t s);
// y[t * ldy + r] = W[r] . x[t] (y[..] += W[r] . x[t] when accumulate), block-quantized W,
// activations in the format of launch_quantize_act_q8, written by a kernel launched before on the
// same stream. pdl_ok as above (then launched programmatically: every decode kernel waits for its
// producer with griddepcontrol.wait).
void launch_matvec_q8(const DeviceMatrix& w, const int8_t* xq, const float4* xm, int n, float* y, int64_t ldy,
                      bool accumulate, bool pdl_ok, cudaStream_t s);
// y1[t * ldy + r] = W1[r] . x[t] and y2[t * ldy + r] = W2[r] . x[t] in one launch (same int8 input,
// the format above), where the kernels allow (two K-quant matrices of the same columns, see
// quant_matvec.cu): each output exactly as launch_matvec_q8 would write it. Returns false
// (nothing launched) otherwise.
bool launch_matvec_q8_pair(const DeviceMatrix& w1, float* y1, const DeviceMatrix& w2, float* y2, int64_t ldy,
                           const int8_t* xq, const float4* xm, int n, bool pdl_ok, cudaStream_t s);
// Same for F32/F16/BF16/FP8 W, float activations [n][kpad] (kpad = roundup(n_cols, 16), zero
// padded; or x itself when W's rows carry no padding). fp8_hw: FP8 E4M3 converted by the hardware
// (only where DeviceInfo::use_fp8()).
void launch_matvec_float(const DeviceMatrix& w, const float* xs, int64_t kpad, int n, float* y, int64_t ldy,
                         bool fp8_hw, bool accumulate, bool pdl_ok, cudaStream_t s);

// --- prompt path and embedding (dequant.cu) ---
// Rows [row0, row0 + n_rows) of a block-quantized or FP8 W -> F16 out [n_rows][ldo] (FP8 with its
// scales applied). ldo % 8 == 0, ldo >= n_cols.
void launch_dequant_f16(const DeviceMatrix& w, int64_t row0, int64_t n_rows, void* out, int64_t ldo, cudaStream_t s);
// x [n][ldx] float -> out [n][ldo] F16 (or BF16), zero beyond k.
void launch_convert_act(const float* x, int64_t ldx, int n, int64_t k, void* out, int64_t ldo, bool bf16,
                        cudaStream_t s);
// launch_convert_act to F16, and y[t * ldy + r] = 0 for t < n, r < y_rows in the same launch (the
// zeroed output of an accumulating product: one launch instead of a conversion and a memset).
void launch_convert_act_zero(const float* x, int64_t ldx, int n, int64_t k, __half* out, int64_t ldo,
                             float* y, int64_t ldy, int64_t y_rows, cudaStream_t s);
// *amax = max |x| (amax zeroed by the caller on the same stream).
void launch_act_amax(const float* x, int64_t ldx, int n, int64_t k, float* amax, cudaStream_t s);
// out [n][ldo] E4M3 = x / scale, scale = amax / 448 (1 when amax is 0), written to *scale_out.
void launch_quantize_act_fp8(const float* x, int64_t ldx, int n, int64_t k, const float* amax, uint8_t* out,
                             int64_t ldo, float* scale_out, cudaStream_t s);
// Per token row t: out [n][ldo] E4M3 = x / scales[t], scales[t] = amax(row t) / 448 (1 when the
// row is 0), zero beyond k. One block per row.
void launch_quantize_act_fp8_rows(const float* x, int64_t ldx, int n, int64_t k, uint8_t* out, int64_t ldo,
                                  float* scales, cudaStream_t s);
// y[t * ldy + r] *= scales[r / block_rows] (* *extra when extra is not null) for t < n, r < n_rows.
void launch_scale_rows(float* y, int64_t ldy, int n, int64_t n_rows, const float* scales, int64_t block_rows,
                       const float* extra, cudaStream_t s);
// y[t * ldy + r] = float(src[t * lds + r]) * (row_scales ? row_scales[(row0 + r) / block_rows] : 1)
// for t < n, r < n_rows; src BF16 (a cuBLASLt output tile of rows row0 ..).
void launch_store_rows_bf16(const void* src, int64_t lds, int n, int64_t n_rows, float* y, int64_t ldy,
                            const float* row_scales, int64_t block_rows, int64_t row0, cudaStream_t s);
// out[i * n_cols + c] = W[rows[i], c] * scale, bit-exact with dequantize_row (times FP8 scales).
void launch_get_rows(const DeviceMatrix& w, const int32_t* rows, int n, float scale, float* out, cudaStream_t s);

}  // namespace duet::cuda::kernels
