// The element-wise and small CUDA kernels of the forward pass: RMSNorm, residual adds, biases,
// scaling, RoPE, gated activations, KV-cache writes and greedy argmax. Each launch_*() runs on the
// given stream, never allocates and never synchronises (graph-capturable). All tensors are device
// memory, float32 row-major unless stated. Memory-bound: expect >= 70% of HBM bandwidth on large
// inputs; at decode sizes they are launch-latency bound (hence CUDA graphs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"

namespace duet::cuda {

// y[r * ldy + i] = x[r * ldx + i] / sqrt(mean_i(x^2) + eps) * w[i], i < n; w may be null. Also the
// per-head q/k norms (n_rows = n_tokens * n_heads, n = head_dim). y may equal x.
void launch_rms_norm(const float* x, int64_t ldx, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
                     int64_t ldy, cudaStream_t stream);

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
void launch_argmax(const float* logits, int n_rows, int64_t vocab, int32_t* out, cudaStream_t stream);

}  // namespace duet::cuda
