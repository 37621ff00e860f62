// Attention of query tokens over a paged KV cache (F16 or F32), one (token, KV head) per call:
// the group of query heads sharing that KV head read each key once.
// Numerics reproduce llama.cpp's default CPU path (no flash attention, F16 cache) bit for bit:
// the query and the softmax weights are rounded to F16, scores and weights are float32 with the
// exponential of ggml_v_expf and the softmax sum in 8-lane chunks accumulated in double, and the
// two dot products use the lane order of the kernel llama.cpp would run: tinyBLAS (one 8-lane
// FMA chain) when the token's sequence has several tokens in the batch (prefill), ggml_vec_dot_f16
// (four 8-lane chains) when it has one (decode). Lanes follow absolute key positions, so the
// block layout of the cache never changes a result. Single-threaded per call; the model splits
// (token, kv head) pairs over the ThreadPool. Cost per call: n_keys * head_dim * (group + 1)
// MACs; at decode the K/V reads dominate (memory-bound).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace duet {

// One layer's K and V storage: blocks of kv_block_size slots, laid out
// [block][kv_head][slot][head_dim] (a head's keys of one block are contiguous).
struct PagedKvLayer {
  DType dtype = DType::kF16;  // kF16 or kF32
  void* k = nullptr;
  void* v = nullptr;
  int64_t kv_block_size = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;

  size_t elem_bytes() const { return dtype == DType::kF16 ? 2 : 4; }
  size_t slot_offset(int32_t block, int64_t head, int64_t slot) const {  // in elements
    return ((static_cast<size_t>(block) * n_kv_heads + head) * kv_block_size + slot) * head_dim;
  }
};

// Which of llama.cpp's kernels' summation order to follow (see above).
enum class AttnOrder { kBatch, kSingle };

// Stores one token's K and V rows (n_kv_heads * head_dim floats each) at `pos` of a sequence.
void kv_write(const PagedKvLayer& kv, const int32_t* block_table, int64_t pos, const float* k, const float* v);

// Floats of scratch attention_paged needs.
size_t attention_scratch_floats(int64_t head_dim, int64_t group, int64_t n_keys);

// q: the group's query heads (group * head_dim floats, contiguous); attends key positions
// [k_begin, k_end) of kv head `kv_head` with scores q.k * scale; out: group * head_dim floats.
// head_dim must be a multiple of 8.
void attention_paged(const PagedKvLayer& kv, const int32_t* block_table, int64_t kv_head, int64_t k_begin,
                     int64_t k_end, const float* q, int64_t group, float scale, AttnOrder order, float* out,
                     float* scratch);

// ggml's vectorized expf (ggml_v_expf, AVX2 flavour), lane by lane: within 1.5 ulp of expf.
float ggml_expf(float x);

namespace detail {
// SIMD pieces of attention_paged (attention_avx2.cpp); false when the level lacks them.
struct AttnKernels {
  // Scores of n keys (rows `stride` elements apart) against one query row.
  void (*scores)(AttnOrder order, int64_t hd, const void* k, size_t stride, int64_t n, const void* q, float scale,
                 float* out);
  // acc[lane(j)] += p[j] * v_j for n keys starting at absolute position j0; lanes = 8 or 32.
  void (*accumulate)(int64_t hd, const void* v, size_t stride, int64_t n, int64_t j0, int lanes, const float* p,
                     float* acc);
  void (*exp_sub)(const float* x, float max, float* y, int64_t n);  // y = ggml_expf(x - max)
  void (*normalize)(float* p, int64_t n, float inv, bool round_f16);  // p *= inv, then F16-rounded
  // out[d] = the lane tree of llama.cpp's kernel over acc[lane * hd + d], lanes = 8 or 32.
  void (*reduce_lanes)(const float* acc, int lanes, int64_t hd, float* out);
};
const AttnKernels* attn_kernels_avx2_f16();
const AttnKernels* attn_kernels_avx2_f32();
}  // namespace detail

}  // namespace duet
