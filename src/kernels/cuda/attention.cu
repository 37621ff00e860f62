// Paged attention on the GPU (launch_attention; contract and cache layout in attention.h).
// Kernels (all but one use nothing newer than sm_70: WMMA 16x16x16 F16 tensor cores, warp
// shuffles, FP32 SIMT, so they are also the generic path; shared memory per block fits a V100's
// 96 KB):
//   - prompt: flash-attention tiles (a tile of query rows of one sequence and one query head
//     against 64-key tiles, online softmax), for sequences with several tokens in the batch;
//     F16 caches on sm_80+: attention_prompt_mma_kernel (mma.sync m16n8k16, ldmatrix, cp.async;
//     code guarded by __CUDA_ARCH__ >= 800, chosen at run time by use_mma_prompt); otherwise
//     WMMA tensor cores for F16 caches at head_dim <= 128, FP32 SIMT for the rest;
//   - decode: one query token per block with all query heads of a KV-head group together so K/V
//     are read once per group, the context optionally split over several blocks; tensor cores
//     (group <= 16, F16, head_dim <= 128; batches of 9-64 tokens at short contexts take a whole
//     context per block, 4 tiles at a time, see decode_groups) or FP32 SIMT;
//   - merge: combines the split partial results (scratch from AttentionBatch::scratch).
// Short splits (DUET_ATTN_SPLIT_SHORT; "0" restores the previous split policy and plain merge
// launch, read once; the tile-load batching below stays either way): decode splits used to start
// at 256 keys per piece, so one sequence at ~128 keys (qwen2-7b: 28/4 heads, head_dim 128) ran on
// 4 blocks, 4 of 132 H200 SMs, measured at 7.2 us per layer (ncu). Now small
// grids (n_tokens x n_heads < 1024) also cut each token's keys on the device into up to
// 1024 / (n_tokens x n_heads) pieces of >= 32 keys (split_plan, token_split_len): that token gets
// 4 pieces of 32 keys = 16 blocks of one tile each. The grid is still sized from host bounds only
// (graph-capturable; a replay at a longer context re-cuts the keys on the device). The merge is
// launched programmatically on sm_90 (DUET_ATTN_MERGE_PDL=0 turns only that off), so its launch
// overlaps the decode kernel. The tensor-core decode kernel also issues all K/V loads of a tile
// before storing them and fetches the next tile's block-table entries early. Measured on the
// H200 (2026-11-30, qwen2-7b Q4_K_M, CUDA graphs): the one-sequence decode step at ~128 keys 2.56
// ms against 2.69 ms with DUET_ATTN_SPLIT_SHORT=0 (~4.7 us per layer); decode + merge of that
// shape 9.0 us eager, launches included (duet_gpu_attention bench). Batches of more than 8
// tokens aim at 4096 rows instead (32 sequences at ~128 keys: 4 pieces of 32 keys); long contexts keep the old pieces or get
// shorter ones (one sequence at 4096 keys: 32 pieces of 128 keys instead of 16 of 256).
// The tensor-core kernels round q and the softmax weights to F16 (as the CPU reference and
// llama.cpp do); the SIMT kernels keep them in F32 (F32 caches are for exact checks).
// The launcher picks by batch shape: max_seq_tokens <= 1 runs decode only; otherwise the prompt
// kernel takes sequences with >= 2 tokens and the decode kernel those with one (a mixed batch).
// Runs on the caller's stream; no allocation; no synchronisation (graph-capturable; the
// one-time cudaFuncSetAttribute for large shared memory and the one-time sm_80+ query of
// use_mma_prompt happen on the first launch per device, which must not be captured).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mma.h>

#include "base/check.h"
#include "base/env.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_kernels.cuh"

namespace duet::cuda {
namespace {

// ---- Split policy (shared by attention_scratch_bytes and the launcher) ----
constexpr int kMaxSplits = 128;            // default cap on a token's pieces
constexpr int kMaxSplitsLimit = 256;       // the most DUET_ATTN_MAX_SPLITS allows (the merge's arrays)
constexpr int kSplitMinKeys = 256;         // below this a split is not worth its merge
constexpr int64_t kSplitTargetRows = 8192;  // (token, head, split) rows that fill an H200 well
// Short splits (DUET_ATTN_SPLIT_SHORT, on unless "0"): see split_plan.
constexpr int kShortMinKeys = 32;            // the smallest short split (one warp's key tile)
constexpr int64_t kShortTargetRows = 1024;   // (token, head, split) rows wanted from short splits
constexpr int64_t kBatchShortTargetRows = 4096;  // the same for batches of > kDecodeMaxTokens tokens

// Long-context split policy knobs (benchmark A/B, read once per process): DUET_ATTN_SPLIT_MIN
// (keys, 32-4096; default kSplitMinKeys) the shortest long-context piece, DUET_ATTN_MAX_SPLITS
// (1-kMaxSplitsLimit; default kMaxSplits) the most pieces a token gets.
int split_min_keys() {
  static const int v = [] {
    const int e = env_int("DUET_ATTN_SPLIT_MIN", 32, 4096);
    return e > 0 ? e : kSplitMinKeys;
  }();
  return v;
}
int max_splits() {
  static const int v = [] {
    const int e = env_int("DUET_ATTN_MAX_SPLITS", 1, kMaxSplitsLimit);
    return e > 0 ? e : kMaxSplits;
  }();
  return v;
}

int decode_splits(int n_tokens, int n_heads, int max_kv_len) {
  const int64_t by_keys = detail::ceil_div(std::max(max_kv_len, 1), split_min_keys());
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(n_tokens) * n_heads);
  const int64_t by_rows = std::max<int64_t>(1, kSplitTargetRows / rows);
  return static_cast<int>(std::clamp<int64_t>(std::min(by_keys, by_rows), 1, max_splits()));
}

// DUET_ATTN_SPLIT_SHORT=0 restores the split policy without short splits and the plain merge
// launch (read once per process; A/B knob).
bool split_short_enabled() {
  static const bool v = [] {
    const char* e = std::getenv("DUET_ATTN_SPLIT_SHORT");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return v;
}

// How the decode grid splits contexts. `grid`: blocks along z (and the partials' stride), from
// host bounds only, so a captured graph keeps it while contexts grow up to max_kv_len.
// `short_splits`: 0, or the number of pieces a token's keys are cut into on the device (token_split_len): at
// least kShortMinKeys keys each, never longer than the long-context split of split_len keys.
// Today's policy (decode_splits) only splits at >= 256 keys per piece, so one sequence at 128
// keys ran on n_kv_heads blocks (4 of 132 SMs at qwen2-7b); short splits aim at
// short_target_rows (token, head, piece) rows, e.g. 36 pieces for one token x 28 heads, 4 for
// 32 tokens x 28 heads (a batch target of 4096 rows), none from 147 tokens x 28 heads up.
struct SplitPlan {
  int grid = 1;
  int short_splits = 0;
};

// The short-split target for a batch of n_tokens: kShortTargetRows for the 1-8 token batches
// of the matrix-vector decode path, kBatchShortTargetRows above (32 sequences x 28 heads then
// get 4 pieces of 32 keys each at ~128 keys instead of one 128-key block: measured on the H200,
// qwen2-7b Q4_K_M, 32-sequence step 3.558 / 3.571 ms against 3.733 / 3.712 at 1024 and 3.91 at
// 2048, session 10). DUET_ATTN_SHORT_ROWS forces one value for every batch (benchmark knob,
// read once).
int64_t short_target_rows(int n_tokens) {
  static const int64_t forced = [] {
    const char* e = std::getenv("DUET_ATTN_SHORT_ROWS");
    const long long r = e && *e ? std::atoll(e) : 0;
    return r > 0 ? static_cast<int64_t>(r) : int64_t{0};
  }();
  if (forced > 0) return forced;
  return n_tokens <= kernels::kDecodeMaxTokens ? kShortTargetRows : kBatchShortTargetRows;
}

SplitPlan split_plan(int n_tokens, int n_heads, int max_kv_len) {
  SplitPlan sp;
  sp.grid = decode_splits(n_tokens, n_heads, max_kv_len);
  if (!split_short_enabled()) return sp;
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(n_tokens) * n_heads);
  const int64_t want = std::clamp<int64_t>(short_target_rows(n_tokens) / rows, 1, max_splits());
  if (want <= 1) return sp;
  sp.short_splits = static_cast<int>(want);
  // A token of n <= max_kv_len keys gets at most min(want, ceil(n / kShortMinKeys)) short pieces.
  const int64_t by_keys = detail::ceil_div(std::max(max_kv_len, 1), kShortMinKeys);
  sp.grid = std::max<int>(sp.grid, static_cast<int>(std::min(want, by_keys)));
  return sp;
}

struct AttnArgs {
  const void* k;
  const void* v;
  int kv_block_size;
  int n_kv_heads;
  const int32_t* positions;
  const int32_t* seq_ids;
  const int32_t* block_tables;
  int max_blocks;
  const int32_t* seq_token_begin;
  const int32_t* seq_n_tokens;
  bool only_single;  // decode/merge: skip tokens whose sequence has several tokens in the batch
  bool early_kv;     // tensor-core decode: metadata and older keys read before pdl_wait (use_early_kv)
  bool decode_q8;    // the grouped decode kernel wrote the int8 rows of one-piece tokens (merge: skip them)
  bool merge_wide;   // merge: more than kMergeBatch pieces by merge_wide (use_merge_wide), else merge_many
  const float* q;
  int64_t ldq;
  int n_heads;
  int group;  // query heads per KV head
  int hb;     // decode: query heads per block (a divisor of group, <= kMaxHeads)
  float scale;
  int window;  // 0: full attention
  float* out;
  int64_t ldo;
  float* part;       // decode partials: [n_tokens][n_heads][max_splits][head_dim + 2] (o, m, l)
  int max_splits;    // the partials' stride and the grid's z extent
  int split_len;     // keys per long-context split (multiple of 32)
  int short_splits;  // 0, or SplitPlan::short_splits (token_split_len)
  int8_t* q8;        // merge: AttentionQ8Out, or null
  float4* q8m;
  __half* h16;       // decode and merge: AttentionF16Out rows (ld16 apart), or null
  int64_t ld16;
};

// Output value v of column col (head * head_dim + d) of token t: out, and the F16 copy where asked.
__device__ __forceinline__ void store_out(const AttnArgs& a, int t, int64_t col, float v) {
  a.out[static_cast<int64_t>(t) * a.ldo + col] = v;
  if (a.h16 != nullptr) a.h16[static_cast<int64_t>(t) * a.ld16 + col] = __float2half_rn(v);
}

// Keys per split of a token with n_keys allowed keys (a multiple of 32): split_len, or with short
// splits the shorter of split_len and n_keys cut into short_splits pieces of >= kShortMinKeys.
// Either way ceil(n_keys / result) <= max_splits (see split_plan). Decode and merge kernels both
// derive a token's pieces from this, so they agree without host knowledge of the context.
// Split `split`'s partial of query head `head` of token t, column d: the unnormalised output o,
// and (column 0) the row's running maximum m and weight sum l, for the merge.
template <int D>
__device__ __forceinline__ void store_partial(const AttnArgs& a, int t, int head, int split, int d, float o, float m,
                                              float l) {
  float* pp = a.part + ((static_cast<int64_t>(t) * a.n_heads + head) * a.max_splits + split) * (D + 2);
  pp[d] = o;
  if (d == 0) {
    pp[D] = m;
    pp[D + 1] = l;
  }
}

// The keys per piece of n_keys cut by split_len and short_splits (see token_split_len); also the
// launcher's longest piece at the grid's bound (use_decode_mma).
__host__ __device__ __forceinline__ int piece_len(int split_len, int short_splits, int n_keys) {
  int len = split_len;
  if (short_splits > 0) {
    const int piece = ((n_keys + short_splits - 1) / short_splits + 31) & ~31;
    const int at_least = piece > kShortMinKeys ? piece : kShortMinKeys;
    len = at_least < len ? at_least : len;
  }
  return len;
}
__device__ __forceinline__ int token_split_len(const AttnArgs& a, int n_keys) {
  return piece_len(a.split_len, a.short_splits, n_keys);
}

__device__ __forceinline__ int window_begin(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

// ---- Decode ----

// W 32-bit words from 4 * W byte-aligned global memory into registers (vector loads; register
// arrays are only indexed by constants so they stay in registers).
template <int W>
__device__ __forceinline__ void load_words(const void* p, uint32_t* w) {
  if constexpr (W == 1) {
    w[0] = __ldg(static_cast<const unsigned int*>(p));
  } else if constexpr (W == 2) {
    const uint2 v = __ldg(static_cast<const uint2*>(p));
    w[0] = v.x, w[1] = v.y;
  } else {
    static_assert(W % 4 == 0, "W is 1, 2 or a multiple of 4");
#pragma unroll
    for (int i = 0; i < W / 4; ++i) {
      const uint4 v = __ldg(static_cast<const uint4*>(p) + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  }
}

// The elements held in W words as floats (2 per word for F16, 1 for F32).
template <typename T, int W>
__device__ __forceinline__ void words_to_float(const uint32_t* w, float* out) {
#pragma unroll
  for (int i = 0; i < W; ++i) {
    if constexpr (sizeof(T) == 2) {
      out[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu)));
      out[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
    } else {
      out[i] = __uint_as_float(w[i]);
    }
  }
}

constexpr int kDecWarps = 4;
constexpr int kMaxHeads = 8;

// Grid (n_tokens, n_heads / hb, splits), 128 threads. Block = one token, hb query heads sharing
// KV head kvh, keys [k0, k1) of the token's allowed range (split `blockIdx.z` of token_split_len
// keys).
// Warp w takes 32-key tiles w, w+4, ...: lane j scores key j against the hb query heads (its K
// row read with 16-byte loads, q broadcast from shared memory), the warp updates per-head
// online-softmax state, then lanes split head_dim for the weighted sum of V rows. Warps are
// merged through shared memory at the end; a single split writes `out`, several write partials.
// q: float, pre-multiplied by scale here; K/V: T = __half or float. Meant to be memory-bound, but
// measured on an H200 (F16, head_dim 128, group 7) at 1.2-1.3 TB/s (28-31% of HBM bandwidth): the
// FP32 FMAs (head_dim x group per key) plus shared loads take as many issue slots as the bytes
// take time, and the per-warp load batches leave latency exposed. Used where the tensor-core
// decode kernel does not apply (F32 caches, head_dim 256, groups > 16).
template <int D, typename T>
__global__ void __launch_bounds__(kDecWarps * 32, D == 256 ? 3 : 4) attention_decode_kernel(AttnArgs a) {
  // Lets the next kernel (the merge, or the o product or its quantizer: programmatic on sm_90)
  // start while this one finishes; waits for the K/V writes and q (qkv_rope_cache) before any
  // read when launched programmatically (use_decode_pdl), a no-op otherwise.
  detail::pdl_trigger();
  detail::pdl_wait();
  constexpr int kDpl = D / 32;             // V dims per lane
  constexpr int kVec = 16 / sizeof(T);     // K elements per 16-byte load
  constexpr int kKChunks = D / kVec;       // 16-byte loads per K row
  constexpr int kKBatch = kKChunks < 8 ? kKChunks : (D == 256 ? 4 : 8);  // fits 128 registers
  constexpr int kVWords = kDpl * sizeof(T) / 4;            // a lane's V slice of one key, in words
  constexpr int kVBatch = kVWords <= 2 ? 8 : 16 / kVWords;   // V keys per batch: <= 16 registers of data
  __shared__ __align__(16) float qs[kMaxHeads][D];
  __shared__ float pw[kDecWarps][kMaxHeads][32];
  __shared__ float wm[kDecWarps][kMaxHeads], wl[kDecWarps][kMaxHeads];
  __shared__ float wacc[kDecWarps][kMaxHeads][D];

  const int t = blockIdx.x;
  const int seq = a.seq_ids[t];
  if (a.only_single && a.seq_n_tokens[seq] != 1) return;
  const int pos = a.positions[t];
  const int kb = window_begin(pos, a.window), ke = pos + 1;
  const int split = blockIdx.z;
  const int split_len = token_split_len(a, ke - kb);
  const int k0 = kb + split * split_len;
  if (k0 >= ke) return;
  const int k1 = min(ke, k0 + split_len);
  const int n_splits = (ke - kb + split_len - 1) / split_len;
  const int hb = a.hb, h0 = blockIdx.y * hb, kvh = h0 / a.group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  for (int i = tid; i < hb * D; i += kDecWarps * 32) {
    const int h = i / D, d = i - h * D;
    qs[h][d] = a.q[static_cast<int64_t>(t) * a.ldq + static_cast<int64_t>(h0 + h) * D + d] * a.scale;
  }
  __syncthreads();

  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
  const T* kc = static_cast<const T*>(a.k);
  const T* vc = static_cast<const T*>(a.v);
  float m[kMaxHeads], l[kMaxHeads], acc[kMaxHeads][kDpl];
#pragma unroll
  for (int h = 0; h < kMaxHeads; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kDpl; ++e) acc[h][e] = 0.0f;
  }

  for (int base = k0 + warp * 32; base < k1; base += 32 * kDecWarps) {  // warp-uniform
    const int p = base + lane;
    const bool valid = p < k1;
    int64_t off = 0;
    if (valid) {
      const int32_t blk = table[p / a.kv_block_size];
      off = ((static_cast<int64_t>(blk) * a.n_kv_heads + kvh) * a.kv_block_size + p % a.kv_block_size) * D;
    }
    float s[kMaxHeads];
#pragma unroll
    for (int h = 0; h < kMaxHeads; ++h) s[h] = 0.0f;
    if (valid) {
      // The row in batches of kKBatch 16-byte loads, all issued before their first use: the
      // kernel is latency-bound unless many loads are in flight per lane.
      const T* kr = kc + off;
#pragma unroll
      for (int c0 = 0; c0 < kKChunks; c0 += kKBatch) {
        uint32_t raw[kKBatch][4];
#pragma unroll
        for (int c = 0; c < kKBatch; ++c) load_words<4>(kr + (c0 + c) * kVec, raw[c]);
#pragma unroll
        for (int c = 0; c < kKBatch; ++c) {
          float kf[kVec];
          words_to_float<T, 4>(raw[c], kf);
          const int d = (c0 + c) * kVec;
#pragma unroll
          for (int h = 0; h < kMaxHeads; ++h) {
            if (h < hb) {
#pragma unroll
              for (int e = 0; e < kVec; e += 4) {
                const float4 qv = *reinterpret_cast<const float4*>(&qs[h][d + e]);
                s[h] = fmaf(qv.x, kf[e], s[h]);
                s[h] = fmaf(qv.y, kf[e + 1], s[h]);
                s[h] = fmaf(qv.z, kf[e + 2], s[h]);
                s[h] = fmaf(qv.w, kf[e + 3], s[h]);
              }
            }
          }
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kMaxHeads; ++h) {
      if (h < hb) {
        const float sv = valid ? s[h] : -INFINITY;
        const float mnew = fmaxf(m[h], detail::warp_max(sv));  // finite: lane 0 is always valid
        const float pv = valid ? expf(sv - mnew) : 0.0f;
        const float alpha = expf(m[h] - mnew);  // 0 on the first tile (m = -inf)
        l[h] = l[h] * alpha + detail::warp_sum(pv);
#pragma unroll
        for (int e = 0; e < kDpl; ++e) acc[h][e] *= alpha;
        m[h] = mnew;
        pw[warp][h][lane] = pv;
      }
    }
    __syncwarp();
    const int nv = min(32, k1 - base);
    // V rows in batches of kVBatch keys, loads first (as for K). Only real keys are read:
    // unwritten cache slots may hold NaN bits, and 0 * NaN would poison the sum.
    for (int j0 = 0; j0 < nv; j0 += kVBatch) {
      uint32_t raw[kVBatch][kVWords];
#pragma unroll
      for (int u = 0; u < kVBatch; ++u) {
        const int64_t offj = __shfl_sync(detail::kFullMask, off, (j0 + u) & 31);
        if (j0 + u < nv) load_words<kVWords>(vc + offj + lane * kDpl, raw[u]);
      }
#pragma unroll
      for (int u = 0; u < kVBatch; ++u) {
        if (j0 + u < nv) {
          float vf[kDpl];
          words_to_float<T, kVWords>(raw[u], vf);
#pragma unroll
          for (int h = 0; h < kMaxHeads; ++h) {
            if (h < hb) {
              const float w = pw[warp][h][j0 + u];
#pragma unroll
              for (int e = 0; e < kDpl; ++e) acc[h][e] = fmaf(w, vf[e], acc[h][e]);
            }
          }
        }
      }
    }
    __syncwarp();
  }

#pragma unroll
  for (int h = 0; h < kMaxHeads; ++h) {
    if (h < hb) {
      if (lane == 0) {
        wm[warp][h] = m[h];
        wl[warp][h] = l[h];
      }
#pragma unroll
      for (int e = 0; e < kDpl; ++e) wacc[warp][h][lane * kDpl + e] = acc[h][e];
    }
  }
  __syncthreads();
  for (int i = tid; i < hb * D; i += kDecWarps * 32) {
    const int h = i / D, d = i - h * D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) mx = fmaxf(mx, wm[w][h]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) {
      const float f = wm[w][h] == -INFINITY ? 0.0f : expf(wm[w][h] - mx);  // a warp may have had no keys
      L += wl[w][h] * f;
      O += wacc[w][h][d] * f;
    }
    const int head = h0 + h;
    if (n_splits == 1) {
      store_out(a, t, static_cast<int64_t>(head) * D + d, O / L);
    } else {
      store_partial<D>(a, t, head, split, d, O, mx, L);
    }
  }
}

// ---- Decode, tensor cores (F16 caches, head_dim 64 / 128, group <= 16) ----
constexpr int kDtThreads = 128;
constexpr int kDtKeys = 64;  // keys per tile

template <int D>
struct DtShape {
  static constexpr int kRow = D + 8;        // halves; q, K and V rows
  static constexpr int kSRow = kDtKeys + 4;  // floats
  static constexpr int kPRow = kDtKeys + 8;  // halves
  static constexpr int kORow = D + 4;        // floats
  static constexpr size_t kQBytes = size_t{16} * kRow * 2;
  static constexpr size_t kKvBytes = size_t{kDtKeys} * kRow * 2;
  static constexpr size_t kSBytes = size_t{16} * kSRow * 4;
  static constexpr size_t kPBytes = size_t{16} * kPRow * 2;
  static constexpr size_t kOBytes = size_t{16} * kORow * 4;
  static constexpr size_t kOOffset = 2 * kKvBytes + kSBytes + kPBytes;  // O's rows in a group's buffers
  static constexpr size_t kGroupBytes = kOOffset + kOBytes;                // one group's buffers (K, V, S, P, O)
  static constexpr size_t smem_bytes(int groups) { return kQBytes + groups * kGroupBytes; }
  static_assert(kQBytes % 32 == 0 && kKvBytes % 32 == 0 && kSBytes % 32 == 0 && kPBytes % 32 == 0 &&
                    kGroupBytes % 32 == 0,
                "alignment");
};

// A decode block's piece of its token's keys: [k0, k1) of split blockIdx.z; skip: the block has
// nothing to do (a key range past the token's last piece, or a multi-token sequence's token in
// a mixed batch, which the prompt kernel takes).
struct DecodePiece {
  int t, seq, pos, k0, k1, n_splits;
  bool skip;
};
__device__ __forceinline__ DecodePiece decode_piece(const AttnArgs& a) {
  DecodePiece pc;
  pc.t = blockIdx.x;
  pc.seq = a.seq_ids[pc.t];
  pc.pos = a.positions[pc.t];
  const int kb = window_begin(pc.pos, a.window), ke = pc.pos + 1;
  const int split_len = token_split_len(a, ke - kb);
  pc.k0 = kb + static_cast<int>(blockIdx.z) * split_len;
  pc.k1 = min(ke, pc.k0 + split_len);
  pc.n_splits = (ke - kb + split_len - 1) / split_len;
  pc.skip = (a.only_single && a.seq_n_tokens[pc.seq] != 1) || pc.k0 >= ke;
  return pc;
}

// Element offset of key p of KV head kvh in the cache, through the sequence's block table.
template <int D>
__device__ __forceinline__ int64_t key_offset(const AttnArgs& a, const int32_t* table, int kvh, int p) {
  const int32_t blk = table[p / a.kv_block_size];
  return ((static_cast<int64_t>(blk) * a.n_kv_heads + kvh) * a.kv_block_size + p % a.kv_block_size) * D;
}

// The offset of key tile0 + lt for tile-loading thread lt of a piece ending at k1 (-1 past it, or
// for lt >= kDtKeys). The tensor-core decode kernels fetch the next tile's offsets while the
// current tile loads, and the first tile's before q is read, so the block-table reads do not add a
// memory round trip per tile.
template <int D>
__device__ __forceinline__ int64_t tile_key_offset(const AttnArgs& a, const int32_t* table, int kvh, int k1,
                                                   int tile0, int lt) {
  const int p = tile0 + lt;
  if (lt >= kDtKeys || p >= k1) return -1;
  return key_offset<D>(a, table, kvh, p);
}

// q's rows of query heads h0 .. h0 + group - 1 of token t into shared memory as F16 (rows of D + 8
// halves), times qscale (the score scale, or scale * log2(e) for base-2 scores; 16 rows, zero
// past the group), by threads tid of n.
template <int D>
__device__ __forceinline__ void stage_q(const AttnArgs& a, int t, int h0, __half* qs, int tid, int n, float qscale) {
  using S = DtShape<D>;
  for (int i = tid; i < 16 * (D / 4); i += n) {
    const int r = i / (D / 4), c4 = i - r * (D / 4);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < a.group)
      v = *reinterpret_cast<const float4*>(a.q + static_cast<int64_t>(t) * a.ldq + static_cast<int64_t>(h0 + r) * D +
                                           4 * c4);
    __half2* dst = reinterpret_cast<__half2*>(&qs[r * S::kRow + 4 * c4]);
    dst[0] = __floats2half2_rn(v.x * qscale, v.y * qscale);
    dst[1] = __floats2half2_rn(v.z * qscale, v.w * qscale);
  }
}

// K and V of the 64-key tile at tile0 into shared memory rows (ks, vs; kRow halves apart) by the
// tile's 128 threads (thread lt), from the element offsets koff (-1: past the piece, zero-filled
// without a load). Every load is issued before the first store (kIters x 2 16-byte loads per
// thread, 64 registers at head_dim 128): one memory round trip per tile, not one per iteration of
// a rolled loop; mid() runs while they are in flight. Before the producer is waited for
// (!waited, early_kv) the key at pos is left zero: stage_pos_kv fills it after the wait.
template <int D, typename Mid>
__device__ __forceinline__ void stage_tile_kv(const __half* kc, const __half* vc, const int64_t* koff, __half* ks,
                                              __half* vs, int tile0, int pos, bool waited, int lt, Mid mid) {
  using S = DtShape<D>;
  constexpr int kChunks = D / 8;
  constexpr int kIters = kDtKeys * kChunks / kDtThreads;
  static_assert(kDtKeys * kChunks % kDtThreads == 0, "whole iterations");
  uint4 kv4[kIters], vv4[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = lt + it * kDtThreads;
    const int c = i / kChunks, c8 = i - c * kChunks;
    const int64_t o = koff[c];
    kv4[it] = make_uint4(0, 0, 0, 0);
    vv4[it] = make_uint4(0, 0, 0, 0);
    if (o >= 0 && (waited || tile0 + c != pos)) {  // before the wait: older keys only
      kv4[it] = __ldg(reinterpret_cast<const uint4*>(kc + o) + c8);
      vv4[it] = __ldg(reinterpret_cast<const uint4*>(vc + o) + c8);
    }
  }
  mid();
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = lt + it * kDtThreads;
    const int c = i / kChunks, c8 = i - c * kChunks;
    *reinterpret_cast<uint4*>(&ks[c * S::kRow + 8 * c8]) = kv4[it];
    *reinterpret_cast<uint4*>(&vs[c * S::kRow + 8 * c8]) = vv4[it];
  }
}

// The key at pos of the tile staged before the wait (written by the producer): each chunk by the
// thread that stored its zeros in stage_tile_kv (no two writers of one address).
template <int D>
__device__ __forceinline__ void stage_pos_kv(const __half* kc, const __half* vc, const int64_t* koff, __half* ks,
                                             __half* vs, int tile0, int pos, int lt) {
  using S = DtShape<D>;
  constexpr int kChunks = D / 8;
  constexpr int kIters = kDtKeys * kChunks / kDtThreads;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = lt + it * kDtThreads;
    const int c = i / kChunks, c8 = i - c * kChunks;
    const int64_t o = koff[c];
    if (o >= 0 && tile0 + c == pos) {
      *reinterpret_cast<uint4*>(&ks[c * S::kRow + 8 * c8]) = *(reinterpret_cast<const uint4*>(kc + o) + c8);
      *reinterpret_cast<uint4*>(&vs[c * S::kRow + 8 * c8]) = *(reinterpret_cast<const uint4*>(vc + o) + c8);
    }
  }
}

// One 64-key tile of the tensor-core decode kernels, once q, K and V are in shared memory and
// visible to the tile's 128 threads (thread lt, warp = lt / 32; `sync` is their barrier): scores
// on tensor cores, the online softmax update of (m, l) per row (F16 weights, F32 statistics), the
// rescale of the F32 output rows in shared memory and O += P V. Ends with a barrier, so the
// caller may overwrite the tile's buffers.
template <int D, typename Sync>
__device__ __forceinline__ void decode_tile(const __half* qs, const __half* ks, const __half* vs, float* ss, __half* ps,
                                            float* os, float* row_alpha, int tile0, int k1, int lt, float& m, float& l,
                                            Sync sync) {
  namespace wmma = nvcuda::wmma;
  using S = DtShape<D>;
  const int warp = lt >> 5;
  const int my_row = lt >> 3, my_part = lt & 7;  // softmax: 8 threads per row, 8 columns each
  {  // Scores of keys 16 warp .. + 15 for the 16 rows.
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, qs + kk, S::kRow);
      wmma::load_matrix_sync(fb, ks + 16 * warp * S::kRow + kk, S::kRow);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(ss + 16 * warp, acc, S::kSRow, wmma::mem_row_major);
  }
  sync();
  {  // Online softmax, row my_row, columns 8 my_part .. + 7.
    const float* srow = ss + my_row * S::kSRow + 8 * my_part;
    const int key0 = tile0 + 8 * my_part;
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < 8; ++c)
      if (key0 + c < k1) mx = fmaxf(mx, srow[c]);
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, o));
    const float mnew = fmaxf(m, mx);  // finite: every tile has at least one key
    float sum = 0.0f;
    __half* prow = ps + my_row * S::kPRow + 8 * my_part;
#pragma unroll
    for (int c = 0; c < 8; c += 2) {
      const float e0 = key0 + c < k1 ? expf(srow[c] - mnew) : 0.0f;
      const float e1 = key0 + c + 1 < k1 ? expf(srow[c + 1] - mnew) : 0.0f;
      const __half2 h = __floats2half2_rn(e0, e1);
      *reinterpret_cast<__half2*>(&prow[c]) = h;
      const float2 hf = __half22float2(h);  // sum the weights as rounded, as they are applied
      sum += hf.x + hf.y;
    }
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(detail::kFullMask, sum, o);
    const float alpha = expf(m - mnew);  // 0 on the first tile
    l = l * alpha + sum;
    m = mnew;
    if (my_part == 0) row_alpha[my_row] = alpha;
  }
  sync();
  for (int i = lt; i < 16 * D; i += kDtThreads) {
    const int r = i / D, d = i - r * D;
    os[r * S::kORow + d] *= row_alpha[r];
  }
  sync();
#pragma unroll
  for (int dd = 16 * warp; dd < D; dd += 16 * (kDtThreads / 32)) {  // O[:, dd..dd+15] += P V[:, dd..]
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, os + dd, S::kORow, wmma::mem_row_major);
#pragma unroll
    for (int kk = 0; kk < kDtKeys; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
      wmma::load_matrix_sync(fa, ps + kk, S::kPRow);
      wmma::load_matrix_sync(fb, vs + kk * S::kRow + dd, S::kRow);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(os + dd, acc, S::kORow, wmma::mem_row_major);
  }
  sync();  // before the next tile overwrites koff, K, V, the scores and O
}

// Grid (n_tokens, n_kv_heads, splits), 128 threads. Block = one token, the `group` query heads of
// KV head blockIdx.y as the 16 rows of WMMA tiles (rows >= group are zero padding), keys [k0, k1)
// of split blockIdx.z (token_split_len keys each) in 64-key tiles. Per tile all threads load K
// and V together (16-byte loads, all issued before the first is stored, 32 KB in flight per block
// at head_dim 128, so the kernel is bandwidth- not latency-bound), warp w
// computes scores of keys 16 w.. on tensor cores, 8 threads per row run the online softmax (F16
// weights, F32 statistics), the F32 output rows in shared memory are rescaled, and warps add P V
// for their 16-column slices of head_dim. Output or split partials as attention_decode_kernel.
// q and the weights are rounded to F16 (as the CPU reference does). Should be memory-bound; measured
// on an H200 (head_dim 128, group 7): 1.44 TB/s at 32 x 1024 keys, 1.59 TB/s at 32 x 4096, 1.11
// TB/s at 1 x 32768 (26-37% of 4.3 TB/s). On sm_80+ pieces of >= kDecodeMmaMinKeys keys go to
// attention_decode_mma_kernel instead (a cp.async ring, scores and output in registers).
// Launch bounds cap registers at 128 for 4 blocks per SM (what the shared memory allows): the
// batched tile loads would otherwise take 165 at head_dim 128; ptxas spills 4 bytes.
// a.early_kv (launched programmatically, batches of 1-8 tokens): the only things the producer
// (qkv_rope_cache) writes that this kernel reads are q and each token's own key and value (slot
// pos); the batch metadata and block tables were uploaded before the step, and every older key
// was written by an earlier step. So the block reads the metadata, the block table and its first
// tile's older keys before pdl_wait, overlapping them with the producer, and q and the key at pos
// after it.
// kSmallGrid: the same kernel as a separate function, for grids of at most two blocks an SM,
// which asks for a smaller shared-memory carve-out (launch_decode_tc).
template <int D, bool kSmallGrid = false>
__global__ void __launch_bounds__(kDtThreads, 4) attention_decode_tc_kernel(AttnArgs a) {
  // Lets the next kernel (the merge, or the o product or its quantizer: programmatic on sm_90)
  // start while this one finishes; waits for the K/V writes and q (qkv_rope_cache) before any
  // read when launched programmatically (use_decode_pdl), a no-op otherwise.
  detail::pdl_trigger();
  bool waited = !a.early_kv;  // uniform
  if (waited) detail::pdl_wait();
  using S = DtShape<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* qs = reinterpret_cast<__half*>(smem);
  __half* ks = reinterpret_cast<__half*>(smem + S::kQBytes);
  __half* vs = reinterpret_cast<__half*>(smem + S::kQBytes + S::kKvBytes);
  float* ss = reinterpret_cast<float*>(smem + S::kQBytes + 2 * S::kKvBytes);
  __half* ps = reinterpret_cast<__half*>(smem + S::kQBytes + 2 * S::kKvBytes + S::kSBytes);
  float* os = reinterpret_cast<float*>(smem + S::kQBytes + S::kOOffset);
  __shared__ int64_t koff[kDtKeys];
  __shared__ float row_alpha[16], row_m[16], row_l[16];

  const DecodePiece pc = decode_piece(a);
  if (pc.skip) {
    if (!waited) detail::pdl_wait();  // pdl_wait's rule: every block waits before it exits
    return;
  }
  const int t = pc.t, pos = pc.pos, k0 = pc.k0, k1 = pc.k1, n_splits = pc.n_splits, split = blockIdx.z;
  const int32_t* table = a.block_tables + static_cast<int64_t>(pc.seq) * a.max_blocks;
  const int kvh = blockIdx.y, group = a.group, h0 = kvh * group;
  const int tid = threadIdx.x;
  int64_t next_off = tile_key_offset<D>(a, table, kvh, k1, k0, tid);

  // q's rows into shared memory as F16 (zero past the group); after the wait.
  auto load_q = [&]() { stage_q<D>(a, t, h0, qs, tid, kDtThreads, a.scale); };
  if (waited) load_q();
  for (int i = tid; i < 16 * S::kORow; i += kDtThreads) os[i] = 0.0f;
  const __half* kc = static_cast<const __half*>(a.k);
  const __half* vc = static_cast<const __half*>(a.v);
  const int my_row = tid >> 3, my_part = tid & 7;  // softmax: 8 threads per row, 8 columns each
  float m = -INFINITY, l = 0.0f;

  for (int tile0 = k0; tile0 < k1; tile0 += kDtKeys) {
    if (tid < kDtKeys) koff[tid] = next_off;
    __syncthreads();
    stage_tile_kv<D>(kc, vc, koff, ks, vs, tile0, pos, waited, tid,
                     [&] { next_off = tile_key_offset<D>(a, table, kvh, k1, tile0 + kDtKeys, tid); });  // in flight with the loads
    if (!waited) {  // first tile, early_kv: now q and the key at pos (the producer's writes)
      detail::pdl_wait();
      waited = true;
      load_q();
      stage_pos_kv<D>(kc, vc, koff, ks, vs, tile0, pos, tid);
    }
    __syncthreads();
    decode_tile<D>(qs, ks, vs, ss, ps, os, row_alpha, tile0, k1, tid, m, l, [] { __syncthreads(); });
  }
  if (my_part == 0) {
    row_m[my_row] = m;
    row_l[my_row] = l;
  }
  __syncthreads();
  for (int i = tid; i < group * D; i += kDtThreads) {
    const int r = i / D, d = i - r * D;
    const float O = os[r * S::kORow + d];
    const int head = h0 + r;
    if (n_splits == 1) {
      store_out(a, t, static_cast<int64_t>(head) * D + d, O / row_l[r]);
    } else {
      store_partial<D>(a, t, head, split, d, O, row_m[r], row_l[r]);
    }
  }
}

// The same for batches whose tokens each take their whole context in one block (decode_groups):
// 128 G threads (G = 2 or 4 groups of 4 warps). Group gi takes tiles gi, gi + G, ... of the
// block's keys with buffers and barriers (named barrier 1 + gi) of its own, as the kernel above
// does with all of them; at the end the groups' (m, l, O) rows are merged in shared memory, and
// each warp takes whole 32-column groups of the output: the rows (out / h16, or the int8 rows
// directly: a 32-column group is one quantization group) for a token whose context is one piece,
// else the split's partial for the merge. One block of 512 threads an SM at G = 4 (~200 KB of
// shared memory at head_dim 128); registers capped at 128. Measured on the H200 (qwen2-7b
// Q4_K_M, 32 sequences at 128 keys): the step 3.435-3.458 ms against 3.534-3.547 with one group
// and 4 pieces of 32 keys and a merge; for one sequence it was slower (tg128 463 against 476-480
// tok/s: four blocks cannot pull a context as fast as 32 short pieces).
template <int D, int G>
__global__ void __launch_bounds__(kDtThreads * G, 4 / G) attention_decode_grouped_kernel(AttnArgs a) {
  // Lets the next kernel (the merge, or the o product or its quantizer: programmatic on sm_90)
  // start while this one finishes; waits for the K/V writes and q (qkv_rope_cache) before reading
  // them when launched programmatically (use_decode_pdl), a no-op otherwise.
  detail::pdl_trigger();
  bool waited = !a.early_kv;  // uniform
  if (waited) detail::pdl_wait();
  using S = DtShape<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, gi = tid / kDtThreads, lt = tid - gi * kDtThreads;
  __half* qs = reinterpret_cast<__half*>(smem);
  unsigned char* gs = smem + S::kQBytes + gi * S::kGroupBytes;  // this group's buffers
  __half* ks = reinterpret_cast<__half*>(gs);
  __half* vs = reinterpret_cast<__half*>(gs + S::kKvBytes);
  float* ss = reinterpret_cast<float*>(gs + 2 * S::kKvBytes);
  __half* ps = reinterpret_cast<__half*>(gs + 2 * S::kKvBytes + S::kSBytes);
  float* os = reinterpret_cast<float*>(gs + S::kOOffset);
  __shared__ int64_t koff_all[G][kDtKeys];
  __shared__ float row_alpha_all[G][16], row_m[G][16], row_l[G][16];
  int64_t* koff = koff_all[gi];
  float* row_alpha = row_alpha_all[gi];
  static_assert(G == 2 || G == 4, "G = 1 is attention_decode_tc_kernel");
  // Barrier of this group's 128 threads (named barrier 1 + gi; __syncthreads is barrier 0).
  auto group_sync = [&]() { asm volatile("bar.sync %0, %1;" ::"r"(1 + gi), "n"(kDtThreads) : "memory"); };

  const DecodePiece pc = decode_piece(a);
  if (pc.skip) {
    if (!waited) detail::pdl_wait();  // pdl_wait's rule: every block waits before it exits
    return;
  }
  const int t = pc.t, pos = pc.pos, k0 = pc.k0, k1 = pc.k1, n_splits = pc.n_splits, split = blockIdx.z;
  const int32_t* table = a.block_tables + static_cast<int64_t>(pc.seq) * a.max_blocks;
  const int kvh = blockIdx.y, group = a.group, h0 = kvh * group;
  int64_t next_off = tile_key_offset<D>(a, table, kvh, k1, k0 + gi * kDtKeys, lt);

  // q's rows into shared memory as F16 (zero past the group), by every thread; after the wait.
  auto load_q = [&]() { stage_q<D>(a, t, h0, qs, tid, kDtThreads * G, a.scale); };
  if (waited) load_q();
  for (int i = lt; i < 16 * S::kORow; i += kDtThreads) os[i] = 0.0f;
  const __half* kc = static_cast<const __half*>(a.k);
  const __half* vc = static_cast<const __half*>(a.v);
  const int my_row = lt >> 3, my_part = lt & 7;  // softmax: 8 threads per row, 8 columns each
  float m = -INFINITY, l = 0.0f;

  // Group gi takes tiles gi, gi + G, ... of the piece. Every group runs the first iteration,
  // whose __syncthreads publishes q (and, with early_kv, follows the wait) CTA-wide.
  for (int tile0 = k0 + gi * kDtKeys, first = 1;; tile0 += G * kDtKeys, first = 0) {
    const bool active = tile0 < k1;  // uniform per group
    if (!first && !active) break;
    if (active) {
      if (lt < kDtKeys) koff[lt] = next_off;
      group_sync();
      stage_tile_kv<D>(kc, vc, koff, ks, vs, tile0, pos, waited, lt,
                       [&] { next_off = tile_key_offset<D>(a, table, kvh, k1, tile0 + G * kDtKeys, lt); });  // in flight with the loads
    }
    if (first) {
      if (!waited) {  // early_kv: now q and the key at pos (the producer's writes)
        detail::pdl_wait();
        waited = true;
        load_q();
        if (active) stage_pos_kv<D>(kc, vc, koff, ks, vs, tile0, pos, lt);
      }
      __syncthreads();
      if (!active) break;
    } else {
      group_sync();
    }
    decode_tile<D>(qs, ks, vs, ss, ps, os, row_alpha, tile0, k1, lt, m, l, group_sync);
  }
  if (my_part == 0) {  // groups without a tile: m = -inf, l = 0, O = 0
    row_m[gi][my_row] = m;
    row_l[gi][my_row] = l;
  }
  __syncthreads();
  // The groups' rows merged, then per warp one 32-column group of one head at a time: the output
  // (n_splits == 1; the int8 rows directly where asked: a 32-column group is one quantization
  // group) or the split's partial.
  constexpr int kColGroups = D / 32;
  const int lane = tid & 31;
  for (int g = tid >> 5; g < group * kColGroups; g += G * (kDtThreads / 32)) {  // warp-uniform
    const int r = g / kColGroups, d = (g - r * kColGroups) * 32 + lane;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < G; ++j) mx = fmaxf(mx, row_m[j][r]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const float f = expf(row_m[j][r] - mx);  // a group without a tile: e^-inf = 0
      L += row_l[j][r] * f;
      O += reinterpret_cast<const float*>(smem + S::kQBytes + j * S::kGroupBytes + S::kOOffset)[r * S::kORow + d] * f;
    }
    const int head = h0 + r;
    const int64_t col = static_cast<int64_t>(head) * D + d;
    if (n_splits == 1) {
      const float v = O / L;
      if (a.q8 != nullptr) {
        const int64_t k = static_cast<int64_t>(a.n_heads) * D;  // the q8 row length
        detail::quantize_group_q8(v, lane, a.q8 + t * k + (col & ~int64_t{31}), a.q8m + t * (k / 32) + (col >> 5));
      } else {
        store_out(a, t, col, v);
      }
    } else {
      store_partial<D>(a, t, head, split, d, O, mx, L);
    }
  }
}

// Grid (n_tokens, n_heads), head_dim threads: out = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M)
// over the token's splits (tokens with one split were written by the decode kernel). May be
// launched programmatically right after the decode kernel: pdl_wait precedes every read. Reads
// (head_dim + 2) floats per split: negligible next to the K/V bytes. With a.q8 set it writes the
// AttentionQ8Out rows instead, every token's (a one-split token's row read back from out): each
// warp's 32 dims are one quantization group (head_dim and head offsets are multiples of 32), so
// the o product's quantizer needs no launch of its own.
constexpr int kMergeBatch = 8;
// Piece s0 + j's maximum, weight sum and output column d (j < kMergeBatch; pieces past n_splits
// get -inf, 0, 0), every load issued before the first use: one L2 round trip a batch.
__device__ __forceinline__ void load_pieces(const float* pp, int s0, int n_splits, int head_dim, int d,
                                            float (&pm)[kMergeBatch], float (&pl)[kMergeBatch],
                                            float (&po)[kMergeBatch]) {
#pragma unroll
  for (int j = 0; j < kMergeBatch; ++j) {
    const bool ok = s0 + j < n_splits;
    const float* ps = pp + (s0 + j) * (head_dim + 2);
    pm[j] = ok ? ps[head_dim] : -INFINITY;
    pl[j] = ok ? ps[head_dim + 1] : 0.0f;
    po[j] = ok ? ps[d] : 0.0f;
  }
}

// The merged output column d of a token's n_splits pieces at pp (attention_merge_kernel's
// partials): the maximum over all pieces first, then the sums over the pieces in order. The first
// batch's m, l and o are loaded together and kept, so up to kMergeBatch pieces (short contexts:
// one-token decode cuts ~128 keys into 4) cost one L2 round trip, not two (qwen2-7b Q4_K_M tg128
// 494.9 / 495.1 tok/s against 494.1 / 492.7, BF16 level, H200, perf.md session 36); later
// batches add a round trip each for their maxima and one for their sums.
__device__ __forceinline__ float merge_pieces(const float* pp, int n_splits, int head_dim, int d) {
  float pm[kMergeBatch], pl[kMergeBatch], po[kMergeBatch];
  load_pieces(pp, 0, n_splits, head_dim, d, pm, pl, po);
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kMergeBatch; ++j) mx = fmaxf(mx, pm[j]);
  for (int s0 = kMergeBatch; s0 < n_splits; s0 += kMergeBatch) {
    float m[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j)
      m[j] = s0 + j < n_splits ? pp[(s0 + j) * (head_dim + 2) + head_dim] : -INFINITY;
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) mx = fmaxf(mx, m[j]);
  }
  float L = 0.0f, O = 0.0f;
  for (int s0 = 0; s0 < n_splits; s0 += kMergeBatch) {
    if (s0 > 0) load_pieces(pp, s0, n_splits, head_dim, d, pm, pl, po);
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j)
      if (s0 + j < n_splits) {
        const float f = expf(pm[j] - mx);
        L += pl[j] * f;
        O += po[j] * f;
      }
  }
  return O / L;
}

// The same for more than kMergeBatch pieces (long contexts), by the whole block (head_dim threads,
// every one calls it; n_splits <= kMaxSplitsLimit): the pieces' m and l go to shared memory in one
// L2 round trip (thread s loads piece s), every thread takes the maximum and the weights
// e^(m_s - M) from there, and each thread's column of the pieces' o is loaded kMergeBatch pieces
// at a time with the next batch's loads issued before this batch is summed. The same sums in the
// same order as merge_pieces, so the same result; merge_pieces took two dependent L2 round trips
// per batch of 8 (17 at 65 pieces).
__device__ __forceinline__ float merge_many(const float* pp, int n_splits, int head_dim, int d, float* smem) {
  float* sm = smem;
  float* sl = smem + kMaxSplitsLimit;
  for (int s = d; s < n_splits; s += head_dim) {
    sm[s] = pp[s * (head_dim + 2) + head_dim];
    sl[s] = pp[s * (head_dim + 2) + head_dim + 1];
  }
  float cur[kMergeBatch], nxt[kMergeBatch];  // column d of the pieces' o, this batch and the next
#pragma unroll
  for (int j = 0; j < kMergeBatch; ++j) cur[j] = j < n_splits ? pp[j * (head_dim + 2) + d] : 0.0f;
  __syncthreads();
  float mx = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, sm[s]);
  float L = 0.0f, O = 0.0f;
  for (int s0 = 0; s0 < n_splits; s0 += kMergeBatch) {
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const int s = s0 + kMergeBatch + j;
      nxt[j] = s < n_splits ? pp[s * (head_dim + 2) + d] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j)
      if (s0 + j < n_splits) {
        const float f = expf(sm[s0 + j] - mx);
        L += sl[s0 + j] * f;
        O += cur[j] * f;
      }
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) cur[j] = nxt[j];
  }
  return O / L;
}

// The same for more than kMergeBatch pieces, the pieces dealt to the block's D / 32 warps: warp w
// takes pieces w, w + W, ... kMergeBatch at a time, each lane D / 32 columns of o (float2 loads:
// a piece's row of D + 2 floats is 8-byte aligned), every load of a batch issued before the first
// use, with a running maximum and rescaled sums (flash-decoding's merge); then the warps' (M, L,
// O) are combined through shared memory (smem: kMergeSmem floats, shared with merge_many). One L2
// round trip per kMergeBatch W pieces (65 pieces at head_dim 128: 3) where merge_many takes one per
// kMergeBatch (9). Sums in another order than merge_many's, so results may differ in the last
// bits. Head_dim 64 and 128; every thread of the block calls it.
constexpr int kMergeSmem = 2 * kMaxSplitsLimit + 16;
template <int D>
__device__ __forceinline__ float merge_wide(const float* pp, int n_splits, int d, float* smem) {
  constexpr int W = D / 32, kC = D / 32;  // warps; columns a lane (kC / 2 float2 loads)
  static_assert(kC % 2 == 0 && W * D + 2 * W <= kMergeSmem, "float2 loads; the warps' sums fit");
  float* wo = smem;  // [W][D]
  float* wm = smem + W * D;
  float* wl = wm + W;
  const int lane = d & 31, w = d >> 5;
  float M = -INFINITY, L = 0.0f, O[kC];
#pragma unroll
  for (int c = 0; c < kC; ++c) O[c] = 0.0f;
  for (int s0 = w; s0 < n_splits; s0 += W * kMergeBatch) {
    float pm[kMergeBatch], pl[kMergeBatch];
    float2 po[kMergeBatch][kC / 2];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const int sp = s0 + j * W;
      const bool ok = sp < n_splits;
      const float* ps = pp + static_cast<int64_t>(ok ? sp : 0) * (D + 2);
      pm[j] = ok ? ps[D] : -INFINITY;
      pl[j] = ok ? ps[D + 1] : 0.0f;
#pragma unroll
      for (int c = 0; c < kC / 2; ++c)
        po[j][c] = ok ? *reinterpret_cast<const float2*>(ps + kC * lane + 2 * c) : make_float2(0.0f, 0.0f);
    }
    float mx = M;
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) mx = fmaxf(mx, pm[j]);  // finite: piece s0 is real
    const float r = expf(M - mx);  // 0 on the first batch
    L *= r;
#pragma unroll
    for (int c = 0; c < kC; ++c) O[c] *= r;
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const float f = expf(pm[j] - mx);  // 0 past n_splits
      L += pl[j] * f;
#pragma unroll
      for (int c = 0; c < kC / 2; ++c) {
        O[2 * c] += po[j][c].x * f;
        O[2 * c + 1] += po[j][c].y * f;
      }
    }
    M = mx;
  }
  if (lane == 0) wm[w] = M, wl[w] = L;
#pragma unroll
  for (int c = 0; c < kC; ++c) wo[w * D + kC * lane + c] = O[c];
  __syncthreads();
  float mx = -INFINITY;
#pragma unroll
  for (int v = 0; v < W; ++v) mx = fmaxf(mx, wm[v]);  // warp 0's is finite
  float Lt = 0.0f, Ot = 0.0f;
#pragma unroll
  for (int v = 0; v < W; ++v) {
    const float f = expf(wm[v] - mx);  // 0 for a warp without pieces (M = -inf, L = 0, O = 0)
    Lt += wl[v] * f;
    Ot += wo[v * D + d] * f;
  }
  return Ot / Lt;
}

__global__ void attention_merge_kernel(AttnArgs a, int head_dim) {
  // Lets the next kernel (the o product, launched programmatically on sm_90) start while this
  // one finishes; waits for the decode kernel's partials when launched programmatically.
  // With a.early_kv the batch metadata (uploaded before the step) is read before the wait.
  detail::pdl_trigger();
  if (!a.early_kv) detail::pdl_wait();
  __shared__ float msm[kMergeSmem];  // merge_many's or merge_wide's
  const int t = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  const bool skip = a.only_single && a.seq_n_tokens[a.seq_ids[t]] != 1;  // uniform per block
  const int pos = a.positions[t];
  if (a.early_kv) detail::pdl_wait();
  if (skip) return;
  const int n_keys = pos + 1 - window_begin(pos, a.window);
  const int split_len = token_split_len(a, n_keys);
  const int n_splits = (n_keys + split_len - 1) / split_len;
  const int64_t col = static_cast<int64_t>(head) * head_dim + d;
  float v;
  if (n_splits <= 1) {
    if (a.q8 == nullptr || a.decode_q8) return;
    v = a.out[static_cast<int64_t>(t) * a.ldo + col];
  } else {
    const float* pp = a.part + (static_cast<int64_t>(t) * a.n_heads + head) * a.max_splits * (head_dim + 2);
    if (n_splits <= kMergeBatch) v = merge_pieces(pp, n_splits, head_dim, d);
    else if (a.merge_wide && head_dim == 128) v = merge_wide<128>(pp, n_splits, d, msm);
    else if (a.merge_wide && head_dim == 64) v = merge_wide<64>(pp, n_splits, d, msm);
    else v = merge_many(pp, n_splits, head_dim, d, msm);
    if (a.q8 == nullptr) {
      store_out(a, t, col, v);
      return;
    }
  }
  const int64_t k = static_cast<int64_t>(a.n_heads) * head_dim;  // the q8 row length
  detail::quantize_group_q8(v, d & 31, a.q8 + t * k + (col & ~int64_t{31}), a.q8m + t * (k / 32) + (col >> 5));
}

// ---- Prompt ----
constexpr int kPromptThreads = 256;

template <int D, int TM, int TN>
struct PromptShape {
  static constexpr int kBm = 16 * TM, kBn = 16 * TN;
  static constexpr int kRow = D + 4;     // q/k/v row stride in shared memory (floats)
  static constexpr int kPRow = kBn + 4;  // softmax weight row stride
  static constexpr size_t kSmemBytes = sizeof(float) * (size_t{kBm} * kRow + size_t{kBn} * kRow + size_t{kBm} * kPRow);
};

// Loads the BN-key tile at per-key element offsets koff (-1: past the range, zero-filled) into
// rows of `dst` (kRow floats apart), converting to float. Coalesced: consecutive threads read
// consecutive 4-element groups of a key row.
template <int D, int BN, int kRow, typename T>
__device__ __forceinline__ void load_kv_tile(const T* src, const int64_t* koff, float* dst) {
  for (int i = threadIdx.x; i < BN * (D / 4); i += kPromptThreads) {
    const int c = i / (D / 4), c4 = i - c * (D / 4);
    const int64_t o = koff[c];
    float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (o >= 0) detail::load_as_float<T, 4>(src + o + 4 * c4, f);
    *reinterpret_cast<float4*>(&dst[c * kRow + 4 * c4]) = make_float4(f[0], f[1], f[2], f[3]);
  }
}

// Grid (n_heads, ceil(max_seq_tokens / BM), n_seqs), 256 threads as 16 x 16 (ty, tx).
// Block = query rows [tile * BM, +BM) of sequence blockIdx.z (sequences with < 2 tokens exit:
// the decode kernel has them) for query head blockIdx.x, against keys [first row's window begin,
// last row's position] in BN-key tiles. Thread (ty, tx) owns score rows ty + 16 i (i < TM) x
// keys tx + 16 j (j < TN), and output rows ty + 16 i x dims 4 (tx + 16 g) .. + 3 (g < D / 64),
// so the per-row softmax statistics reduce over the 16 tx lanes of a half-warp with shuffles.
// Shared memory: Q tile (pre-scaled), one K-or-V tile (K, then V into the same buffer), the
// softmax weights. Tiles run in reverse order so the longest (last) rows start first.
// FP32 FMA-bound: measured 24 TFLOP/s on an H200 (2048 causal tokens, head_dim 64 and 128).
template <int D, int TM, int TN, typename T>
__global__ void __launch_bounds__(kPromptThreads) attention_prompt_kernel(AttnArgs a) {
  using S = PromptShape<D, TM, TN>;
  constexpr int BM = S::kBm, BN = S::kBn, kRow = S::kRow, kPRow = S::kPRow, kG = D / 64;
  extern __shared__ float4 smem4[];
  float* qs = reinterpret_cast<float*>(smem4);
  float* kvs = qs + BM * kRow;
  float* ps = kvs + BN * kRow;
  __shared__ int64_t koff[BN];
  __shared__ int rpos[BM], rkb[BM];

  const int head = blockIdx.x, seq = blockIdx.z;
  const int tile = gridDim.y - 1 - blockIdx.y;
  const int n = a.seq_n_tokens[seq];
  if (n < 2) return;
  const int r0 = tile * BM;
  if (r0 >= n) return;
  const int tb = a.seq_token_begin[seq] + r0;  // first token of the tile
  const int nr = min(BM, n - r0);
  const int kvh = head / a.group;
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;

  if (tid < BM) {
    if (tid < nr) {
      const int p = a.positions[tb + tid];
      rpos[tid] = p;
      rkb[tid] = window_begin(p, a.window);
    } else {
      rpos[tid] = -1;  // no key allowed
      rkb[tid] = INT_MAX;
    }
  }
  for (int i = tid; i < BM * (D / 4); i += kPromptThreads) {
    const int r = i / (D / 4), c4 = i - r * (D / 4);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < nr) {
      v = *reinterpret_cast<const float4*>(a.q + static_cast<int64_t>(tb + r) * a.ldq + static_cast<int64_t>(head) * D + 4 * c4);
      v.x *= a.scale, v.y *= a.scale, v.z *= a.scale, v.w *= a.scale;
    }
    *reinterpret_cast<float4*>(&qs[r * kRow + 4 * c4]) = v;
  }
  __syncthreads();
  const int k_lo = rkb[0], k_hi = rpos[nr - 1] + 1;
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.seq_ids[tb]) * a.max_blocks;
  const T* kc = static_cast<const T*>(a.k);
  const T* vc = static_cast<const T*>(a.v);

  float m[TM], l[TM], acc[TM][kG][4];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int g = 0; g < kG; ++g)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][g][e] = 0.0f;
  }

  for (int k0 = k_lo; k0 < k_hi; k0 += BN) {
    if (tid < BN) {
      const int p = k0 + tid;
      int64_t o = -1;
      if (p < k_hi) {
        const int32_t blk = table[p / a.kv_block_size];
        o = ((static_cast<int64_t>(blk) * a.n_kv_heads + kvh) * a.kv_block_size + p % a.kv_block_size) * D;
      }
      koff[tid] = o;
    }
    __syncthreads();
    load_kv_tile<D, BN, kRow>(kc, koff, kvs);
    __syncthreads();

    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
      float4 qv[TM], kv4[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) qv[i] = *reinterpret_cast<const float4*>(&qs[(ty + 16 * i) * kRow + d]);
#pragma unroll
      for (int j = 0; j < TN; ++j) kv4[j] = *reinterpret_cast<const float4*>(&kvs[(tx + 16 * j) * kRow + d]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          s[i][j] = fmaf(qv[i].x, kv4[j].x, s[i][j]);
          s[i][j] = fmaf(qv[i].y, kv4[j].y, s[i][j]);
          s[i][j] = fmaf(qv[i].z, kv4[j].z, s[i][j]);
          s[i][j] = fmaf(qv[i].w, kv4[j].w, s[i][j]);
        }
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int r = ty + 16 * i;
      const int rp = rpos[r], rk = rkb[r];
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int key = k0 + tx + 16 * j;
        if (key < rk || key > rp) s[i][j] = -INFINITY;  // causal / window / past the range
        mx = fmaxf(mx, s[i][j]);
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, o));
      const float mnew = fmaxf(m[i], mx);
      const float base = mnew == -INFINITY ? 0.0f : mnew;  // a row with no key yet stays empty
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const float e = expf(s[i][j] - base);
        ps[r * kPRow + tx + 16 * j] = e;
        sum += e;
      }
#pragma unroll
      for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(detail::kFullMask, sum, o);
      const float alpha = expf(m[i] - base);
      l[i] = l[i] * alpha + sum;
      m[i] = mnew;
#pragma unroll
      for (int g = 0; g < kG; ++g)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][g][e] *= alpha;
    }
    __syncthreads();  // everyone is done with K
    load_kv_tile<D, BN, kRow>(vc, koff, kvs);
    __syncthreads();

#pragma unroll 2
    for (int c = 0; c < BN; c += 4) {
      float4 pv[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) pv[i] = *reinterpret_cast<const float4*>(&ps[(ty + 16 * i) * kPRow + c]);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int g = 0; g < kG; ++g) {
          const float4 vv = *reinterpret_cast<const float4*>(&kvs[(c + u) * kRow + 4 * (tx + 16 * g)]);
#pragma unroll
          for (int i = 0; i < TM; ++i) {
            const float w = u == 0 ? pv[i].x : u == 1 ? pv[i].y : u == 2 ? pv[i].z : pv[i].w;
            acc[i][g][0] = fmaf(w, vv.x, acc[i][g][0]);
            acc[i][g][1] = fmaf(w, vv.y, acc[i][g][1]);
            acc[i][g][2] = fmaf(w, vv.z, acc[i][g][2]);
            acc[i][g][3] = fmaf(w, vv.w, acc[i][g][3]);
          }
        }
      }
    }
    __syncthreads();  // before the next tile overwrites koff, the K/V buffer and the weights
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = ty + 16 * i;
    if (r >= nr) continue;
    const float inv = 1.0f / l[i];
    float* o = a.out + static_cast<int64_t>(tb + r) * a.ldo + static_cast<int64_t>(head) * D;
#pragma unroll
    for (int g = 0; g < kG; ++g)
      *reinterpret_cast<float4*>(o + 4 * (tx + 16 * g)) =
          make_float4(acc[i][g][0] * inv, acc[i][g][1] * inv, acc[i][g][2] * inv, acc[i][g][3] * inv);
  }
}

// ---- Prompt, tensor cores (F16 caches, head_dim 64 / 128) ----
constexpr int kTcWarps = 4;
constexpr int kTcBm = 16 * kTcWarps;  // query rows per block: 16 per warp
constexpr int kTcBn = 64;             // keys per tile

template <int D>
struct TcShape {
  static constexpr int kQRow = D + 8;         // halves; Q and K/V rows (16-byte pad against bank conflicts)
  static constexpr int kSRow = kTcBn + 4;     // floats; scores
  static constexpr int kPRow = kTcBn + 8;     // halves; softmax weights
  static constexpr int kORow = D + 4;         // floats; output accumulator
  static constexpr size_t kQBytes = size_t{kTcBm} * kQRow * 2;
  static constexpr size_t kKvBytes = size_t{kTcBn} * kQRow * 2;
  static constexpr size_t kSBytes = size_t{kTcBm} * kSRow * 4;
  static constexpr size_t kPBytes = size_t{kTcBm} * kPRow * 2;
  static constexpr size_t kOBytes = size_t{kTcBm} * kORow * 4;
  static constexpr size_t kSmemBytes = kQBytes + kKvBytes + kSBytes + kPBytes + kOBytes;
  // WMMA pointers must be 32-byte aligned: every region and every 16-row tile start is.
  static_assert(kQBytes % 32 == 0 && kKvBytes % 32 == 0 && kSBytes % 32 == 0 && kPBytes % 32 == 0, "alignment");
  static_assert(kSmemBytes <= 98304, "must fit a V100's 96 KB");
};

// Copies the 64-key F16 tile at per-key offsets koff (-1: zero rows) into dst rows of kQRow halves,
// 16 bytes per thread per step (coalesced along each key row).
template <int D>
__device__ __forceinline__ void load_kv_tile_f16(const __half* src, const int64_t* koff, __half* dst) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kTcBn * kChunks; i += kTcWarps * 32) {
    const int c = i / kChunks, c8 = i - c * kChunks;
    const int64_t o = koff[c];
    uint4 v = make_uint4(0, 0, 0, 0);
    if (o >= 0) v = __ldg(reinterpret_cast<const uint4*>(src + o) + c8);
    *reinterpret_cast<uint4*>(&dst[c * TcShape<D>::kQRow + 8 * c8]) = v;
  }
}

// Grid (n_heads, ceil(max_seq_tokens / 64), n_seqs), 128 threads = 4 warps; warp w owns query rows
// 16 w .. 16 w + 15 of the tile. Same blocking and masking as attention_prompt_kernel, with the two
// products on FP16 tensor cores through WMMA 16x16x16 (sm_70+): S = Q K^T (q pre-scaled and
// rounded to F16, F32 accumulation) into shared memory; the online softmax by the warp's lanes (two
// lanes per row) writes the weights as F16 and rescales the F32 output rows in shared memory; then
// O += P V (accumulators loaded from and stored back to shared memory). Rounding q and the weights to
// F16 is what llama.cpp's CPU path (the CPU reference) does too: error vs exact ~1e-3 relative.
// Measured on an H200, 2048 causal tokens, 28 heads: 40 TFLOP/s at head_dim 128 and 64 (the FP32
// kernel: 24). Bounded by the SIMT softmax/rescale work and shared-memory round trips of the
// output tile; attention_prompt_mma_kernel (register-resident accumulators) replaces it on sm_80+.
template <int D>
__global__ void __launch_bounds__(kTcWarps * 32) attention_prompt_tc_kernel(AttnArgs a) {
  namespace wmma = nvcuda::wmma;
  using S = TcShape<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* qs = reinterpret_cast<__half*>(smem);
  __half* kvs = reinterpret_cast<__half*>(smem + S::kQBytes);
  float* ss = reinterpret_cast<float*>(smem + S::kQBytes + S::kKvBytes);
  __half* ps = reinterpret_cast<__half*>(smem + S::kQBytes + S::kKvBytes + S::kSBytes);
  float* os = reinterpret_cast<float*>(smem + S::kQBytes + S::kKvBytes + S::kSBytes + S::kPBytes);
  __shared__ int64_t koff[kTcBn];
  __shared__ int rpos[kTcBm], rkb[kTcBm];

  const int head = blockIdx.x, seq = blockIdx.z;
  const int tile = gridDim.y - 1 - blockIdx.y;
  const int n = a.seq_n_tokens[seq];
  if (n < 2) return;
  const int r0 = tile * kTcBm;
  if (r0 >= n) return;
  const int tb = a.seq_token_begin[seq] + r0;
  const int nr = min(kTcBm, n - r0);
  const int kvh = head / a.group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  if (tid < kTcBm) {
    if (tid < nr) {
      const int p = a.positions[tb + tid];
      rpos[tid] = p;
      rkb[tid] = window_begin(p, a.window);
    } else {
      rpos[tid] = -1;
      rkb[tid] = INT_MAX;
    }
  }
  for (int i = tid; i < kTcBm * (D / 4); i += kTcWarps * 32) {
    const int r = i / (D / 4), c4 = i - r * (D / 4);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < nr) v = *reinterpret_cast<const float4*>(a.q + static_cast<int64_t>(tb + r) * a.ldq + static_cast<int64_t>(head) * D + 4 * c4);
    __half2* dst = reinterpret_cast<__half2*>(&qs[r * S::kQRow + 4 * c4]);
    dst[0] = __floats2half2_rn(v.x * a.scale, v.y * a.scale);
    dst[1] = __floats2half2_rn(v.z * a.scale, v.w * a.scale);
  }
  for (int i = tid; i < kTcBm * S::kORow; i += kTcWarps * 32) os[i] = 0.0f;
  __syncthreads();
  const int k_lo = rkb[0], k_hi = rpos[nr - 1] + 1;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
  const __half* kc = static_cast<const __half*>(a.k);
  const __half* vc = static_cast<const __half*>(a.v);

  // Softmax state: lanes 2 i and 2 i + 1 own row 16 warp + i, columns [32 (lane & 1), +32).
  const int my_row = 16 * warp + (lane >> 1), my_half = lane & 1;
  const int my_pos = rpos[my_row], my_kb = rkb[my_row];
  float m = -INFINITY, l = 0.0f;

  for (int k0 = k_lo; k0 < k_hi; k0 += kTcBn) {
    if (tid < kTcBn) {
      const int p = k0 + tid;
      int64_t o = -1;
      if (p < k_hi) {
        const int32_t blk = table[p / a.kv_block_size];
        o = ((static_cast<int64_t>(blk) * a.n_kv_heads + kvh) * a.kv_block_size + p % a.kv_block_size) * D;
      }
      koff[tid] = o;
    }
    __syncthreads();
    load_kv_tile_f16<D>(kc, koff, kvs);
    __syncthreads();

    // S (16 x 64 per warp) = Q_w K^T.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kTcBn / 16];
#pragma unroll
      for (int j = 0; j < kTcBn / 16; ++j) wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
      for (int kk = 0; kk < D; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::load_matrix_sync(fa, qs + 16 * warp * S::kQRow + kk, S::kQRow);
#pragma unroll
        for (int j = 0; j < kTcBn / 16; ++j) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;  // K^T: (d, key) at key * ld + d
          wmma::load_matrix_sync(fb, kvs + 16 * j * S::kQRow + kk, S::kQRow);
          wmma::mma_sync(acc[j], fa, fb, acc[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kTcBn / 16; ++j)
        wmma::store_matrix_sync(ss + 16 * warp * S::kSRow + 16 * j, acc[j], S::kSRow, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of the warp's rows; weights to F16, output rows rescaled.
    {
      const float* srow = ss + my_row * S::kSRow + 32 * my_half;
      __half* prow = ps + my_row * S::kPRow + 32 * my_half;
      const int key0 = k0 + 32 * my_half;
      float mx = -INFINITY;
#pragma unroll 8
      for (int c = 0; c < 32; ++c) {
        const int key = key0 + c;
        if (key >= my_kb && key <= my_pos) mx = fmaxf(mx, srow[c]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(detail::kFullMask, mx, 1));
      const float mnew = fmaxf(m, mx);
      const float base = mnew == -INFINITY ? 0.0f : mnew;
      float sum = 0.0f;
#pragma unroll 8
      for (int c = 0; c < 32; c += 2) {
        const int key = key0 + c;
        const float e0 = key >= my_kb && key <= my_pos ? expf(srow[c] - base) : 0.0f;
        const float e1 = key + 1 >= my_kb && key + 1 <= my_pos ? expf(srow[c + 1] - base) : 0.0f;
        const __half2 h = __floats2half2_rn(e0, e1);
        *reinterpret_cast<__half2*>(&prow[c]) = h;
        const float2 hf = __half22float2(h);  // sum the weights as rounded, as they are applied
        sum += hf.x + hf.y;
      }
      sum += __shfl_xor_sync(detail::kFullMask, sum, 1);
      const float alpha = expf(m - base);
      l = l * alpha + sum;
      m = mnew;
      float* orow = os + my_row * S::kORow + (D / 2) * my_half;
#pragma unroll 8
      for (int d = 0; d < D / 2; ++d) orow[d] *= alpha;
    }
    __syncthreads();  // everyone is done with K
    load_kv_tile_f16<D>(vc, koff, kvs);
    __syncthreads();

    // O_w (16 x D) += P_w (16 x 64) V (64 x D).
#pragma unroll
    for (int dd = 0; dd < D; dd += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      float* optr = os + 16 * warp * S::kORow + dd;
      wmma::load_matrix_sync(acc, optr, S::kORow, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kTcBn; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;  // V: (key, d) at key * ld + d
        wmma::load_matrix_sync(fa, ps + 16 * warp * S::kPRow + kk, S::kPRow);
        wmma::load_matrix_sync(fb, kvs + kk * S::kQRow + dd, S::kQRow);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(optr, acc, S::kORow, wmma::mem_row_major);
    }
    __syncthreads();  // before the next tile overwrites koff and the K/V buffer
  }

  if (my_row < nr) {
    const float inv = 1.0f / l;
    const float* orow = os + my_row * S::kORow + (D / 2) * my_half;
    float* o = a.out + static_cast<int64_t>(tb + my_row) * a.ldo + static_cast<int64_t>(head) * D + (D / 2) * my_half;
#pragma unroll 4
    for (int d = 0; d < D / 2; d += 4)
      *reinterpret_cast<float4*>(o + d) = make_float4(orow[d] * inv, orow[d + 1] * inv, orow[d + 2] * inv, orow[d + 3] * inv);
  }
}

// ---- Prompt, mma.sync (sm_80+, F16 caches, head_dim 64 / 128 / 256) ----
// W warps per block, 16 query rows each.
template <int D, int W>
struct MmaShape {
  static constexpr int kBm = 16 * W;              // query rows per block
  static constexpr int kBn = D == 256 ? 32 : 64;  // keys per tile (256: keeps O + S under 255 registers)
  static constexpr int kRow = D + 8;              // halves: +16 bytes so ldmatrix's 8 row reads hit distinct banks
  static constexpr size_t kQBytes = size_t{kBm} * kRow * 2;
  static constexpr size_t kTileBytes = size_t{kBn} * kRow * 2;
  static constexpr size_t kSmemBytes = kQBytes + 2 * kTileBytes;  // Q, one K tile, one V tile
  static_assert(kQBytes % 128 == 0 && kTileBytes % 128 == 0, "region alignment");
  static_assert(kBn * (D / 8) % (W * 32) == 0, "tile copy: whole 16-byte chunks per thread");
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronous; valid == false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Four 8x8 b16 matrices; lanes 8 i .. 8 i + 7 give the row addresses of matrix i, r[i] its fragment.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c (16x8 F32) += a (16x16 F16, row) b (16x8 F16, col).
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x (MUFU, relative error ~2^-22; -inf -> 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
#endif

// Grid (n_heads, ceil(max_seq_tokens / 16 W), n_seqs), W warps; warp w owns query rows 16 w ..
// 16 w + 15 of the block's tile (FlashAttention-2: softmax state and the 16 x D output in
// registers). Same blocking, masking and row contract as attention_prompt_tc_kernel: tiles of 16 W
// rows of one sequence (sequences with < 2 tokens exit) and one query head, against keys
// [first row's window begin, last row's position] in kBn-key tiles (64; 32 at head_dim 256), tiles
// in reverse order so the longest start first. q: F32 rows, pre-multiplied by scale * log2(e) and
// rounded to F16 (scores come out in base 2, so the softmax uses ex2); K/V: the F16 paged cache,
// gathered through the block table by cp.async into padded shared rows (keys past the range are
// zero-filled: unwritten slots may hold NaN). Pipeline, one K and one V buffer: V(i) loads while
// S = Q K(i)^T and the softmax run, K(i+1) loads while O += P V(i) runs. S: mma.sync m16n8k16 with
// K fragments by ldmatrix; masking only on tiles that straddle a row's range; online softmax per row
// across the 4 lanes holding it (quad shuffles), weights rounded to F16 as they feed the P V mma
// straight from the S registers (and summed as rounded, like the WMMA kernel); V fragments by
// ldmatrix.trans. Warps whose rows have no key in a tile skip its math. Numerics as the WMMA kernel:
// F16 q and weights, F32 accumulation and statistics (error vs exact ~1e-3 relative).
// kMinBlocks (blocks per SM the registers must allow), ptxas (CUDA 13) for sm_90 at W = 4:
// head_dim 64 at 3: 148 registers; 128 at 3: 168 registers + 24 bytes of spill stores and loads in
// the code (a few values reloaded per tile at most), at 2: 210, no spill; 256 at 2: 246, no spill.
// Dynamic shared memory at W = 4: 27 / 51 / 66 KB, 7 / 4 / 3 blocks per H200 SM.
// Expected bound: ldmatrix bandwidth (a warp reads 2 bytes of K/V per 16 flops: ~535 TFLOP/s on
// an H200 at 128 B/clock/SM) and mma.sync issue; K/V tiles come from L2 (each block reads its
// whole key range: ~3 TB/s of L2 traffic at 200 TFLOP/s with 64-row blocks, half with 128).
// Target >= 200 TFLOP/s on an H200 at 2048 causal tokens, head_dim 128 (WMMA kernel: 40).
template <int D, int W, int kMinBlocks>
__global__ void __launch_bounds__(W * 32, kMinBlocks) attention_prompt_mma_kernel(AttnArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using S = MmaShape<D, W>;
  constexpr int kBm = S::kBm, kBn = S::kBn, kRow = S::kRow, kChunks = D / 8, kThreads = W * 32;
  constexpr bool kQInRegs = D <= 128;  // at 256 (O alone is 128 registers) Q fragments are re-read from shared memory
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* qs = reinterpret_cast<__half*>(smem);
  __half* ks = reinterpret_cast<__half*>(smem + S::kQBytes);
  __half* vs = reinterpret_cast<__half*>(smem + S::kQBytes + S::kTileBytes);
  __shared__ int64_t koff[2][kBn];  // per-key element offsets of the tiles in flight (-1: zero row)
  __shared__ int rpos[kBm], rkb[kBm];

  const int head = blockIdx.x, seq = blockIdx.z;
  const int tile = gridDim.y - 1 - blockIdx.y;
  const int n = a.seq_n_tokens[seq];
  if (n < 2) return;
  const int r0 = tile * kBm;
  if (r0 >= n) return;
  const int tb = a.seq_token_begin[seq] + r0;
  const int nr = min(kBm, n - r0);
  const int kvh = head / a.group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  if (tid < kBm) {
    if (tid < nr) {
      const int p = a.positions[tb + tid];
      rpos[tid] = p;
      rkb[tid] = window_begin(p, a.window);
    } else {
      rpos[tid] = -1;  // padding row: no key allowed, never written
      rkb[tid] = INT_MAX;
    }
  }
  const float qscale = a.scale * kLog2e;
  const float* qh = a.q + static_cast<int64_t>(head) * D;
  for (int i = tid; i < kBm * (D / 4); i += kThreads) {
    const int r = i / (D / 4), c4 = i - r * (D / 4);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < nr) v = *reinterpret_cast<const float4*>(qh + static_cast<int64_t>(tb + r) * a.ldq + 4 * c4);
    __half2* dst = reinterpret_cast<__half2*>(&qs[r * kRow + 4 * c4]);
    dst[0] = __floats2half2_rn(v.x * qscale, v.y * qscale);
    dst[1] = __floats2half2_rn(v.z * qscale, v.w * qscale);
  }
  __syncthreads();

  const int k_lo = rkb[0], k_hi = rpos[nr - 1] + 1;
  const int n_tiles = (k_hi - k_lo + kBn - 1) / kBn;
  const int32_t* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
  const __half* kc = static_cast<const __half*>(a.k);
  const __half* vc = static_cast<const __half*>(a.v);
  const int bs = a.kv_block_size;
  auto key_offset = [&](int p) -> int64_t {
    if (p >= k_hi) return -1;
    const int32_t blk = table[p / bs];
    return ((static_cast<int64_t>(blk) * a.n_kv_heads + kvh) * bs + p % bs) * D;
  };
  // Issues the copy of one tile (kBn rows of D halves) and commits it as one cp.async group.
  auto load_tile = [&](const __half* src, __half* dst, const int64_t* off) {
#pragma unroll
    for (int u = 0; u < kBn * kChunks / kThreads; ++u) {
      const int i = tid + u * kThreads;
      const int c = i / kChunks, c8 = i - c * kChunks;
      const int64_t o = off[c];
      cp_async_16(smem_u32(dst + c * kRow + 8 * c8), o >= 0 ? src + o + 8 * c8 : src, o >= 0);
    }
    cp_async_commit();
  };
  if (tid < kBn) koff[0][tid] = key_offset(k_lo + tid);
  __syncthreads();
  load_tile(kc, ks, koff[0]);

  // Warp-uniform row ranges (positions increase along the tile, so do window begins).
  const int wr0 = 16 * warp;
  const int w_kb_min = wr0 < nr ? rkb[wr0] : INT_MAX;                  // first row's window begin
  const int w_pos_max = wr0 < nr ? rpos[min(wr0 + 15, nr - 1)] : -1;  // last real row's position
  const int w_kb_max = rkb[wr0 + 15], w_pos_min = rpos[wr0];          // INT_MAX / -1 if any padding
  // Lane (g, t4) holds rows g and g + 8 of the warp's 16, columns 2 t4, 2 t4 + 1 of each 8-wide n-tile.
  const int g = lane >> 2, t4 = lane & 3;
  const int pos_a = rpos[wr0 + g], kb_a = rkb[wr0 + g], pos_b = rpos[wr0 + g + 8], kb_b = rkb[wr0 + g + 8];

  // ldmatrix lane addressing (byte offsets inside a tile; see the fragment layouts of m16n8k16).
  const uint32_t q_base = smem_u32(qs + (wr0 + (lane & 15)) * kRow + (lane >> 4) * 8);
  const uint32_t k_base = smem_u32(ks + ((lane >> 4) * 8 + (lane & 7)) * kRow + ((lane >> 3) & 1) * 8);
  const uint32_t v_base = smem_u32(vs + (((lane >> 3) & 1) * 8 + (lane & 7)) * kRow + (lane >> 4) * 8);

  uint32_t qf[kQInRegs ? D / 16 : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(q_base + kk * 32, qf[kk]);
  }

  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;  // l: this lane's partial sums

  for (int it = 0; it < n_tiles; ++it) {
    const int k0 = k_lo + it * kBn;
    // Offsets of the next tile: koff[(it + 1) & 1] was last read when V(it - 1) was issued.
    if (tid < kBn && it + 1 < n_tiles) koff[(it + 1) & 1][tid] = key_offset(k0 + kBn + tid);
    cp_async_wait_all();
    __syncthreads();  // K(it) is in for every thread; every warp is done with V(it - 1)
    load_tile(vc, vs, koff[it & 1]);

    const bool active = k0 <= w_pos_max && k0 + kBn > w_kb_min;  // warp-uniform
    uint32_t pf[kBn / 16][4];  // the weights as A fragments of P V (one per 16-key step)
    if (active) {
      float s[kBn / 8][4];
#pragma unroll
      for (int j = 0; j < kBn / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t qa[4];
        if constexpr (kQInRegs) {
          qa[0] = qf[kk][0], qa[1] = qf[kk][1], qa[2] = qf[kk][2], qa[3] = qf[kk][3];
        } else {
          ldsm_x4(q_base + kk * 32, qa);
        }
#pragma unroll
        for (int np = 0; np < kBn / 16; ++np) {
          uint32_t b[4];
          ldsm_x4(k_base + (np * 16 * kRow + kk * 16) * 2, b);
          mma_16816(s[2 * np], qa, b[0], b[1]);
          mma_16816(s[2 * np + 1], qa, b[2], b[3]);
        }
      }
      // Causal / window / past-the-range mask, only where the tile is not inside every row's range.
      if (!(k0 >= w_kb_max && k0 + kBn - 1 <= w_pos_min)) {
#pragma unroll
        for (int j = 0; j < kBn / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = k0 + 8 * j + 2 * t4 + e;
            if (key < kb_a || key > pos_a) s[j][e] = -INFINITY;
            if (key < kb_b || key > pos_b) s[j][2 + e] = -INFINITY;
          }
      }
      float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
      for (int j = 0; j < kBn / 8; ++j) {
        mx_a = fmaxf(mx_a, fmaxf(s[j][0], s[j][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[j][2], s[j][3]));
      }
#pragma unroll
      for (int x = 1; x <= 2; x <<= 1) {  // the 4 lanes of a row
        mx_a = fmaxf(mx_a, __shfl_xor_sync(detail::kFullMask, mx_a, x));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(detail::kFullMask, mx_b, x));
      }
      const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
      const float base_a = mn_a == -INFINITY ? 0.0f : mn_a;  // a row with no key yet stays empty
      const float base_b = mn_b == -INFINITY ? 0.0f : mn_b;
      const float alpha_a = exp2_approx(m_a - base_a), alpha_b = exp2_approx(m_b - base_b);  // 0 while m = -inf
      m_a = mn_a, m_b = mn_b;
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int np = 0; np < kBn / 16; ++np)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float* sj = s[2 * np + h];
          const __half2 pa = __floats2half2_rn(exp2_approx(sj[0] - base_a), exp2_approx(sj[1] - base_a));
          const __half2 pb = __floats2half2_rn(exp2_approx(sj[2] - base_b), exp2_approx(sj[3] - base_b));
          const float2 fa = __half22float2(pa), fb = __half22float2(pb);  // summed as rounded, as applied
          sum_a += fa.x + fa.y;
          sum_b += fb.x + fb.y;
          // A fragment of m16n8k16: {row g, k 0-7}, {row g+8, k 0-7}, {row g, k 8-15}, {row g+8, k 8-15}.
          pf[np][2 * h] = half2_bits(pa);
          pf[np][2 * h + 1] = half2_bits(pb);
        }
      l_a = l_a * alpha_a + sum_a;
      l_b = l_b * alpha_b + sum_b;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j][0] *= alpha_a, o[j][1] *= alpha_a;
        o[j][2] *= alpha_b, o[j][3] *= alpha_b;
      }
    }
    cp_async_wait_all();
    __syncthreads();  // V(it) is in; every warp is done with K(it)
    if (it + 1 < n_tiles) load_tile(kc, ks, koff[(it + 1) & 1]);
    if (active) {
#pragma unroll
      for (int np = 0; np < kBn / 16; ++np)
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          ldsm_x4_trans(v_base + (np * 16 * kRow + dp * 16) * 2, b);
          mma_16816(o[2 * dp], pf[np], b[0], b[1]);
          mma_16816(o[2 * dp + 1], pf[np], b[2], b[3]);
        }
    }
  }

#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    l_a += __shfl_xor_sync(detail::kFullMask, l_a, x);
    l_b += __shfl_xor_sync(detail::kFullMask, l_b, x);
  }
  const int row_a = wr0 + g, row_b = wr0 + g + 8;
  if (row_a < nr) {
    const float inv = 1.0f / l_a;
    float* out = a.out + static_cast<int64_t>(tb + row_a) * a.ldo + static_cast<int64_t>(head) * D + 2 * t4;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) *reinterpret_cast<float2*>(out + 8 * j) = make_float2(o[j][0] * inv, o[j][1] * inv);
  }
  if (row_b < nr) {
    const float inv = 1.0f / l_b;
    float* out = a.out + static_cast<int64_t>(tb + row_b) * a.ldo + static_cast<int64_t>(head) * D + 2 * t4;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) *reinterpret_cast<float2*>(out + 8 * j) = make_float2(o[j][2] * inv, o[j][3] * inv);
  }
#else
  (void)a;
  __trap();  // launched only where attention_prompt_path() found code for sm_80+
#endif
}

// ---- Decode, mma.sync with a cp.async ring (sm_80+, F16 caches, head_dim 64 / 128, group <= 16) ----
// Long-context one-query decode (attention_decode_mma_kernel; use_decode_mma picks it). The
// tile-by-tile kernel above loads a tile, then computes on it through shared memory (scores,
// weights and the output rows all round-trip there, with four block barriers a tile), so its K/V
// bytes moved at 0.8-1.2 TB/s at 4096-16384 keys inside a decode step (H200, perf.md session 38).
// Measured (H200, perf.md session 39), decode + merge of one launch in duet_gpu_attention's
// benchmark (eager, qwen2-7b geometry): one token at 16384 keys 25.8 us (tile-by-tile kernel,
// merge_many) -> 21.7 (merge_wide) -> 13.3 (this kernel); at 32768 keys 52.3 -> 39.5 -> 31.4;
// 32 tokens at 4096 keys 129.5 -> 129.1 -> 89.1. Inside qwen2-7b Q4_K_M decode steps (CUDA
// graphs) the gain is smaller: tg128 @ d16384 372.1 / 372.6 -> 383.7 / 383.6 tok/s, level at
// d4096; a kernel trace puts attention + merge at 556 us a token against 880, but the products
// after it took ~270 us longer (not explained). Pieces of one 32-key tile (short contexts) are
// slower on this kernel (one-sequence step 2.02 against 1.96 ms), hence kDecodeMmaMinKeys.
template <int D, int kStages>
struct DmShape {
  static constexpr int kRow = D + 8;  // halves: +16 bytes so ldmatrix's 8 row reads hit distinct banks
  static constexpr int kORow = D + 4;  // floats: the end-of-block merge's output rows
  static constexpr size_t kQBytes = size_t{16} * kRow * 2;
  static constexpr size_t kTileBytes = size_t{kDtKeys} * kRow * 2;  // one K or V tile
  static constexpr size_t kStageBytes = 2 * kTileBytes;              // K, then V
  static constexpr size_t kSmemBytes = kQBytes + kStages * kStageBytes;
  static_assert(kQBytes % 128 == 0 && kTileBytes % 128 == 0, "region alignment");
  static_assert(size_t{4} * 16 * kORow * 4 <= kStages * kStageBytes, "the merge's rows fit the ring");
  static_assert(kDtKeys * (D / 8) % kDtThreads == 0, "whole 16-byte copies per thread");
};

// Grid (n_tokens, n_kv_heads, splits), 128 threads = 4 warps. Block = one token, the `group` query
// heads of KV head blockIdx.y as the 16 rows of m16n8k16 tiles (rows >= group: zero q, never
// written), keys [k0, k1) of split blockIdx.z (decode_piece) in 64-key tiles. The tiles stream
// through a ring of kStages K/V buffers filled by cp.async (kStages - 1 tiles in flight while one
// is computed; one block barrier a tile). Warp w takes keys 16 w .. 16 w + 15 of every tile with
// its own softmax state and 16 x D output in registers (FlashAttention-2 style, the state of the
// prompt mma kernel: S = Q K^T on mma.sync with K by ldmatrix, the online softmax across the 4
// lanes of a row, the weights rounded to F16 straight into the A fragment of O += P V, V by
// ldmatrix.trans); at the end the 4 warps' (m, l, O) are merged through shared memory (reusing
// the ring) and the block writes its rows (one piece) or its partial (several; m converted to
// natural-log units for the merge kernel). q is pre-multiplied by scale * log2(e) and rounded to
// F16, scores come out in base 2 (ex2), numerics as the prompt mma kernel: F16 q and weights, F32
// accumulation and statistics. Keys past k1 are zero-filled by cp.async (unwritten slots may hold
// NaN) and masked. a.early_kv: the metadata, block-table offsets and the first kStages - 1 tiles
// are requested before pdl_wait, except the key at pos (the producer writes it): no copy at all is
// issued for that row then, and it is stored with plain loads and stores after the wait (so no
// asynchronous copy and no plain store ever share an address). Block-table offsets: threads < 64
// own one key slot of every tile; the offset of the tile kStages ahead is loaded into a register
// an iteration before it is stored to koff, so the lookups add no round trip to the loop.
template <int D, int kStages>
__global__ void __launch_bounds__(kDtThreads, 2) attention_decode_mma_kernel(AttnArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using S = DmShape<D, kStages>;
  static_assert(S::kRow == DtShape<D>::kRow, "stage_q's q rows");
  constexpr int kRow = S::kRow, kChunks = D / 8, kCopies = kDtKeys * kChunks / kDtThreads;
  constexpr float kLog2e = 1.4426950408889634f;
  detail::pdl_trigger();
  bool waited = !a.early_kv;  // uniform
  if (waited) detail::pdl_wait();
  extern __shared__ __align__(128) unsigned char smem[];
  __half* qs = reinterpret_cast<__half*>(smem);
  unsigned char* ring = smem + S::kQBytes;
  __shared__ int64_t koff[kStages][kDtKeys];
  __shared__ float wm[4][16], wl[4][16];

  const DecodePiece pc = decode_piece(a);
  if (pc.skip) {
    if (!waited) detail::pdl_wait();  // pdl_wait's rule: every block waits before it exits
    return;
  }
  const int t = pc.t, pos = pc.pos, k0 = pc.k0, k1 = pc.k1;
  const int32_t* table = a.block_tables + static_cast<int64_t>(pc.seq) * a.max_blocks;
  const int kvh = blockIdx.y, h0 = kvh * a.group;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_tiles = (k1 - k0 + kDtKeys - 1) / kDtKeys;
  const __half* kc = static_cast<const __half*>(a.k);
  const __half* vc = static_cast<const __half*>(a.v);

  // Issues tile j's copies into its ring buffer (j % kStages) and commits them as one group (an
  // empty group past the last tile, so that group i is always tile i). Before the wait the row
  // at pos gets no copy (fix_pos stores it).
  auto issue = [&](int j, bool early) {
    if (j < n_tiles) {
      const int tile0 = k0 + j * kDtKeys;
      __half* kd = reinterpret_cast<__half*>(ring + (j % kStages) * S::kStageBytes);
      __half* vd = kd + kDtKeys * kRow;
      const int64_t* off = koff[j % kStages];
#pragma unroll
      for (int u = 0; u < kCopies; ++u) {
        const int i = tid + u * kDtThreads;
        const int c = i / kChunks, c8 = i - c * kChunks;
        const int64_t o = off[c];
        if (early && tile0 + c == pos) continue;
        const uint32_t dk = smem_u32(kd + c * kRow + 8 * c8), dv = smem_u32(vd + c * kRow + 8 * c8);
        cp_async_16(dk, o >= 0 ? kc + o + 8 * c8 : kc, o >= 0);
        cp_async_16(dv, o >= 0 ? vc + o + 8 * c8 : vc, o >= 0);
      }
    }
    cp_async_commit();
  };

  // Prologue: offsets of tiles 0 .. kStages - 2 (and tile kStages - 1's in a register), their copies.
  if (tid < kDtKeys) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) koff[s][tid] = tile_key_offset<D>(a, table, kvh, k1, k0 + s * kDtKeys, tid);
  }
  int64_t next_off = tile_key_offset<D>(a, table, kvh, k1, k0 + (kStages - 1) * kDtKeys, tid);
  __syncthreads();
  const bool early = !waited;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s, early);
  if (!waited) {
    detail::pdl_wait();
    // The key at pos, if one of the tiles issued early holds it: its K and V rows, chunk by chunk,
    // by the threads whose copies skipped them.
    const int jp = (pos - k0) / kDtKeys;
    if (pos >= k0 && pos < k1 && jp < kStages - 1) {
      __half* kd = reinterpret_cast<__half*>(ring + jp * S::kStageBytes);
      __half* vd = kd + kDtKeys * kRow;
      const int c = pos - k0 - jp * kDtKeys;
      const int64_t o = koff[jp][c];
      for (int c8 = tid; c8 < kChunks; c8 += kDtThreads) {
        *reinterpret_cast<uint4*>(kd + c * kRow + 8 * c8) = *(reinterpret_cast<const uint4*>(kc + o) + c8);
        *reinterpret_cast<uint4*>(vd + c * kRow + 8 * c8) = *(reinterpret_cast<const uint4*>(vc + o) + c8);
      }
    }
  }
  // q's rows (after the wait: the producer writes q), times scale * log2(e).
  stage_q<D>(a, t, h0, qs, tid, kDtThreads, a.scale * kLog2e);
  __syncthreads();
  // Lane (g, t4) holds rows g and g + 8, keys / columns 2 t4, 2 t4 + 1 of each 8-wide n-tile.
  const int g = lane >> 2, t4 = lane & 3;
  uint32_t qf[D / 16][4];
  {
    const uint32_t q_base = smem_u32(qs + (lane & 15) * kRow + (lane >> 4) * 8);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(q_base + kk * 32, qf[kk]);
  }
  // ldmatrix lane offsets (bytes) inside a buffer, for the warp's 16 keys (see the prompt mma kernel).
  const uint32_t k_lane = ((16 * warp + (lane >> 4) * 8 + (lane & 7)) * kRow + ((lane >> 3) & 1) * 8) * 2;
  const uint32_t v_lane = ((16 * warp + ((lane >> 3) & 1) * 8 + (lane & 7)) * kRow + (lane >> 4) * 8) * 2;
  const uint32_t ring_u32 = smem_u32(ring);

  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;  // l: this lane's partial sums

  for (int it = 0; it < n_tiles; ++it) {
    // Tile it + kStages - 1's offsets (its slot was last read when tile it - 1 was issued, before
    // the previous iteration's barrier), then the next tile's into the register.
    if (tid < kDtKeys) koff[(it + kStages - 1) % kStages][tid] = next_off;
    next_off = tile_key_offset<D>(a, table, kvh, k1, k0 + (it + kStages) * kDtKeys, tid);
    detail::cp_async_wait<kStages - 2>();
    __syncthreads();  // tile it is in for every thread; every warp is done with tile it - 1
    issue(it + kStages - 1, false);
    const int tile0 = k0 + it * kDtKeys;
    if (tile0 + 16 * warp >= k1) continue;  // warp-uniform: none of the warp's keys in the piece
    const uint32_t kb = ring_u32 + (it % kStages) * static_cast<uint32_t>(S::kStageBytes);
    const uint32_t vb = kb + static_cast<uint32_t>(S::kTileBytes);
    float s[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];
      ldsm_x4(kb + k_lane + kk * 32, b);
      mma_16816(s[0], qf[kk], b[0], b[1]);
      mma_16816(s[1], qf[kk], b[2], b[3]);
    }
    if (tile0 + 16 * warp + 16 > k1) {  // the piece ends inside the warp's keys
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (tile0 + 16 * warp + 8 * j + 2 * t4 + e >= k1) s[j][e] = s[j][2 + e] = -INFINITY;
    }
    float mx_a = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
    float mx_b = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {  // the 4 lanes of a row
      mx_a = fmaxf(mx_a, __shfl_xor_sync(detail::kFullMask, mx_a, x));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(detail::kFullMask, mx_b, x));
    }
    // Finite: the warp's first key is in the piece.
    const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
    const float alpha_a = exp2_approx(m_a - mn_a), alpha_b = exp2_approx(m_b - mn_b);  // 0 while m = -inf
    m_a = mn_a, m_b = mn_b;
    uint32_t pf[4];  // A fragment: {row g, k 0-7}, {row g+8, k 0-7}, {row g, k 8-15}, {row g+8, k 8-15}
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2 pa = __floats2half2_rn(exp2_approx(s[j][0] - mn_a), exp2_approx(s[j][1] - mn_a));
      const __half2 pb = __floats2half2_rn(exp2_approx(s[j][2] - mn_b), exp2_approx(s[j][3] - mn_b));
      const float2 fa = __half22float2(pa), fb = __half22float2(pb);  // summed as rounded, as applied
      sum_a += fa.x + fa.y;
      sum_b += fb.x + fb.y;
      pf[2 * j] = half2_bits(pa);
      pf[2 * j + 1] = half2_bits(pb);
    }
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      ldsm_x4_trans(vb + v_lane + dp * 32, b);
      o[2 * dp][0] *= alpha_a, o[2 * dp][1] *= alpha_a, o[2 * dp][2] *= alpha_b, o[2 * dp][3] *= alpha_b;
      o[2 * dp + 1][0] *= alpha_a, o[2 * dp + 1][1] *= alpha_a;
      o[2 * dp + 1][2] *= alpha_b, o[2 * dp + 1][3] *= alpha_b;
      mma_16816(o[2 * dp], pf, b[0], b[1]);
      mma_16816(o[2 * dp + 1], pf, b[2], b[3]);
    }
  }
  detail::cp_async_wait<0>();
  __syncthreads();  // every warp is done with the ring (and no copy is in flight): it holds the merge
#pragma unroll
  for (int x = 1; x <= 2; x <<= 1) {
    l_a += __shfl_xor_sync(detail::kFullMask, l_a, x);
    l_b += __shfl_xor_sync(detail::kFullMask, l_b, x);
  }
  float* ob = reinterpret_cast<float*>(ring) + warp * 16 * S::kORow;
  if (t4 == 0) {
    wm[warp][g] = m_a, wm[warp][g + 8] = m_b;
    wl[warp][g] = l_a, wl[warp][g + 8] = l_b;
  }
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    *reinterpret_cast<float2*>(ob + g * S::kORow + 8 * j + 2 * t4) = make_float2(o[j][0], o[j][1]);
    *reinterpret_cast<float2*>(ob + (g + 8) * S::kORow + 8 * j + 2 * t4) = make_float2(o[j][2], o[j][3]);
  }
  __syncthreads();
  const float* o0 = reinterpret_cast<const float*>(ring);
  for (int i = tid; i < a.group * D; i += kDtThreads) {
    const int r = i / D, d = i - r * D;
    const float M = fmaxf(fmaxf(wm[0][r], wm[1][r]), fmaxf(wm[2][r], wm[3][r]));  // warp 0's is finite
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float f = exp2_approx(wm[w][r] - M);  // 0 for a warp without keys (m = -inf, l = 0, o = 0)
      L += wl[w][r] * f;
      O += o0[(w * 16 + r) * S::kORow + d] * f;
    }
    const int head = h0 + r;
    if (pc.n_splits == 1) {
      store_out(a, t, static_cast<int64_t>(head) * D + d, O / L);
    } else {
      constexpr float kLn2 = 0.6931471805599453f;
      store_partial<D>(a, t, head, blockIdx.z, d, O, M * kLn2, L);
    }
  }
#else
  (void)a;
  __trap();  // launched only where use_mma_prompt() found code for sm_80+
#endif
}

template <int D>
void launch_prompt_tc(const AttnArgs& a, int n_seqs, int max_seq_tokens, cudaStream_t stream) {
  using S = TcShape<D>;
  static std::atomic<uint64_t> opted_in{0};
  int dev = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(opted_in.load(std::memory_order_acquire) & bit)) {
    DUET_CUDA_CHECK(cudaFuncSetAttribute(attention_prompt_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(S::kSmemBytes)));
    opted_in.fetch_or(bit, std::memory_order_release);
  }
  const dim3 grid(a.n_heads, static_cast<unsigned>(detail::ceil_div(max_seq_tokens, kTcBm)), n_seqs);
  attention_prompt_tc_kernel<D><<<grid, kTcWarps * 32, S::kSmemBytes, stream>>>(a);
  DUET_CUDA_CHECK_LAUNCH();
}

template <int D, int W, int kMinBlocks>
void launch_prompt_mma(const AttnArgs& a, int n_seqs, int max_seq_tokens, cudaStream_t stream) {
  using S = MmaShape<D, W>;
  static std::atomic<uint64_t> opted_in{0};
  int dev = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(opted_in.load(std::memory_order_acquire) & bit)) {
    DUET_CUDA_CHECK(cudaFuncSetAttribute(attention_prompt_mma_kernel<D, W, kMinBlocks>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kSmemBytes)));
    opted_in.fetch_or(bit, std::memory_order_release);
  }
  const dim3 grid(a.n_heads, static_cast<unsigned>(detail::ceil_div(max_seq_tokens, S::kBm)), n_seqs);
  attention_prompt_mma_kernel<D, W, kMinBlocks><<<grid, W * 32, S::kSmemBytes, stream>>>(a);
  DUET_CUDA_CHECK_LAUNCH();
}

// ---- Prompt path choice (AttentionPromptPath in attention.h) ----
std::atomic<int> g_prompt_override{static_cast<int>(AttentionPromptPath::kAuto)};

// DUET_KERNELS=generic or DUET_ATTN_WMMA=1 (any value but "" and "0"), read once per process.
bool env_wants_generic_prompt() {
  static const bool v = [] {
    const char* k = std::getenv("DUET_KERNELS");
    const char* w = std::getenv("DUET_ATTN_WMMA");
    return (k && std::strcmp(k, "generic") == 0) || (w && *w && std::strcmp(w, "0") != 0);
  }();
  return v;
}

// Whether the current device can run attention_prompt_mma_kernel (sm_80+ code; built for sm_70
// its body is a trap). Queried on the device's first launch.
bool device_has_mma_prompt() {
  static std::atomic<uint64_t> known{0}, ok{0};
  return detail::device_runs(attention_prompt_mma_kernel<128, 4, 3>, 8, 80, known, ok);
}

// Tuning knob, read once per process: DUET_ATTN_MMA_VARIANT picks the block shape of the
// head_dim 64 / 128 mma kernels (head_dim 256 always runs 4 warps, 2 blocks per SM):
//   w4b3 (default): 4 warps, registers capped for 3 blocks per SM (head_dim 128: small spill);
//   w4b2: 4 warps, 2 blocks per SM (head_dim 128: 210 registers, no spill);
//   w8b1: 8 warps (128 query rows: half the K/V tile loads per row), 1 block per SM.
enum class MmaVariant { kW4B3, kW4B2, kW8B1 };
MmaVariant mma_variant() {
  static const MmaVariant v = [] {
    const char* e = std::getenv("DUET_ATTN_MMA_VARIANT");
    if (e && std::strcmp(e, "w4b2") == 0) return MmaVariant::kW4B2;
    if (e && std::strcmp(e, "w8b1") == 0) return MmaVariant::kW8B1;
    return MmaVariant::kW4B3;
  }();
  return v;
}

template <int D>
void launch_prompt_mma_for_dim(const AttnArgs& a, int n_seqs, int max_seq_tokens, cudaStream_t stream) {
  if constexpr (D == 256) {
    launch_prompt_mma<256, 4, 2>(a, n_seqs, max_seq_tokens, stream);
  } else {
    switch (mma_variant()) {
      case MmaVariant::kW4B2: launch_prompt_mma<D, 4, 2>(a, n_seqs, max_seq_tokens, stream); break;
      case MmaVariant::kW8B1: launch_prompt_mma<D, 8, 1>(a, n_seqs, max_seq_tokens, stream); break;
      default: launch_prompt_mma<D, 4, 3>(a, n_seqs, max_seq_tokens, stream); break;
    }
  }
}

bool use_mma_prompt() {
  const auto forced = static_cast<AttentionPromptPath>(g_prompt_override.load(std::memory_order_relaxed));
  if (forced == AttentionPromptPath::kGeneric) return false;
  const bool have = device_has_mma_prompt();
  if (forced == AttentionPromptPath::kMma) {
    DUET_CHECK_MSG(have, "attention prompt path forced to mma.sync on a device without sm_80+ code for it");
    return true;
  }
  return have && !env_wants_generic_prompt();
}

template <int D, int TM, int TN, typename T>
void launch_prompt(const AttnArgs& a, int n_seqs, int max_seq_tokens, cudaStream_t stream) {
  using S = PromptShape<D, TM, TN>;
  // Shared memory above 48 KB is opt-in per kernel and per device: once for each (bit = device).
  static std::atomic<uint64_t> opted_in{0};
  int dev = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(opted_in.load(std::memory_order_acquire) & bit)) {
    DUET_CUDA_CHECK(cudaFuncSetAttribute(attention_prompt_kernel<D, TM, TN, T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(S::kSmemBytes)));
    opted_in.fetch_or(bit, std::memory_order_release);
  }
  const dim3 grid(a.n_heads, static_cast<unsigned>(detail::ceil_div(max_seq_tokens, S::kBm)), n_seqs);
  attention_prompt_kernel<D, TM, TN, T><<<grid, kPromptThreads, S::kSmemBytes, stream>>>(a);
  DUET_CUDA_CHECK_LAUNCH();
}

// The tensor-core decode kernel, one group of 4 warps a block (G = 1) or G groups (the grouped
// kernel): grid (n_tokens, n_kv_heads, splits).
template <int D, int G>
void launch_decode_tc(const AttnArgs& a, int n_tokens, int splits, bool pdl, cudaStream_t stream) {
  const size_t smem = DtShape<D>::smem_bytes(G);
  const dim3 grid(n_tokens, a.n_kv_heads, splits);
  void (*kernel)(AttnArgs) = nullptr;
  if constexpr (G == 1) {
    // Grids of at most two blocks an SM (one-token decode at short contexts: a few dozen blocks)
    // take the instance that asks for the smallest shared-memory carve-out holding two blocks, not
    // the driver's choice (228 KB on the H200, room for four), so that the rest of the SM stays
    // L1. H200, qwen2-7b Q4_K_M tg128 (`-p 0 -n 128 -r 3`, two interleaved rounds, perf.md session
    // 37): 511.7 / 515.2 tok/s against 498.5 / 497.8 (room for one block: 511.8 / 513.5); FP8
    // weight-only level (403.2 / 403.7 against 403.4 / 403.5). Larger grids (long contexts,
    // batches) keep the driver's choice, which fits four blocks an SM.
    const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
    if (blocks <= 2 * int64_t{detail::current_sm_count()}) {
      kernel = attention_decode_tc_kernel<D, true>;
      detail::prefer_l1_carveout(reinterpret_cast<const void*>(kernel), 2, smem);  // once per device
    } else {
      kernel = attention_decode_tc_kernel<D, false>;
    }
  } else {
    kernel = attention_decode_grouped_kernel<D, G>;
  }
  detail::opt_in_ctas_per_sm(reinterpret_cast<const void*>(kernel), kDtThreads * G, smem);  // once per device
  detail::launch_maybe_pdl(kernel, grid, dim3(kDtThreads * G), smem, stream, pdl, a);
}

// The mma.sync decode kernel with its ring of kStages K/V tiles (DUET_ATTN_DECODE_MMA_STAGES=2
// or 3, default 3: read once per process; A/B knob): grid (n_tokens, n_kv_heads, splits). Two
// stages (three blocks an SM instead of two) measured +1.3% at 16384 keys and level at 4096
// (qwen2-7b Q4_K_M tg128 @ d16384 388.8 / 389.1 against 383.6 / 383.7 tok/s, H200, perf.md
// session 39); it stays the knob until a whole attention test run of it is on record.
int decode_mma_stages() {
  static const int v = [] {
    const int e = env_int("DUET_ATTN_DECODE_MMA_STAGES", 2, 3);
    return e > 0 ? e : 3;
  }();
  return v;
}
template <int D>
void launch_decode_mma(const AttnArgs& a, int n_tokens, int splits, bool pdl, cudaStream_t stream) {
  const dim3 grid(n_tokens, a.n_kv_heads, splits);
  void (*kernel)(AttnArgs) = attention_decode_mma_kernel<D, 3>;
  size_t smem = DmShape<D, 3>::kSmemBytes;
  if (decode_mma_stages() == 2) {
    kernel = attention_decode_mma_kernel<D, 2>;
    smem = DmShape<D, 2>::kSmemBytes;
  }
  // DUET_ATTN_DECODE_MMA_CARVE=k (1-3; read once per process; A/B knob, not measured yet): the
  // smallest shared-memory carve-out holding k blocks (prefer_l1_carveout) instead of the
  // driver's choice (for the tile-by-tile kernel ncu showed the whole 228 KB of an H200 SM,
  // session 37). Why it may pay: inside a decode step at
  // 16384 keys this kernel took attention + merge from 880 to 556 us a token, yet the products
  // after it took ~270 us longer (the Q6_K ones 40%; perf.md session 39), and session 37 found
  // the step faster when the tile-by-tile kernel's short-context grids asked for less.
  static const int carve = env_int("DUET_ATTN_DECODE_MMA_CARVE", 1, 3);
  if (carve > 0) detail::prefer_l1_carveout(reinterpret_cast<const void*>(kernel), carve, smem);  // once per device
  detail::opt_in_ctas_per_sm(reinterpret_cast<const void*>(kernel), kDtThreads, smem);  // once per device
  detail::launch_maybe_pdl(kernel, grid, dim3(kDtThreads), smem, stream, pdl, a);
}

template <int D, typename T>
void launch_by_dim(const AttnArgs& a, int n_tokens, int n_seqs, int max_seq_tokens, int splits, int groups, bool mma,
                   bool decode_mma, bool merge_pdl, bool decode_pdl, cudaStream_t stream) {
  if (max_seq_tokens > 1) {
    // F16 caches: the mma.sync kernel where `mma` (sm_80+, see use_mma_prompt), else at head_dim
    // <= 128 the WMMA kernel (sm_70; its shared memory fits a V100); F32 caches (exact checks)
    // and F16 at head_dim 256 without `mma` the FP32 SIMT kernel.
    constexpr bool kTc = sizeof(T) == 2 && D <= 128;
    if (sizeof(T) == 2 && mma) launch_prompt_mma_for_dim<D>(a, n_seqs, max_seq_tokens, stream);
    else if constexpr (kTc) launch_prompt_tc<D>(a, n_seqs, max_seq_tokens, stream);
    else if constexpr (D == 64) launch_prompt<64, 4, 4, T>(a, n_seqs, max_seq_tokens, stream);
    else if constexpr (D == 128) launch_prompt<128, 4, 2, T>(a, n_seqs, max_seq_tokens, stream);
    else launch_prompt<256, 2, 2, T>(a, n_seqs, max_seq_tokens, stream);
  }
  // Decode: tensor cores for F16 caches at head_dim <= 128 with groups of <= 16 query heads
  // (the mma.sync ring kernel where `decode_mma`, see use_decode_mma; else `groups` groups of 4
  // warps a block), else the FP32 SIMT kernel.
  if (sizeof(T) == 2 && D <= 128 && a.group <= 16) {
    if constexpr (sizeof(T) == 2 && D <= 128) {
      if (decode_mma) launch_decode_mma<D>(a, n_tokens, splits, decode_pdl, stream);
      else if (groups == 4) launch_decode_tc<D, 4>(a, n_tokens, splits, decode_pdl, stream);
      else if (groups == 2) launch_decode_tc<D, 2>(a, n_tokens, splits, decode_pdl, stream);
      else launch_decode_tc<D, 1>(a, n_tokens, splits, decode_pdl, stream);
    }
  } else {
    detail::launch_maybe_pdl(attention_decode_kernel<D, T>, dim3(n_tokens, a.n_heads / a.hb, splits),
                             dim3(kDecWarps * 32), 0, stream, decode_pdl, a);
  }
  DUET_CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    // Programmatic (merge_pdl): the merge blocks are scheduled while the decode blocks run and
    // wait in pdl_wait for their partials, so the merge costs its own run, not a launch gap.
    detail::launch_maybe_pdl(attention_merge_kernel, dim3(n_tokens, a.n_heads), dim3(D), 0, stream, merge_pdl, a, D);
    DUET_CUDA_CHECK_LAUNCH();
  }
}

// Whether the merge may be launched programmatically on the current device: sm_90+ code (its
// pdl_wait is compiled only for sm_90+). Queried on the device's first launch.
bool device_has_merge_pdl() {
  static std::atomic<uint64_t> known{0}, ok{0};
  return detail::device_runs(attention_merge_kernel, 9, 90, known, ok);
}

// The merge launch is programmatic where the device allows it, short splits are on, and
// DUET_ATTN_MERGE_PDL is not "0" (read once per process; A/B knob).
bool use_merge_pdl() {
  static const bool env_off = [] {
    const char* e = std::getenv("DUET_ATTN_MERGE_PDL");
    return e && std::strcmp(e, "0") == 0;
  }();
  if (!split_short_enabled() || env_off) return false;
  return device_has_merge_pdl();
}

// The decode kernel is launched programmatically too (sm_90), unless DUET_ATTN_PDL=0 (read once per
// process; A/B knob). Its producer, qkv_rope_cache_kernel, lets it in only after its own wait:
// triggered at the producer's start, the decode grid (sized for the longest context) was
// scheduled while the q/k/v product still ran and took SM slots from it, and programmatic
// attention measured slower (qwen2-7b Q4_K_M tg128 374.1 against 410.1 tok/s, H200,
// 2026-11-30). With the late trigger it measured faster (same run, two rounds, 2026-11-30):
// Q4_K_M 426.7 / 429.2 against 424.1 / 424.1 tok/s, BF16 243.5 / 243.5 against 242.9 / 242.7.
bool use_decode_pdl() {
  static const bool env_off = [] {
    const char* e = std::getenv("DUET_ATTN_PDL");
    return e && std::strcmp(e, "0") == 0;
  }();
  return !env_off && device_has_merge_pdl();
}

// Groups of 4 warps a tensor-core decode block takes (attention_decode_tc_kernel's G): 4 for
// batches of more than 8 tokens at short contexts (grid bound <= kGroupedMaxKeys: one block per
// token and KV head takes its whole context G tiles at a time, no split and no merge), 1 for the
// 1-8 token batches of the matrix-vector path (short splits and the merge measured faster there)
// and on the generic path (DUET_KERNELS=generic: what a V100's 96 KB of shared memory holds);
// fewer where the device's shared memory per block cannot hold them. DUET_ATTN_GROUPS=1, 2 or 4
// forces a value for every batch (A/B knob, read once).
constexpr int kGroupedMaxKeys = 512;  // grids of at most 2 passes of 4 tiles
int decode_groups(int n_tokens, int head_dim, int max_kv_len) {
  static const int forced = [] {
    const char* e = std::getenv("DUET_ATTN_GROUPS");
    const int g = e && *e ? std::atoi(e) : 0;
    return g == 1 || g == 2 || g == 4 ? g : 0;
  }();
  int g = forced > 0 ? forced : (n_tokens > kernels::kDecodeMaxTokens && max_kv_len <= kGroupedMaxKeys &&
                                          !env_wants_generic_prompt()
                                      ? 4
                                      : 1);
  const auto need_kb = [head_dim](int groups) {  // dynamic + static (block table offsets, row statistics)
    const size_t dyn = head_dim == 64 ? DtShape<64>::smem_bytes(groups) : DtShape<128>::smem_bytes(groups);
    return static_cast<int>((dyn + groups * (kDtKeys * 8 + 3 * 16 * 4)) / 1024 + 1);
  };
  const int have_kb = detail::current_smem_optin() / 1024;
  while (g > 1 && need_kb(g) > have_kb) g /= 2;
  return g;
}

// Whether the tensor-core decode kernels, launched programmatically for a decode batch of
// n_tokens, read the batch metadata, block tables and older keys before their wait
// (attention_decode_tc_kernel): for batches of 1-8 tokens and for batches on the grouped kernel
// (`grouped`: whole short contexts a block, decode_groups), not for larger batches on the split
// kernel (the 32-sequence step measured 0.4% slower with it there); for every batch with
// DUET_ATTN_EARLY_KV=all, never with DUET_ATTN_EARLY_KV=0 (read once per process; A/B knob).
// The grouped kernel's 32-sequence qwen2-7b Q4_K_M step: 3.340 / 3.337 ms against 3.356 / 3.346
// without (H200, 2026-12-01, two rounds).
bool use_early_kv(int n_tokens, bool grouped) {
  static const int mode = [] {  // 0 off, 1 batches of 1-8 tokens and grouped batches, 2 all
    const char* e = std::getenv("DUET_ATTN_EARLY_KV");
    if (e != nullptr && std::strcmp(e, "all") == 0) return 2;
    return env_flag("DUET_ATTN_EARLY_KV", true) ? 1 : 0;
  }();
  return mode == 2 || (mode == 1 && (n_tokens <= kernels::kDecodeMaxTokens || grouped));
}

// Whether the merge takes more than kMergeBatch pieces through merge_wide (the pieces spread over
// the block's warps) rather than merge_many: unless DUET_ATTN_MERGE_WIDE=0 (read once per process;
// A/B knob). H200 (perf.md session 39): one token at 16384 / 32768 keys, decode + merge 25.8 /
// 52.3 us -> 21.7 / 39.5 (tile-by-tile decode kernel); qwen2-7b Q4_K_M tg128 @ d16384 with the
// mma decode kernel 363.8 -> 382.6 tok/s (one round each).
bool use_merge_wide() {
  static const bool v = env_flag("DUET_ATTN_MERGE_WIDE", true);
  return v;
}

// Whether a decode launch takes the mma.sync ring kernel (attention_decode_mma_kernel) rather
// than the tile-by-tile one: on the tensor-core decode path with one group of 4 warps a block
// (not the grouped kernel of short-context batches), where the mma kernels run (sm_80+ code, not
// DUET_KERNELS=generic: `mma_ok`), for pieces of at least DUET_ATTN_DECODE_MMA_MIN keys
// (default kDecodeMmaMinKeys; piece_keys: the longest piece at the grid's context bound).
// DUET_ATTN_DECODE_MMA=0 never, =1 for every piece length (read once per process; A/B knobs).
// H200 (perf.md session 39): with =1 the one-sequence qwen2-7b Q4_K_M step at short contexts
// (32-key pieces) took 2.02-2.03 ms against 1.96-1.97, and 32 sequences on it (DUET_ATTN_GROUPS=1)
// 3.35-3.36 ms (3.24 without short splits) against the grouped kernel's 3.21-3.23; pieces of two
// tiles (tg128 @ d4096) were level, of four (d16384) 3% faster. piece_keys comes from the grid's
// bound (a decode graph's context bucket, up to twice the real context), so the real pieces can
// be half as long: 256 keys at the bound keep them at two tiles or more.
constexpr int kDecodeMmaMinKeys = 256;
bool use_decode_mma(bool mma_ok, int piece_keys) {
  static const int mode = [] {  // -1 auto, 0 off, 1 on
    const char* e = std::getenv("DUET_ATTN_DECODE_MMA");
    if (e == nullptr || *e == '\0') return -1;
    return env_flag("DUET_ATTN_DECODE_MMA", false) ? 1 : 0;
  }();
  static const int min_keys = [] {
    const int e = env_int("DUET_ATTN_DECODE_MMA_MIN", 32, 1 << 20);
    return e > 0 ? e : kDecodeMmaMinKeys;
  }();
  if (!mma_ok || mode == 0) return false;
  return mode == 1 || piece_keys >= min_keys;
}

}  // namespace

size_t attention_scratch_bytes(int n_tokens, int n_heads, int head_dim, int max_kv_len) {
  const int splits = split_plan(n_tokens, n_heads, max_kv_len).grid;
  if (splits <= 1) return 0;
  return sizeof(float) * static_cast<size_t>(n_tokens) * n_heads * splits * (head_dim + 2);
}

void launch_attention(const PagedKvCache& kv, const AttentionBatch& batch, const float* q, int64_t ldq, int n_heads,
                      float scale, int sliding_window, float* out, int64_t ldo, cudaStream_t stream,
                      AttentionQ8Out q8, AttentionF16Out h16) {
  if (batch.n_tokens <= 0) return;
  const int D = kv.head_dim;
  DUET_CHECK_MSG(D == 64 || D == 128 || D == 256, "attention head_dim %d not in {64, 128, 256}", D);
  DUET_CHECK_MSG(kv.n_kv_heads > 0 && n_heads % kv.n_kv_heads == 0, "n_heads %d not a multiple of n_kv_heads %d",
                 n_heads, kv.n_kv_heads);
  DUET_CHECK_MSG(kv.dtype == DType::kF16 || kv.dtype == DType::kF32, "KV cache dtype %d not F16/F32",
                 static_cast<int>(kv.dtype));
  DUET_CHECK_MSG(ldq % 4 == 0 && ldo % 4 == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % 16 == 0,
                 "attention q/out need 16-byte aligned rows (ldq %lld, ldo %lld)", static_cast<long long>(ldq),
                 static_cast<long long>(ldo));
  DUET_CHECK_MSG(batch.max_kv_len > 0 && batch.n_seqs > 0 && batch.n_seqs <= 65535 && batch.max_seq_tokens >= 0,
                 "attention batch bounds: max_kv_len %d, n_seqs %d", batch.max_kv_len, batch.n_seqs);
  const int group = n_heads / kv.n_kv_heads;
  int hb = 1;
  for (int c = std::min(group, kMaxHeads); c >= 1; --c)
    if (group % c == 0) {
      hb = c;
      break;
    }
  // The long-context split length comes from today's split count (decode_splits), not the
  // grid's: short splits only ever cut a token's keys finer (token_split_len).
  const bool tc_decode = kv.dtype == DType::kF16 && D <= 128 && group <= 16;  // launch_by_dim's decode kernel
  const int groups = tc_decode ? decode_groups(batch.n_tokens, D, batch.max_kv_len) : 1;
  SplitPlan plan = split_plan(batch.n_tokens, n_heads, batch.max_kv_len);
  if (groups > 1) {  // pieces of >= kSplitMinKeys keys, each taken G tiles at a time (no short splits)
    plan.grid = decode_splits(batch.n_tokens, n_heads, batch.max_kv_len);
    plan.short_splits = 0;
  }
  const int splits = plan.grid;
  const int long_splits = decode_splits(batch.n_tokens, n_heads, batch.max_kv_len);
  const int eff_keys = sliding_window > 0 ? std::min(batch.max_kv_len, sliding_window) : batch.max_kv_len;
  const int split_len = static_cast<int>(detail::ceil_div(detail::ceil_div(eff_keys, long_splits), 32) * 32);
  const size_t need = attention_scratch_bytes(batch.n_tokens, n_heads, D, batch.max_kv_len);
  DUET_CHECK_MSG(need == 0 || (batch.scratch && batch.scratch_bytes >= need),
                 "attention scratch: %zu bytes given, %zu needed", batch.scratch_bytes, need);
  const bool mixed = batch.max_seq_tokens > 1;
  DUET_CHECK_MSG(!mixed || (batch.seq_token_begin && batch.seq_n_tokens),
                 "a batch with multi-token sequences needs seq_token_begin and seq_n_tokens");

  AttnArgs a{};
  a.k = kv.k;
  a.v = kv.v;
  a.kv_block_size = kv.kv_block_size;
  a.n_kv_heads = kv.n_kv_heads;
  a.positions = batch.positions;
  a.seq_ids = batch.seq_ids;
  a.block_tables = batch.block_tables;
  a.max_blocks = batch.max_blocks;
  a.seq_token_begin = batch.seq_token_begin;
  a.seq_n_tokens = batch.seq_n_tokens;
  a.only_single = mixed;
  a.q = q;
  a.ldq = ldq;
  a.n_heads = n_heads;
  a.group = group;
  a.hb = hb;
  a.scale = scale;
  a.window = sliding_window;
  a.out = out;
  a.ldo = ldo;
  a.part = static_cast<float*>(batch.scratch);
  a.max_splits = splits;
  a.split_len = split_len;
  a.short_splits = plan.short_splits;
  if (q8.q != nullptr) {
    DUET_CHECK_MSG(batch.max_seq_tokens <= 1 && batch.n_tokens <= kernels::kDecodeMaxTokens && q8.m != nullptr,
                   "attention int8 output: decode batches of <= %d tokens only (max_seq_tokens %d, n_tokens %d)",
                   kernels::kDecodeMaxTokens, batch.max_seq_tokens, batch.n_tokens);
    a.q8 = q8.q;
    a.q8m = q8.m;
  }

  if (h16.h != nullptr) {
    DUET_CHECK_MSG(batch.max_seq_tokens <= 1 && q8.q == nullptr && h16.ld >= static_cast<int64_t>(n_heads) * D,
                   "attention F16 output: decode batches only, without the int8 output (max_seq_tokens %d, ld %lld)",
                   batch.max_seq_tokens, static_cast<long long>(h16.ld));
    a.h16 = h16.h;
    a.ld16 = h16.ld;
  }

  const bool f16 = kv.dtype == DType::kF16;
  const int nt = batch.n_tokens, ns = batch.n_seqs, mst = batch.max_seq_tokens;
  // Asked on every launch (decode-only too) so the one-time device query runs on the first,
  // eager launch rather than inside a captured decode graph.
  const bool mma_prompt = use_mma_prompt();
  const bool mma = f16 && mst > 1 && mma_prompt;
  const bool merge_pdl = use_merge_pdl();  // also on every launch, for the same reason
  const bool decode_pdl = mst <= 1 && use_decode_pdl();
  a.early_kv = decode_pdl && use_early_kv(batch.n_tokens, groups > 1);
  a.decode_q8 = groups > 1;
  a.merge_wide = use_merge_wide();
  // The longest piece a token of the grid's context bound gets (token_split_len on the device).
  const int piece_keys = piece_len(split_len, plan.short_splits, eff_keys);
  const bool decode_mma = tc_decode && groups == 1 && use_decode_mma(mma_prompt, piece_keys);
  if (D == 64) {
    if (f16) launch_by_dim<64, __half>(a, nt, ns, mst, splits, groups, mma, decode_mma, merge_pdl, decode_pdl, stream);
    else launch_by_dim<64, float>(a, nt, ns, mst, splits, groups, mma, decode_mma, merge_pdl, decode_pdl, stream);
  } else if (D == 128) {
    if (f16) launch_by_dim<128, __half>(a, nt, ns, mst, splits, groups, mma, decode_mma, merge_pdl, decode_pdl, stream);
    else launch_by_dim<128, float>(a, nt, ns, mst, splits, groups, mma, decode_mma, merge_pdl, decode_pdl, stream);
  } else {
    if (f16) launch_by_dim<256, __half>(a, nt, ns, mst, splits, groups, mma, decode_mma, merge_pdl, decode_pdl, stream);
    else launch_by_dim<256, float>(a, nt, ns, mst, splits, groups, mma, decode_mma, merge_pdl, decode_pdl, stream);
  }
  // Without a merge launch the int8 rows come from the quantizer (programmatic where the merge
  // would have been).
  if (q8.q != nullptr && splits <= 1 && !a.decode_q8)
    kernels::launch_quantize_act_q8(out, ldo, nt, static_cast<int64_t>(n_heads) * D, q8.q, q8.m, merge_pdl, stream);
}

void set_attention_prompt_path(AttentionPromptPath path) {
  g_prompt_override.store(static_cast<int>(path), std::memory_order_relaxed);
}

AttentionPromptPath attention_prompt_path() {
  return use_mma_prompt() ? AttentionPromptPath::kMma : AttentionPromptPath::kGeneric;
}

}  // namespace duet::cuda
