// Paged attention on the GPU over the block tables of the CPU engine (kernels/cpu/attention.h,
// kvcache/): K and V of one layer live in blocks of kv_block_size slots laid out
// [block][kv_head][slot][head_dim], F16 (F32 for checks). Causal, grouped-query (n_heads a
// multiple of n_kv_heads), head_dim 64/128/256, optional sliding window. Two variants chosen by
// the launcher: prompt (flash-attention style tiles of query rows of one sequence; an sm_80+
// mma.sync kernel for F16 caches, see AttentionPromptPath) and decode (one query row per
// sequence, long contexts split across thread blocks and merged).
// Runs on the caller's stream; needs no allocation beyond the AttentionBatch's scratch.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace duet::cuda {

struct PagedKvCache {  // one layer
  DType dtype = DType::kF16;  // kF16 or kF32
  void* k = nullptr;
  void* v = nullptr;
  int kv_block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// The tokens of one forward batch, device arrays shared by every layer. Tokens of a sequence are
// contiguous in the batch and in increasing position order (the scheduler's contract). Token t
// attends positions [max(0, pos - window + 1) or 0, positions[t]] of sequence seq_ids[t], whose
// block ids are block_tables[seq_ids[t] * max_blocks ...].
struct AttentionBatch {
  int n_tokens = 0;
  int n_seqs = 0;
  const int32_t* positions = nullptr;     // [n_tokens]
  const int32_t* seq_ids = nullptr;       // [n_tokens], < n_seqs
  const int32_t* block_tables = nullptr;  // [n_seqs][max_blocks]
  int max_blocks = 0;
  // Host-known bounds for grid sizing (an upper bound is fine: extra blocks exit at once).
  int max_seq_tokens = 0;  // most tokens of one sequence in this batch
  int max_kv_len = 0;      // largest positions[t] + 1
  // Per sequence: first token index in the batch and token count (device, [n_seqs] each).
  const int32_t* seq_token_begin = nullptr;
  const int32_t* seq_n_tokens = nullptr;
  // Scratch for split-context partial results (device); attention_scratch_bytes() says how much.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

// Which kernel runs the prompt rows (sequences with >= 2 tokens in the batch) of an F16 cache.
// kMma: flash attention on mma.sync / ldmatrix / cp.async (sm_80+). kGeneric: the sm_70 kernels
// (WMMA at head_dim <= 128, FP32 SIMT at 256). kAuto picks kMma on sm_80+ devices unless
// DUET_KERNELS=generic or DUET_ATTN_WMMA=1 is set (both read once per process); sm_70 always
// runs kGeneric. F32 caches always take the FP32 SIMT kernel; decode rows are not affected.
enum class AttentionPromptPath { kAuto, kGeneric, kMma };

// Process-wide override for tests and benchmarks (kAuto restores the default). Forcing kMma on a
// device without it aborts at the next launch.
void set_attention_prompt_path(AttentionPromptPath path);

// The path (kGeneric or kMma) the next launch with an F16 cache takes on the current device.
AttentionPromptPath attention_prompt_path();

// Scratch bytes the launcher needs for a batch with these bounds.
size_t attention_scratch_bytes(int n_tokens, int n_heads, int head_dim, int max_kv_len);

// Decode batches can hand the o product its input ready-made: the attention output of each token
// as int8 per 32 values plus one float4 per 32 (the format of launch_quantize_act_q8,
// kernels/cuda/quant_kernels.cuh; q [n_tokens][n_heads * head_dim], m [n_tokens][n_heads *
// head_dim / 32]), what MatmulContext::q8_input() holds for matmul_q8().
struct AttentionQ8Out {
  int8_t* q = nullptr;
  float4* m = nullptr;
};

// Decode batches can also hand a tensor-core o product its F16 input (MatmulContext::f16_input):
// the output rows rounded to F16 at h[t * ld + col] (col < n_heads * head_dim).
struct AttentionF16Out {
  __half* h = nullptr;
  int64_t ld = 0;
};

// out[t * ldo + h * head_dim + d] = sum_j softmax_j(scale * q_t,h . k_j) v_j[d] over the allowed
// keys j of token t, for query head h (kv head h / (n_heads / n_kv_heads)). q: float32 rows of
// n_heads * head_dim at q + t * ldq (already roped and pre-scaled where the model does that).
// sliding_window: 0 for full attention. The token's own K/V must already be written.
// q8 (q8.q set): also the output as AttentionQ8Out, for batches of decode rows only
// (max_seq_tokens <= 1, n_tokens <= 8); written by the tensor-core decode kernel for tokens whose
// context is one piece and by the merge for split contexts (no kernel of its own), else (SIMT
// decode kernel) by the merge or a quantizer launched after the decode kernel. out's contents
// are then unspecified.
// h16 (h16.h set; decode batches only, not with q8): out's rows also as F16, written by the
// kernel that writes each row of out (decode kernel, or the merge for split contexts).
void launch_attention(const PagedKvCache& kv, const AttentionBatch& batch, const float* q, int64_t ldq, int n_heads,
                      float scale, int sliding_window, float* out, int64_t ldo, cudaStream_t stream,
                      AttentionQ8Out q8 = {}, AttentionF16Out h16 = {});

}  // namespace duet::cuda
