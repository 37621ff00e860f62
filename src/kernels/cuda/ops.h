// The element-wise and small CUDA kernels of the forward pass: RMSNorm, residual adds, biases,
// scaling, RoPE, gated activations, KV-cache writes and greedy argmax. Each launch_*() runs on the
// given stream, never allocates and never synchronises (graph-capturable). All tensors are device
// memory, float32 row-major unless stated. Memory-bound: expect >= 70% of HBM bandwidth on large
// inputs; at decode sizes they are launch-latency bound (hence CUDA graphs).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"

namespace duet::cuda {

// y[r * ldy + i] = x[r * ldx + i] / sqrt(mean_i(x^2) + eps) * w[i], i < n; w may be null. Also the
// per-head q/k norms (n_rows = n_tokens * n_heads, n = head_dim). y may equal x.
// pdl: launch programmatically (MatmulContext::pdl(); the decode chain on sm_90).
void launch_rms_norm(const float* x, int64_t ldx, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
                     int64_t ldy, cudaStream_t stream, bool pdl = false);

// x[i] += y[i], i < n.
void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream);

// x[r * ld + i] += b[i], i < n, r < n_rows.
void launch_add_bias(float* x, int64_t ld, const float* b, int64_t n, int64_t n_rows, cudaStream_t stream);

// x[i] *= s, i < n.
void launch_scale(float* x, float s, int64_t n, cudaStream_t stream);

// Rotates n_heads heads of head_dim floats of each of n_tokens rows (row t at x + t * ld, heads
// head_dim apart) by the angles of positions[t] (device int32): theta_i = pos * base^(-2i/head_dim)
// / freq_factors[i] (freq_factors: device, head_dim / 2 floats, or null). Styles as in
// kernels/cpu/rope.h.
void launch_rope(float* x, int64_t ld, int n_tokens, int n_heads, int head_dim, const int32_t* positions, float base,
                 const float* freq_factors, RopeStyle style, cudaStream_t stream);

// out[i] = act(gate[i]) * up[i], i < n (out may equal gate). GELU is the tanh form; kF16Table rounds
// input and result to F16 as llama.cpp's table does.
void launch_gated_activation(Activation act, GeluMode gelu, const float* gate, const float* up, float* out, int64_t n,
                             cudaStream_t stream);

// Writes the K and V rows of n_tokens tokens (row t at k + t * ldk, n_kv_heads * head_dim floats)
// into the paged cache at (batch.seq_ids[t], batch.positions[t]), converting to the cache's type.
void launch_kv_write(const PagedKvCache& kv, const AttentionBatch& batch, const float* k, int64_t ldk, const float* v,
                     int64_t ldv, cudaStream_t stream);

// out[r] = index of the largest of logits[r * vocab .. + vocab) (lowest index on ties), r < n_rows.
// One block per row, or on sm_90 a cluster of 8 blocks per row (ArgmaxPath; same result).
void launch_argmax(const float* logits, int n_rows, int64_t vocab, int32_t* out, cudaStream_t stream);
// Which argmax kernel launch_argmax runs. kAuto: kCluster where the device runs it (sm_90 code)
// unless DUET_ARGMAX_CLUSTER=0 (read once per process), else kBlock. set_argmax_path is a
// process-wide override for tests and benchmarks (kBlock forces the one-block kernel; kAuto or
// kCluster restores the default); argmax_path says what the next launch on this device runs.
enum class ArgmaxPath { kAuto, kBlock, kCluster };
void set_argmax_path(ArgmaxPath path);
ArgmaxPath argmax_path();

// --- Additions (kernels/cuda owns these; the launchers above keep their signatures). ---

// Fused residual add and RMSNorm: x[r * n + i] += res[r * n + i], then y[r * n + i] =
// rms_norm(x row) (as launch_rms_norm, w may be null). Rows contiguous (ld = n). y may not alias
// x or res. Saves one pass over x per layer half (the forward's `x += o; xn = rms(x)`).
void launch_add_rms_norm(float* x, const float* res, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
                         cudaStream_t stream, bool pdl = false);

// y[r * ldy + i] = x[rows[r] * ldx + i], i < n, r < n_rows (rows: device int32, e.g. the output
// rows of a batch before the final norm and the vocabulary projection).
void launch_gather_rows(const float* x, int64_t ldx, const int32_t* rows, int n_rows, int64_t n, float* y, int64_t ldy,
                        cudaStream_t stream);

// --- Fused decode producers (write the int8 activations of the block-quantized decode kernels,
// kernels/cuda/quant_kernels.cuh launch_quantize_act_q8's format, so the product does not
// quantize again). pdl: launch programmatically (MatmulContext::pdl()). ---

// xq[r * n + i], xm[r * n / 32 + i / 32] = q8(rms_norm(x row r) * w) for r < n_rows (n % 32 == 0,
// n <= 8192):
// the values launch_rms_norm writes, quantized as launch_quantize_act_q8 would. One block per row.
constexpr int64_t kRmsNormQ8MaxCols = 8192;
void launch_rms_norm_q8(const float* x, int64_t ldx, const float* w, float eps, int64_t n, int64_t n_rows,
                        int8_t* xq, float4* xm, bool pdl, cudaStream_t stream);
// For a native FP8 prompt product (MatmulContext::fp8_rows_input): with res, first x[r * n + i] +=
// res[r * n + i] (as launch_add_rms_norm; res may be null), then row r of rms_norm(x) * w as E4M3
// at q + r * ldq (zero from n to ldq) scaled by scales[r] = amax(row) / 448: byte for byte what
// kernels::launch_quantize_act_fp8_rows makes of launch_add_rms_norm's output (with res) or of
// launch_rms_norm's (without res, for n > 1024, where it sums in the same block kernel; shorter
// rows it sums per warp, so a scale may differ in its last bit), without writing and re-reading
// the floats. Rows of x contiguous (ld = n), n <= kRmsNormFp8MaxCols; one block per row.
constexpr int64_t kRmsNormFp8MaxCols = 4096;
void launch_rms_norm_fp8_rows(float* x, const float* res, const float* w, float eps, int64_t n, int64_t n_rows,
                              uint8_t* q, int64_t ldq, float* scales, cudaStream_t stream, bool pdl = false);
// For a batched-decode product on the quantized tensor-core kernel (MatmulContext::f16_input):
// with res, first x += res (as launch_rms_norm_fp8_rows), then row r of rms_norm(x) * w as F16 at
// h + r * ldh (zero from n to ldh): what kernels::launch_convert_act makes of launch_rms_norm's
// (or launch_add_rms_norm's) output, bit for bit, without the float rows; and, in the same launch,
// z[r * ldz + c] = 0 for c < z_rows (the product's output, which the kernel adds into). Rows of x
// contiguous (ld = n); 1024 < n <= kRmsNormF16MaxCols and n_rows < 256 (the block shape of those
// launchers, so the same sums); one block per row.
constexpr int64_t kRmsNormF16MaxCols = 8192;
void launch_rms_norm_f16(float* x, const float* res, const float* w, float eps, int64_t n, int64_t n_rows,
                         __half* h, int64_t ldh, float* z, int64_t ldz, int64_t z_rows, cudaStream_t stream,
                         bool pdl = false);

// Gated activation over rows: out[r * ldo + i] = act(gate[r * ldi + i]) * up[r * ldi + i], i < n,
// r < n_rows (gate and up may be the two halves of one fused [gate | up] product row). The same
// values as launch_gated_activation over the contiguous n_rows * n elements.
// pdl: launched programmatically (sm_90; the kernel waits for its producer before reading).
void launch_gated_activation_rows(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                  int64_t n_rows, int64_t n, float* out, int64_t ldo, cudaStream_t stream,
                                  bool pdl = false);
// The same values quantized for a block-quantized decode product: xq [n_rows][n], xm [n_rows][n / 32]
// (n % 32 == 0). One warp per 32 values.
void launch_gated_activation_q8(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                int64_t n_rows, int64_t n, int8_t* xq, float4* xm, bool pdl, cudaStream_t stream);
// The same values as F16 for a batched-decode product on the quantized tensor-core kernel
// (MatmulContext::f16_input): row r at out + r * ldo, rounded as kernels::launch_convert_act
// rounds launch_gated_activation_rows' output (columns n .. ldo untouched: that kernel reads n).
// pdl: launched programmatically (sm_90; kernels/cuda/common.cuh launch_maybe_pdl).
void launch_gated_activation_f16(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                 int64_t n_rows, int64_t n, __half* out, int64_t ldo, cudaStream_t stream,
                                 bool pdl = false);

// The same values as E4M3 for a native FP8 prompt product (MatmulContext::fp8_rows_input): row r
// at out + r * ldo (zero from n to ldo) scaled by scales[r] = amax(row) / 448, byte for byte what
// kernels::launch_quantize_act_fp8_rows makes of launch_gated_activation_rows' output. One block
// per row; n <= kGatedFp8MaxCols.
constexpr int64_t kGatedFp8MaxCols = 20480;
void launch_gated_activation_fp8_rows(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                      int64_t n_rows, int64_t n, uint8_t* out, int64_t ldo, float* scales,
                                      cudaStream_t stream);
// Everything between the q/k/v products and attention, in one launch: per token t and head,
// bias add, per-head RMSNorm (q_norm / k_norm), RoPE at positions[t] (launch_rope's angles),
// Q pre-scaling, then Q written to q_out (heads q_head_stride floats apart, columns past head_dim
// untouched) and K, V written to the paged cache at (seq_ids[t], positions[t]) (launch_kv_write's
// slot and rounding; cache columns past head_dim, when the cache's head_dim is larger, set to 0).
// The same values, op for op, as launch_add_bias + launch_rms_norm + launch_rope + launch_scale +
// launch_kv_write. One warp per (token, head); head_dim even, <= 256.
struct QkvRopeParams {
  const float* q = nullptr;  // rows of n_heads * head_dim at q + t * ldq
  const float* k = nullptr;  // rows of n_kv_heads * head_dim at k + t * ldk
  const float* v = nullptr;
  int64_t ldq = 0, ldk = 0, ldv = 0;
  const float* bq = nullptr;  // biases (null: none)
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;  // per-head RMSNorm weights, head_dim floats (null: no norm)
  const float* k_norm = nullptr;
  float eps = 0.0f;
  int n_heads = 0;
  int head_dim = 0;
  float rope_base = 10000.0f;
  const float* freq_factors = nullptr;  // head_dim / 2 floats, or null
  RopeStyle rope_style = RopeStyle::kNeox;
  float q_scale = 1.0f;  // multiplies Q after RoPE (1: none)
  float* q_out = nullptr;
  int64_t ldq_out = 0;
  int q_head_stride = 0;
  // A side job: bytes [l2_prefetch, l2_prefetch + l2_prefetch_bytes) of device memory requested
  // into L2 at the start of the launch, before its wait (the weights of a later product, which that
  // product could not request early itself). Null: none.
  const void* l2_prefetch = nullptr;
  int64_t l2_prefetch_bytes = 0;
};
void launch_qkv_rope_cache(const QkvRopeParams& p, const PagedKvCache& kv, const AttentionBatch& batch, bool pdl,
                           cudaStream_t stream);

// Per-row sampling parameters (device array, one per logits row), the GPU's SamplingConfig.
struct SamplingRow {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest index on ties)
  int32_t top_k = 0;         // <= 0 or >= vocab: no top-k cut; 1: greedy
  float top_p = 1.0f;        // >= 1: no nucleus cut
  uint32_t reserved = 0;
  uint64_t seed = 0;     // the request's seed
  uint64_t counter = 0;  // the draw's index in the request (e.g. tokens generated so far)
};

// out[r] = a token drawn from softmax(logits[r] / temperature) restricted by top-k then top-p
// (HF / vLLM order, as the CPU Sampler), r < n_rows. One thread block per row; no scratch.
// Semantics against the CPU Sampler (kernels/cpu/sampling.h):
//   - greedy (temperature <= 0 or top_k == 1): identical (argmax, lowest index on ties);
//   - the kept set is the same except on exact ties at the cut: top-k keeps every token whose
//     scaled logit equals the k-th largest (the CPU keeps the lower indices), and top-p keeps
//     every token tied with the last one needed to reach mass top_p;
//   - the draw follows the same distribution over the kept set but is not the same random
//     stream: u = hash(seed, counter) in [0, 1), and tokens are walked in index order (the CPU
//     walks them by decreasing probability with a mt19937_64). Same (seed, counter, logits) ->
//     same token, on any GPU and any batch composition.
// Cost: greedy is one pass over the row; top-k and top-p each add ~32 bisection passes over the
// row (L2-resident at vocab <= 256k), i.e. tens of microseconds per step at most.
void launch_sample(const float* logits, int n_rows, int64_t vocab, const SamplingRow* rows, int32_t* out,
                   cudaStream_t stream);

}  // namespace duet::cuda
