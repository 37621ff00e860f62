// Paged attention on the GPU (launch_attention; contract and cache layout in attention.h).
// Three kernels, all FP32 SIMT with warp shuffles (nothing newer than sm_70, so this is also the
// generic path):
//   - prompt: flash-attention tiles (a tile of BM query rows of one sequence and one query head
//     against BN-key tiles, online softmax), for sequences with several tokens in the batch;
//   - decode: one query token per block, all query heads of a KV-head group (up to 8) together so
//     K/V are read once per group, the context optionally split over several blocks;
//   - merge: combines the split partial results (scratch from AttentionBatch::scratch).
// The launcher picks by batch shape: max_seq_tokens <= 1 runs decode only; otherwise the prompt
// kernel takes sequences with >= 2 tokens and the decode kernel those with one (a mixed batch).
// Runs on the caller's stream; no allocation; no synchronisation (graph-capturable; the
// one-time cudaFuncSetAttribute for large shared memory happens on the first launch).
#include <algorithm>
#include <climits>
#include <atomic>

#include "base/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"

namespace duet::cuda {
namespace {

// ---- Split policy (shared by attention_scratch_bytes and the launcher) ----
constexpr int kMaxSplits = 128;
constexpr int kSplitMinKeys = 256;         // below this a split is not worth its merge
constexpr int64_t kSplitTargetRows = 8192;  // (token, head, split) rows that fill an H200 well

int decode_splits(int n_tokens, int n_heads, int max_kv_len) {
  const int64_t by_keys = detail::ceil_div(std::max(max_kv_len, 1), kSplitMinKeys);
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(n_tokens) * n_heads);
  const int64_t by_rows = std::max<int64_t>(1, kSplitTargetRows / rows);
  return static_cast<int>(std::clamp<int64_t>(std::min(by_keys, by_rows), 1, kMaxSplits));
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
  const float* q;
  int64_t ldq;
  int n_heads;
  int group;  // query heads per KV head
  int hb;     // decode: query heads per block (a divisor of group, <= kMaxHeads)
  float scale;
  int window;  // 0: full attention
  float* out;
  int64_t ldo;
  float* part;     // decode partials: [n_tokens][n_heads][max_splits][head_dim + 2] (o, m, l)
  int max_splits;  // the partials' stride
  int split_len;   // keys per split (multiple of 32)
};

__device__ __forceinline__ int window_begin(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

// ---- Decode ----
constexpr int kDecWarps = 4;
constexpr int kMaxHeads = 8;

// Grid (n_tokens, n_heads / hb, splits), 128 threads. Block = one token, hb query heads sharing
// KV head kvh, keys [k0, k1) of the token's allowed range (split `blockIdx.z` of split_len keys).
// Warp w takes 32-key tiles w, w+4, ...: lane j scores key j against the hb query heads (its K
// row read with 16-byte loads, q broadcast from shared memory), the warp updates per-head
// online-softmax state, then lanes split head_dim for the weighted sum of V rows. Warps are
// merged through shared memory at the end; a single split writes `out`, several write partials.
// q: float, pre-multiplied by scale here; K/V: T = __half or float. Memory-bound on K/V reads:
// expect >= 50% of HBM bandwidth at long contexts (the issue rate of FMAs + shared loads is
// of the same order as the bytes at group 7, head_dim 128).
template <int D, typename T>
__global__ void __launch_bounds__(kDecWarps * 32, 4) attention_decode_kernel(AttnArgs a) {
  constexpr int kDpl = D / 32;             // V dims per lane
  constexpr int kVec = 16 / sizeof(T);     // K elements per 16-byte load
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
  const int k0 = kb + split * a.split_len;
  if (k0 >= ke) return;
  const int k1 = min(ke, k0 + a.split_len);
  const int n_splits = (ke - kb + a.split_len - 1) / a.split_len;
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
      const T* kr = kc + off;
#pragma unroll 4
      for (int d = 0; d < D; d += kVec) {
        float kf[kVec];
        detail::load_as_float<T, kVec>(kr + d, kf);
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
#pragma unroll 4
    for (int j = 0; j < nv; ++j) {  // only real keys: unwritten cache slots may hold NaN bits
      const int64_t offj = __shfl_sync(detail::kFullMask, off, j);
      float vf[kDpl];
      detail::load_as_float<T, kDpl>(vc + offj + lane * kDpl, vf);
#pragma unroll
      for (int h = 0; h < kMaxHeads; ++h) {
        if (h < hb) {
          const float w = pw[warp][h][j];
#pragma unroll
          for (int e = 0; e < kDpl; ++e) acc[h][e] = fmaf(w, vf[e], acc[h][e]);
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
      a.out[static_cast<int64_t>(t) * a.ldo + static_cast<int64_t>(head) * D + d] = O / L;
    } else {
      float* pp = a.part + ((static_cast<int64_t>(t) * a.n_heads + head) * a.max_splits + split) * (D + 2);
      pp[d] = O;
      if (d == 0) {
        pp[D] = mx;
        pp[D + 1] = L;
      }
    }
  }
}

// Grid (n_tokens, n_heads), head_dim threads: out = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M)
// over the token's splits (tokens with one split were written by the decode kernel). Reads
// (head_dim + 2) floats per split: negligible next to the K/V bytes.
__global__ void attention_merge_kernel(AttnArgs a, int head_dim) {
  const int t = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
  if (a.only_single && a.seq_n_tokens[a.seq_ids[t]] != 1) return;
  const int pos = a.positions[t];
  const int n_keys = pos + 1 - window_begin(pos, a.window);
  const int n_splits = (n_keys + a.split_len - 1) / a.split_len;
  if (n_splits <= 1) return;
  const float* pp = a.part + (static_cast<int64_t>(t) * a.n_heads + head) * a.max_splits * (head_dim + 2);
  float mx = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, pp[s * (head_dim + 2) + head_dim]);
  float L = 0.0f, O = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    const float* ps = pp + s * (head_dim + 2);
    const float f = expf(ps[head_dim] - mx);
    L += ps[head_dim + 1] * f;
    O += ps[d] * f;
  }
  a.out[static_cast<int64_t>(t) * a.ldo + static_cast<int64_t>(head) * head_dim + d] = O / L;
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
// FP32 FMA-bound: ~10-20 TFLOP/s on an H200 (a tensor-core variant would be several times faster).
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

template <int D, typename T>
void launch_by_dim(const AttnArgs& a, int n_tokens, int n_seqs, int max_seq_tokens, int splits, cudaStream_t stream) {
  if (max_seq_tokens > 1) {
    if constexpr (D == 64) launch_prompt<64, 4, 4, T>(a, n_seqs, max_seq_tokens, stream);
    else if constexpr (D == 128) launch_prompt<128, 4, 2, T>(a, n_seqs, max_seq_tokens, stream);
    else launch_prompt<256, 2, 2, T>(a, n_seqs, max_seq_tokens, stream);
  }
  const dim3 grid(n_tokens, a.n_heads / a.hb, splits);
  attention_decode_kernel<D, T><<<grid, kDecWarps * 32, 0, stream>>>(a);
  DUET_CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    attention_merge_kernel<<<dim3(n_tokens, a.n_heads), D, 0, stream>>>(a, D);
    DUET_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

size_t attention_scratch_bytes(int n_tokens, int n_heads, int head_dim, int max_kv_len) {
  const int splits = decode_splits(n_tokens, n_heads, max_kv_len);
  if (splits <= 1) return 0;
  return sizeof(float) * static_cast<size_t>(n_tokens) * n_heads * splits * (head_dim + 2);
}

void launch_attention(const PagedKvCache& kv, const AttentionBatch& batch, const float* q, int64_t ldq, int n_heads,
                      float scale, int sliding_window, float* out, int64_t ldo, cudaStream_t stream) {
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
  const int splits = decode_splits(batch.n_tokens, n_heads, batch.max_kv_len);
  const int eff_keys = sliding_window > 0 ? std::min(batch.max_kv_len, sliding_window) : batch.max_kv_len;
  const int split_len = static_cast<int>(detail::ceil_div(detail::ceil_div(eff_keys, splits), 32) * 32);
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

  const bool f16 = kv.dtype == DType::kF16;
  const int nt = batch.n_tokens, ns = batch.n_seqs, mst = batch.max_seq_tokens;
  if (D == 64) {
    if (f16) launch_by_dim<64, __half>(a, nt, ns, mst, splits, stream);
    else launch_by_dim<64, float>(a, nt, ns, mst, splits, stream);
  } else if (D == 128) {
    if (f16) launch_by_dim<128, __half>(a, nt, ns, mst, splits, stream);
    else launch_by_dim<128, float>(a, nt, ns, mst, splits, stream);
  } else {
    if (f16) launch_by_dim<256, __half>(a, nt, ns, mst, splits, stream);
    else launch_by_dim<256, float>(a, nt, ns, mst, splits, stream);
  }
}

}  // namespace duet::cuda
