// Batched-decode products y = W x^T (2 <= n_tokens <= 64) of Q4_K, Q5_K, Q6_K and Q8_0 weights on
// tensor cores: each CTA streams the quantized blocks of 256 columns ("a stage": one K-quant
// super-block or eight Q8_0 blocks) of 16 * MT * W rows (W warps of MT m16 tiles) and the matching
// F16 activation tile into shared memory (cp.async, multi-stage), decodes the weights to F16 in
// registers and multiplies with mma.sync m16n8k16 (F32 accumulators). Work is split "stream-K":
// the (row block, stage) units are dealt out evenly to one wave of CTAs, and a row block shared by
// two CTAs is summed with float atomics into a zeroed y. Owns no memory; runs on the caller's
// stream. sm_80+ only (the kernel bodies trap when compiled for older targets).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "base/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cta_timeline.cuh"
#include "kernels/cuda/cta_timeline.h"
#include "kernels/cuda/quant_mma.h"
#include "kernels/cuda/quant_types.cuh"
#include "runtime/cuda_check.h"

namespace duet::cuda::kernels {
namespace {

using detail::cp_async16;
using detail::cp_async4;
using detail::cp_async_commit;
using detail::cp_async_wait;

constexpr int kSbCols = 256;             // columns of one stage: one K-quant super-block
constexpr int kXChunks = kSbCols / 8;    // 16-byte chunks of one activation row of a stage
constexpr int kSmemBudget = 112 * 1024;  // per CTA, so that two CTAs share an SM where they fit

// Device layout of one row's 256 columns as the kernel stages them (see quant_types.cuh).
template <DType T>
struct MmaType;
template <>
struct MmaType<DType::kQ8_0> {
  // Region A of the split layout: qs[32] per block, 8 blocks (256 bytes) a row per stage, stored
  // with an XOR swizzle of their 16-byte chunks (q8_chunk); d (8 halves, 2-byte aligned in region
  // D) staged as the 5 aligned words around them. Rows may end inside a stage (K % 256 != 0).
  static constexpr int kBlockCols = 32, kBlockBytes = 32, kPitch = 256, kChunks16 = 16;
  static constexpr bool kSplitD = true;
};
template <>
struct MmaType<DType::kQ4_K> {
  // The device block (quant_types.cuh: the file's, qs repacked): d, dmin, scales[12], qs[128].
  // 144 = 9 units of 16 bytes; a pitch of 9 units makes the fragment loads below free of bank
  // conflicts.
  static constexpr int kBlockCols = 256, kBlockBytes = 144, kPitch = 144, kChunks16 = 9;
  static constexpr bool kSplitD = false;
};
template <>
struct MmaType<DType::kQ5_K> {
  // The file's block: d, dmin, scales[12], qh[32], qs[128]. 11 units of 16 bytes: conflict-free
  // too.
  static constexpr int kBlockCols = 256, kBlockBytes = 176, kPitch = 176, kChunks16 = 11;
  static constexpr bool kSplitD = false;
};
template <>
struct MmaType<DType::kQ6_K> {
  // Region A of the split layout: ql[128], qh[64], scales[16]; d in region D (staged apart).
  static constexpr int kBlockCols = 256, kBlockBytes = 208, kPitch = 208, kChunks16 = 13;
  static constexpr bool kSplitD = true;
};

struct MmaArgs {
  const uint8_t* w;   // blocks (region A for split types)
  const uint8_t* wd;  // region D (split types), else null
  int64_t n_rows;
  int64_t bpr;  // blocks per row (of the type's block: 256 or 32 weights)
  int64_t spr;  // stages (256 columns) per row
  int64_t n_cols;
  int64_t row_bytes;  // non-split types
  const __half* x;
  int64_t ldx;
  int n;
  float* y;
  int64_t ldy;
  int64_t units;  // row blocks * spr
  int accumulate;  // y += the product (else y = it; shared row blocks then need y zeroed first)
  float* zero;     // a side job: zero[0 .. zero_n) = 0 (launch_matmul_mma's `zero`), or null
  int64_t zero_n;
  // The byte-permute magics of the nibble decoders, 0x64646464 and 0x54545454, as arguments: a
  // register each for the whole kernel, where literals had ptxas rebuild the permute's selector in
  // a register before each use.
  uint32_t magic64, magic54;
};

constexpr int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

template <DType T, int N, int W, int MT = 2>
struct MmaShape {
  using Q = MmaType<T>;
  static constexpr int kThreads = 32 * W;
  static constexpr int kRows = 16 * MT * W;  // MT m16 tiles per warp
  static constexpr int kWBytes = kRows * Q::kPitch;
  static constexpr int kDWords = T == DType::kQ8_0 ? 5 : 1;  // region D words staged per row
  static constexpr int kDBytes = Q::kSplitD ? kRows * 4 * kDWords : 0;
  static constexpr int kXBytes = 8 * N * kSbCols * 2;
  static constexpr int kStageBytes = kWBytes + kDBytes + kXBytes;
  static constexpr int kStages = clamp_int(kSmemBudget / kStageBytes, 2, 4);
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kWBytes % 16 == 0 && kDBytes % 16 == 0, "stage parts must stay 16-byte aligned");
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

// Physical 16-byte chunk of chunk q of activation row t in a stage: an XOR swizzle of q's low
// three bits by bits 3-4 of q and the row's parity, so that the 8 lanes of a quarter warp (rows
// g, g + 1; four q >> 3 values) read 8 different bank groups in both decoders below.
__device__ __forceinline__ int x_swizzle(int t, int q) {
  return q ^ ((((q >> 3) & 3) << 1) | (t & 1));
}

// Q4_K's repacked blocks (quant_types.cuh) pair weights 32t + i and 128 + 32t + i in qs bytes
// 32t + i, where the file pairs 64t + i and 64t + 32 + i; compute_q45k reads both layouts at the
// same staged positions, so Q4_K's activations are staged permuted: the staged chunk that the
// file layout's decoder reads as columns 64t + 8m (slot 8t + m, m < 4) holds x chunk 4t + m
// (columns 32t + 8m .. + 7), and slot 8t + 4 + m holds chunk 16 + 4t + m; then every slot goes
// through x_swizzle as before. q4k_source(slot) is that chunk.
__device__ __forceinline__ int q4k_source(int slot) {
  return 4 * (slot >> 3) + (slot & 3) + 16 * ((slot >> 2) & 1);
}

// Physical 16-byte chunk of chunk c (< 16) of a staged Q8_0 row r (256 bytes: 16 units, so every
// row starts in bank group 0): lane (g, t) reads chunk 4t + m of rows g, g + 1, ...; XOR-ing bits 0
// and 1 with bit 3 of c and the row's parity gives the 8 lanes of a quarter warp 8 bank groups.
__device__ __forceinline__ int q8_chunk(int r, int c) {
  return c ^ (((c >> 3) & 1) | ((r & 1) << 1));
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
__device__ __forceinline__ __half2 bits_h2(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, 4);
  return h;
}

// c += a * b: A 16x16 F16 (row major), B 16x8 F16 (column major), C 16x8 F32. Fragments as in
// the PTX ISA: a0 (row g, k 2t..2t+1), a1 (row g+8, same k), a2 (row g, k 2t+8..), a3 (row g+8,
// k 2t+8..); b0 (k 2t..2t+1, column g), b1 (k 2t+8..); c0,c1 (row g, columns 2t, 2t+1), c2,c3
// (row g+8), for lane = 4g + t.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The four k-steps of one 64-column piece for each of the MT m16 tiles and token tile nt: A fragments
// af[mt][0..3] against the x chunks v0 (k-steps 0, 1) and v1 (k-steps 2, 3).
template <int N, int MT>
__device__ __forceinline__ void mma_k64(float (&acc)[MT][N][4], const uint32_t (&af)[MT][4][4], int nt, const uint4& v0,
                                        const uint4& v1) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    mma16816(acc[mt][nt], af[mt][0], v0.x, v0.y);
    mma16816(acc[mt][nt], af[mt][1], v0.z, v0.w);
    mma16816(acc[mt][nt], af[mt][2], v1.x, v1.y);
    mma16816(acc[mt][nt], af[mt][3], v1.z, v1.w);
  }
}

// (q - magic) * s + b on two halves; q - magic is exact (small integers), then one rounding.
__device__ __forceinline__ uint32_t deq_fma(uint32_t q, uint32_t magic, uint32_t s, uint32_t b) {
  return h2_bits(__hfma2(__hsub2(bits_h2(q), bits_h2(magic)), bits_h2(s), bits_h2(b)));
}
__device__ __forceinline__ uint32_t deq_mul(uint32_t q, uint32_t magic, uint32_t s) {
  return h2_bits(__hmul2(__hsub2(bits_h2(q), bits_h2(magic)), bits_h2(s)));
}

// Stage unit (rb, sb)'s bytes into stage buffer st: the weight super-blocks (column block sb) of
// rows rb * kRows .. + kRows (zero-filled past n_rows), region D's d of those rows (split types: the
// aligned 4-byte pair holding it), and activation columns sb * 256 .. + 256 of 8N tokens
// (zero-filled past n). One commit group per call is left to the caller. Every loop has a
// compile-time trip count and each copy's address is a 32-bit offset from a per-stage base (the
// launcher checks that a row block's bytes stay under 2^31): the copies are issued by a handful of
// integer instructions each, which matters because the kernel is bound by instruction issue.
// kParts: kStageWeights (the weight bytes and region D), kStageX (the activations) or both.
constexpr int kStageWeights = 1, kStageX = 2, kStageAll = 3;
// The thread's weight copies of a stage, K-quants: copy i is chunk c = threadIdx.x + i kThreads of
// the stage (row c / kChunks16, 16-byte part c % kChunks16), whose source offset from the stage's
// base, r pitch + 16 part, is the same in every stage: found once a launch (off), so that a copy
// is a compare, a select and an add (Q4_K at 32 tokens: ~14 integer instructions a copy before).
template <DType T, int N, int W, int MT>
struct WeightCopies {
  using S = MmaShape<T, N, W, MT>;
  static constexpr int kChunks = S::kRows * MmaType<T>::kChunks16;
  static constexpr int kCount = (kChunks + S::kThreads - 1) / S::kThreads;
  uint32_t off[kCount];  // unsigned: zero-extended into the 64-bit address for free
};
template <DType T, int N, int W, int MT>
__device__ __forceinline__ void weight_copies(const MmaArgs& a, WeightCopies<T, N, W, MT>& wc) {
  using Q = MmaType<T>;
  const int pitch = static_cast<int>(Q::kSplitD ? a.bpr * Q::kBlockBytes : a.row_bytes);
#pragma unroll
  for (int i = 0; i < WeightCopies<T, N, W, MT>::kCount; ++i) {
    const int c = static_cast<int>(threadIdx.x) + i * MmaShape<T, N, W, MT>::kThreads;
    const int r = c / Q::kChunks16;
    wc.off[i] = static_cast<uint32_t>(r * pitch + (c - r * Q::kChunks16) * 16);
  }
}

template <DType T, int N, int W, int MT, int kParts = kStageAll>
__device__ __forceinline__ void load_stage(const MmaArgs& a, uint8_t* st, int64_t rb, int sb,
                                           const WeightCopies<T, N, W, MT>& wc) {
  using S = MmaShape<T, N, W, MT>;
  using Q = MmaType<T>;
  const int64_t row0 = rb * S::kRows;
  const int rows_left = static_cast<int>(min(a.n_rows - row0, static_cast<int64_t>(S::kRows)));
  // Bytes of one row in the weight region: row_bytes, or bpr blocks of the split layout.
  const int pitch = static_cast<int>(Q::kSplitD ? a.bpr * Q::kBlockBytes : a.row_bytes);
  const uint8_t* base =
      a.w + row0 * pitch + (T == DType::kQ8_0 ? 8 * Q::kBlockBytes : Q::kBlockBytes) * sb;
  constexpr int kChunks = S::kRows * Q::kChunks16;
  // One m16 tile a warp (MT = 1) leaves a last partial round of copies (Q4_K: 9 chunks a row).
  constexpr bool kWhole = kChunks % S::kThreads == 0;
  if constexpr ((kParts & kStageWeights) != 0 && T != DType::kQ8_0) {
    // Rows past n_rows: offsets from rows_left * pitch on (a part's 16 bytes start below its
    // row's end, 16 part < pitch), zero-filled from the stage's base, a valid address.
    const uint32_t lim = static_cast<uint32_t>(rows_left * pitch);
#pragma unroll
    for (int i = 0; i < WeightCopies<T, N, W, MT>::kCount; ++i) {
      const int c = threadIdx.x + i * S::kThreads;
      // Only the last round can run past the stage's chunks (threadIdx.x < kThreads).
      if (!kWhole && (i + 1) * S::kThreads > kChunks && c >= kChunks) break;
      const bool ok = wc.off[i] < lim;
      cp_async16(st + c * 16, base + (ok ? wc.off[i] : 0u), ok ? 16 : 0);
    }
    if constexpr (Q::kSplitD) {
      // Region D is 2-byte aligned per entry: copy the aligned pair (2 bytes at the very end).
      const int r = threadIdx.x;
      if (S::kRows >= S::kThreads || r < S::kRows) {  // one thread a row
        const int64_t row = row0 + r;
        const uint8_t* src = a.wd;
        int bytes = 0;
        if (row < a.n_rows) {
          const int64_t total = a.n_rows * a.bpr;
          const int64_t idx = (row * a.bpr + sb) & ~int64_t{1};
          src = a.wd + idx * 2;
          bytes = idx + 1 < total ? 4 : 2;
        }
        cp_async4(st + S::kWBytes + 4 * r, src, bytes);
      }
    }
  }
  if constexpr ((kParts & kStageWeights) != 0 && T == DType::kQ8_0) {
#pragma unroll
    for (int i = 0; i < (kChunks + S::kThreads - 1) / S::kThreads; ++i) {
      const int c = threadIdx.x + i * S::kThreads;
      if (!kWhole && c >= kChunks) break;
      const int r = c / Q::kChunks16, part = c - r * Q::kChunks16;
      const bool ok = r < rows_left && (part >> 1) < a.bpr - 8 * sb;  // none past the row's end
      // Block sb * 8 + part / 2, half part % 2, i.e. byte 16 * part of the stage's row bytes.
      const uint8_t* src = ok ? base + (r * pitch + part * 16) : a.w;
      cp_async16(st + r * Q::kPitch + 16 * q8_chunk(r, part), src, ok ? 16 : 0);
    }
    {
      // d's of blocks sb * 8 .. + 7: the 5 aligned words from the even index at or below the first
      // (halves past region D's end zero-filled; halves of the next row are never used).
      const int r = threadIdx.x;
      if (S::kRows >= S::kThreads || r < S::kRows) {  // one thread a row
        const int64_t row = row0 + r;
        const int64_t total = a.n_rows * a.bpr;
        const int64_t first = (row * a.bpr + sb * 8) & ~int64_t{1};
#pragma unroll
        for (int j = 0; j < 5; ++j) {
          const int64_t h = first + 2 * j;
          const int64_t left = row < a.n_rows ? total - h : 0;
          const int bytes = left >= 2 ? 4 : (left == 1 ? 2 : 0);
          cp_async4(st + S::kWBytes + 20 * r + 4 * j, bytes ? a.wd + h * 2 : a.wd, bytes);
        }
      }
    }
  }  // kStageWeights
  if constexpr ((kParts & kStageX) == 0) return;
  uint4* xs = reinterpret_cast<uint4*>(st + S::kWBytes + S::kDBytes);
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(a.x + sb * kSbCols);
  const int cols_left = static_cast<int>(min(a.n_cols - static_cast<int64_t>(sb) * kSbCols,
                                             static_cast<int64_t>(kSbCols)));
  constexpr int kXCopies = 8 * N * kXChunks;
  static_assert(kXCopies % S::kThreads == 0, "whole activation copies per thread");
  // Thread c of a pass fills staged chunk (slot) c % kXChunks of token row c / kXChunks; a pass
  // covers kPassRows rows, so each thread keeps its slot (and, kPassRows being even, its row
  // parity, hence its x_swizzle) in every pass: the slot, its source chunk (Q4_K: permuted by
  // q4k_source) and both offsets are computed once. Consecutive threads fill consecutive staged
  // chunks (conflict-free stores). The sources are unsigned byte offsets from the stage's base
  // (the launcher keeps 8N rows of x under 2^31 halves), the base itself for zero-filled copies:
  // a zero-extended add a copy, no 64-bit arithmetic (the 32-token Q4_K stage's copies: 199 ->
  // 142 instructions; qwen2-7b Q4_K_M 32-sequence step -1.1 to -1.4%, H200, 2026-12-03,
  // perf.md).
  constexpr int kPassRows = S::kThreads / kXChunks;
  static_assert(S::kThreads % kXChunks == 0 && kPassRows % 2 == 0,
                "slot and row parity fixed per thread");
  const int slot = static_cast<int>(threadIdx.x) % kXChunks;
  const int t0 = static_cast<int>(threadIdx.x) / kXChunks;
  const int q = T == DType::kQ4_K ? q4k_source(slot) : slot;
  const bool q_ok = q * 8 < cols_left;
  const uint32_t ldx2 = static_cast<uint32_t>(a.ldx) * 2;  // bytes
  const uint32_t src0 = static_cast<uint32_t>(t0) * ldx2 + static_cast<uint32_t>(q) * 16;
  uint4* const dst0 = xs + t0 * kXChunks + x_swizzle(t0, slot);
#pragma unroll
  for (int i = 0; i < kXCopies / S::kThreads; ++i) {
    const bool ok = t0 + i * kPassRows < a.n && q_ok;
    cp_async16(dst0 + i * kPassRows * kXChunks, xb + (ok ? src0 + i * kPassRows * ldx2 : 0u),
               ok ? 16 : 0);
  }
}

// Q4_K and Q5_K, one staged super-block. Lane (g, t) of warp w owns, for each of its 2 MT rows
// (16 MT w + 16mt + g + 8rr), qs bytes 32t .. 32t + 31 = weights 64t + i (low nibbles, sub-block 2t)
// and 64t + 32 + i (high nibbles, sub-block 2t + 1), i < 32; Q5_K adds bit 2t (low) and 2t + 1
// (high) of qh[i] as the fifth bit. Q4_K's repacked qs hold weights 32t + i (sub-block t) and
// 128 + 32t + i (sub-block t + 4) there instead; its activations are staged permuted to match
// (q4k_source), so below "columns" are those of the file layout. The k order inside the block is
// permuted (a dot product does not care, as long as x follows): k-step (i, h) (word i of those 32
// bytes, h = high nibbles) holds weights 64t + 32h + 4i + {0,1} at k slots 2t, 2t+1 and + {2,3} at
// 2t+8, 2t+9, so the activation fragment of the same lane is x columns 64t + 32h + 4i .. + 3:
// 8 bytes, and two k-steps one 16-byte load of the staged tile.
template <DType T, int N, int W, int MT>
__device__ __forceinline__ void compute_q45k(const uint8_t* st, const uint4* xs,
                                             float (&acc)[MT][N][4], uint32_t magic64,
                                             uint32_t magic54) {
  constexpr bool kQ5 = T == DType::kQ5_K;
  constexpr int kQs = kQ5 ? 48 : 16;  // offset of qs in the block
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  uint4 qs[MT][2][2];
  uint32_t s_lo[MT][2], m_lo[MT][2], s_hi[MT][2], m_hi[MT][2];
  // Sub-blocks 2t, 2t + 1 < 4 (t < 2): bytes 2t, 2t + 1 of scales[0..3] (sc) and [4..7] (m), low 6
  // bits; >= 4: the low (sc) and high (m) nibbles of scales[8 + ..] and the top 2 bits of bytes
  // 2t - 4, 2t - 3 of scales[0..7] as bits 4-5. Lane constants:
  const int sh = 16 * (t & 1), s_hi6 = t < 2 ? 0 : 2;
  const uint32_t m_w = t < 2 ? 0u : 0x0f0fu, m_lo6 = t < 2 ? 0x3f3fu : 0x3030u;
  const uint32_t sel4 = static_cast<uint32_t>(t | ((4 + t) << 4));  // Q4_K: bytes t of y (z) and w
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const uint8_t* rp = st + (16 * MT * warp + 16 * mt + 8 * rr + g) * MmaType<T>::kPitch;
      const uint4 hdr = *reinterpret_cast<const uint4*>(rp);
      qs[mt][rr][0] = *reinterpret_cast<const uint4*>(rp + kQs + 32 * t);
      qs[mt][rr][1] = *reinterpret_cast<const uint4*>(rp + kQs + 16 + 32 * t);
      // Scales and mins of sub-blocks 2t, 2t + 1 (quant::k_scale_min), two bytes at a time; Q4_K:
      // of sub-blocks t, t + 4 (quant::q4k_scale_min_pair).
      uint32_t sc2, mn2;
      if constexpr (kQ5) {
        const uint32_t y = hdr.y >> sh, z = hdr.z >> sh, wd = hdr.w >> sh;
        sc2 = (wd & m_w) | ((y >> s_hi6) & m_lo6);
        mn2 = ((wd >> 4) & m_w) | ((z >> s_hi6) & m_lo6);
      } else {
        quant::q4k_scale_min_pair(hdr.y, hdr.z, hdr.w, sel4, sc2, mn2);
      }
      // d * sc and -dmin * mn as halves, each rounded once from the exact product (as the float
      // product converted to half would be): byte | 0x6400 is the half 1024 + v exactly.
      const uint32_t dd = __byte_perm(hdr.x, 0, 0x1010), ndm = __byte_perm(hdr.x, 0, 0x3232) ^ 0x80008000u;
      const uint32_t s2 = h2_bits(__hmul2(
          __hsub2(bits_h2(__byte_perm(sc2, magic64, 0x4140)), bits_h2(0x64006400u)), bits_h2(dd)));
      const uint32_t m2 = h2_bits(__hmul2(
          __hsub2(bits_h2(__byte_perm(mn2, magic64, 0x4140)), bits_h2(0x64006400u)), bits_h2(ndm)));
      s_lo[mt][rr] = __byte_perm(s2, 0, 0x1010);
      s_hi[mt][rr] = __byte_perm(s2, 0, 0x3232);
      m_lo[mt][rr] = __byte_perm(m2, 0, 0x1010);
      m_hi[mt][rr] = __byte_perm(m2, 0, 0x3232);
    }
  const int f = 2 * t + (g & 1);  // x_swizzle's XOR for this lane (q >> 3 == t)
  const uint4* xl = xs + g * kXChunks + 8 * t;
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    // k-steps of this group: 0: (i = 2m, low), 1: (2m + 1, low), 2: (2m, high), 3: (2m + 1, high).
    uint32_t af[MT][4][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const uint4& v = qs[mt][rr][m >> 1];
        uint2 hq = make_uint2(0, 0);
        if constexpr (kQ5) {  // qh bytes 8m .. 8m + 7 (positions of words 2m, 2m + 1); 8-byte
                              // aligned
          hq = *reinterpret_cast<const uint2*>(
              st + (16 * MT * warp + 16 * mt + 8 * rr + g) * MmaType<T>::kPitch + 16 + 8 * m);
        }
#pragma unroll
        for (int ii = 0; ii < 2; ++ii) {
          const uint32_t w = (m & 1) ? (ii ? v.w : v.z) : (ii ? v.y : v.x);
          // lo / hi: the bytes of the low / high quants of 4 weights. A byte permute per half
          // pair puts bytes 0, 1 (or 2, 3) under a magic high byte: byte | 0x6400 is the half
          // 1024 + q, and Q4_K's unshifted high nibble (bits 4-7) | 0x5400 is 64 + q. Q4_K
          // masks the word once for each (6 integer instructions a word where permuting first
          // and masking each pair took 10; the same halves, so the same results).
          uint32_t lo, hi;
          if constexpr (kQ5) {  // 5-bit quants: the nibble and its qh bit, one a byte
            const uint32_t hw = ii ? hq.y : hq.x;
            lo = (w & 0x0f0f0f0fu) | (((hw >> (2 * t)) & 0x01010101u) << 4);
            hi = ((w >> 4) & 0x0f0f0f0fu) | (((hw >> (2 * t + 1)) & 0x01010101u) << 4);
          } else {
            lo = w & 0x0f0f0f0fu;
            hi = w & 0xf0f0f0f0u;
          }
          const uint32_t hi_bytes = kQ5 ? magic64 : magic54;
          constexpr uint32_t kHiMagic = kQ5 ? 0x64006400u : 0x54005400u;
          af[mt][ii][rr] = deq_fma(__byte_perm(lo, magic64, 0x4140), 0x64006400u, s_lo[mt][rr],
                                   m_lo[mt][rr]);
          af[mt][ii][2 + rr] = deq_fma(__byte_perm(lo, magic64, 0x4342), 0x64006400u,
                                       s_lo[mt][rr], m_lo[mt][rr]);
          af[mt][2 + ii][rr] = deq_fma(__byte_perm(hi, hi_bytes, 0x4140), kHiMagic, s_hi[mt][rr],
                                       m_hi[mt][rr]);
          af[mt][2 + ii][2 + rr] = deq_fma(__byte_perm(hi, hi_bytes, 0x4342), kHiMagic,
                                           s_hi[mt][rr], m_hi[mt][rr]);
        }
      }
#pragma unroll
    for (int nt = 0; nt < N; ++nt) {
      const uint4 v0 = xl[nt * 8 * kXChunks + (m ^ f)];        // columns 64t + 8m .. + 7
      const uint4 v1 = xl[nt * 8 * kXChunks + ((4 + m) ^ f)];  // columns 64t + 32 + 8m .. + 7
      mma_k64(acc, af, nt, v0, v1);
    }
  }
}

// Q6_K, one staged super-block. Lane (g, t), hh = t / 2, gg = t % 2, owns for each of its rows
// l = 16gg .. 16gg + 15 of half hh: ql[64hh + l], ql[64hh + 32 + l], qh[32hh + l] (three 16-byte
// loads, as quant::PieceQ6K), i.e. weights 128hh + 32q + l for the quarters q < 4, scale
// scales[8hh + 2q + gg]. k-step (q, i) holds weights 128hh + 32q + 16gg + 4i + {0,1} at k slots
// 2t, 2t+1 and + {2,3} at 2t+8, 2t+9 (x columns likewise: 8 bytes a k-step).
template <int N, int W, int MT>
__device__ __forceinline__ void compute_q6k(const uint8_t* st, const uint4* xs, const uint32_t* dsm,
                                            int64_t row0, int64_t bpr, int64_t sb,
                                            float (&acc)[MT][N][4], uint32_t magic64) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int hh = t >> 1, gg = t & 1;
  const uint32_t sel = 0x4040u | gg | ((gg + 2) << 8);  // bytes gg, gg + 2 as the low bytes of two halves
  uint4 l0[MT][2], l1[MT][2], qh[MT][2];
  uint32_t sq[MT][2][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = 16 * MT * warp + 16 * mt + 8 * rr + g;
      const uint8_t* rp = st + r * MmaType<DType::kQ6_K>::kPitch;
      l0[mt][rr] = *reinterpret_cast<const uint4*>(rp + 64 * hh + 16 * gg);
      l1[mt][rr] = *reinterpret_cast<const uint4*>(rp + 64 * hh + 32 + 16 * gg);
      qh[mt][rr] = *reinterpret_cast<const uint4*>(rp + 128 + 32 * hh + 16 * gg);
      const uint2 sc = *reinterpret_cast<const uint2*>(rp + 192 + 8 * hh);
      // d: the half of the staged aligned pair that is this row's (the index's parity; low bits
      // only, so 32-bit arithmetic gives it).
      const uint32_t odd = (static_cast<uint32_t>(row0 + r) * static_cast<uint32_t>(bpr) +
                            static_cast<uint32_t>(sb)) & 1u;
      const uint32_t dd = __byte_perm(dsm[r], 0, odd ? 0x3232 : 0x1010);
      // Scales of quarters q = 2e, 2e + 1: bytes gg, gg + 2 of sc.x (e = 0) / sc.y (e = 1), signed;
      // byte ^ 0x80 | 0x6400 is the half 1152 + s exactly, and d * s is rounded once, as the float
      // product converted to half would be.
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uint32_t h = __byte_perm((e ? sc.y : sc.x) ^ 0x80808080u, magic64, sel);
        const uint32_t s2 = h2_bits(__hmul2(__hsub2(bits_h2(h), bits_h2(0x64806480u)), bits_h2(dd)));
        sq[mt][rr][2 * e] = __byte_perm(s2, 0, 0x1010);
        sq[mt][rr][2 * e + 1] = __byte_perm(s2, 0, 0x3232);
      }
    }
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t af[MT][4][4];  // [mt][k-step i][register]
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const uint32_t la[4] = {l0[mt][rr].x, l0[mt][rr].y, l0[mt][rr].z, l0[mt][rr].w};
        const uint32_t lb[4] = {l1[mt][rr].x, l1[mt][rr].y, l1[mt][rr].z, l1[mt][rr].w};
        const uint32_t hw[4] = {qh[mt][rr].x, qh[mt][rr].y, qh[mt][rr].z, qh[mt][rr].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint32_t r6;  // bytes: the 6-bit unsigned quants (value + 32) of 4 consecutive weights
          if (q == 0)
            r6 = (la[i] & 0x0f0f0f0fu) | ((hw[i] << 4) & 0x30303030u);
          else if (q == 1)
            r6 = (lb[i] & 0x0f0f0f0fu) | ((hw[i] << 2) & 0x30303030u);
          else if (q == 2)
            r6 = ((la[i] >> 4) & 0x0f0f0f0fu) | (hw[i] & 0x30303030u);
          else
            r6 = ((lb[i] >> 4) & 0x0f0f0f0fu) | ((hw[i] >> 2) & 0x30303030u);
          // Byte | 0x6400 is the half 1024 + r6; minus 1056 leaves r6 - 32 exactly.
          af[mt][i][rr] = deq_mul(__byte_perm(r6, magic64, 0x4140), 0x64206420u, sq[mt][rr][q]);
          af[mt][i][2 + rr] =
              deq_mul(__byte_perm(r6, magic64, 0x4342), 0x64206420u, sq[mt][rr][q]);
        }
      }
    const int q0 = 16 * hh + 4 * q + 2 * gg;  // chunk of columns 128hh + 32q + 16gg .. + 7
    const int f = ((((q0 >> 3) & 3) << 1) | (g & 1));
    const uint4* xl = xs + g * kXChunks;
#pragma unroll
    for (int nt = 0; nt < N; ++nt) {
      const uint4 v0 = xl[nt * 8 * kXChunks + (q0 ^ f)];
      const uint4 v1 = xl[nt * 8 * kXChunks + ((q0 + 1) ^ f)];
      mma_k64(acc, af, nt, v0, v1);
    }
  }
}

// Q8_0, one staged stage (8 blocks of 32). Lane (g, t) owns, for each of its 4 rows, blocks 2t and
// 2t + 1 of the stage (bytes 64t .. 64t + 63, chunks 4t .. 4t + 3): k-step i < 16 holds weights
// 64t + 4i + {0,1} at k slots 2t, 2t+1 and + {2,3} at 2t+8, 2t+9 (x columns likewise). Blocks past
// the row's end were staged as zeros (weights 0, x 0).
template <int N, int W, int MT>
__device__ __forceinline__ void compute_q80(const uint8_t* st, const uint4* xs, const uint32_t* dsm,
                                            int64_t row0, int64_t bpr, int64_t sb,
                                            float (&acc)[MT][N][4], uint32_t magic64) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  uint32_t dh[MT][2][2];  // d of blocks 2t, 2t + 1 of each row, as half2
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = 16 * MT * warp + 16 * mt + 8 * rr + g;
      // Place of the stage's first d in the row's 5 staged words (they start at an even index).
      const int par = static_cast<int>(((row0 + r) * bpr + sb * 8) & 1);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int h = par + 2 * t + e;  // < 9: half h of the row's 5 staged words
        const uint32_t bits = (dsm[5 * r + (h >> 1)] >> (16 * (h & 1))) & 0xffff;
        dh[mt][rr][e] = bits | (bits << 16);
      }
    }
  const int f = 2 * t + (g & 1);  // x_swizzle's XOR for this lane (q >> 3 == t)
  const uint4* xl = xs + g * kXChunks + 8 * t;
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    uint32_t af[MT][4][4];  // k-steps 4m .. 4m + 3: bytes 64t + 16m .. + 15 of block 2t + m / 2
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = 16 * MT * warp + 16 * mt + 8 * rr + g;
        const uint4 v = *reinterpret_cast<const uint4*>(st + r * MmaType<DType::kQ8_0>::kPitch +
                                                        16 * q8_chunk(r, 4 * t + m));
        const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // q ^ 0x80 is the byte q + 128; byte | 0x6400 is the half 1024 + q + 128 (minus 1152).
          const uint32_t u = wv[j] ^ 0x80808080u;
          af[mt][j][rr] =
              deq_mul(__byte_perm(u, magic64, 0x4140), 0x64806480u, dh[mt][rr][m >> 1]);
          af[mt][j][2 + rr] =
              deq_mul(__byte_perm(u, magic64, 0x4342), 0x64806480u, dh[mt][rr][m >> 1]);
        }
      }
#pragma unroll
    for (int nt = 0; nt < N; ++nt) {
      const uint4 v0 = xl[nt * 8 * kXChunks + ((2 * m) ^ f)];      // columns 64t + 16m .. + 7
      const uint4 v1 = xl[nt * 8 * kXChunks + ((2 * m + 1) ^ f)];  // columns 64t + 16m + 8 .. + 15
      mma_k64(acc, af, nt, v0, v1);
    }
  }
}

// Writes (plain store) or adds (atomic: where CTAs share the row block, and always when
// accumulating into y, since a plain read-modify-write would wait on each load) the accumulators
// of row block rb, then zeroes them.
template <int N, int W, int MT>
__device__ __forceinline__ void flush(const MmaArgs& a, int64_t row0, bool atomic,
                                      float (&acc)[MT][N][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < N; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = row0 + 16 * MT * warp + 16 * mt + g + 8 * (e >> 1);
        const int tok = 8 * nt + 2 * t + (e & 1);
        if (row < a.n_rows && tok < a.n) {
          float* p = a.y + tok * a.ldy + row;
          if (atomic || a.accumulate)
            atomicAdd(p, acc[mt][nt][e]);  // a reduction without return: no load latency
          else
            *p = acc[mt][nt][e];
        }
        acc[mt][nt][e] = 0.f;
      }
}

#endif  // __CUDA_ARCH__ >= 800

// Thread mapping: W warps, warp w owning rows 16MT w .. 16MT (w + 1) - 1 of each row block of
// 16 MT W rows (MT m16 tiles, 2 or 1, see dispatch; lane (g, t) rows g, g + 8 of each) and
// all 8N tokens (N n8 tiles). CTA b handles units
// [b * units / grid, (b + 1) * units / grid) of the row-block-major list of (row block, stage)
// units, flushing at each row block's end: plain stores where it covered the whole row, atomics
// otherwise (y then zeroed beforehand by the launcher). Arguments (MmaArgs): Q4_K/Q5_K rows of
// row_bytes, or the split layout (region A, region D) of Q6_K/Q8_0; x F16 [n][ldx], ldx % 8 == 0,
// 16-byte aligned, zero beyond n_cols not required; y float [n][ldy]; n <= 8N.
// Expected bound: HBM at n = 32: the weights are read once; the activation tile (8N * 512 bytes
// per unit, from L2) adds ~0.9 (4 warps) or ~0.45 (8 warps) bytes of L2 traffic per Q4_K weight
// byte; about 20-40 instructions per 512 weights per warp beside 8 mma: aim >= 60% of 4.3 TB/s.
// Measured instead (H200, session 28's per-CTA timelines of the 32-sequence qwen2-7b Q4_K_M
// step): compute-bound. gate/up streams 76.4 MB in 43.6 us (1.75 TB/s), a CTA spends ~2.5 us a
// unit (an SM ~20 issue cycles an mma), all CTAs are resident before the wait returns; dealing
// the last units out dynamically or giving late CTAs lighter shares was slower (perf.md). What
// pays is fewer instructions a stage other than mma: 57 fewer in the activation copies took
// 1.1-1.4% off the 32-sequence step, while taking the mins out of the Q4_K decode (-136 half
// adds) for 24 more mma a warp's stage (the sub-block sums of x and their min product) made it
// 3% slower, and three two-stage CTAs an SM (168 registers) 14% slower (session 29, perf.md).
// Two things that do not pay (sessions 30-31, perf.md): the fused gate/up product applying the
// gated activation itself (each group of 128 features' sums read back from L2 by the CTA that
// completed it) took the 32-sequence step from 3.23-3.25 to 4.01-4.04 ms; without that read-back
// (a diagnostic) it was 3.19, so the activation launch it replaces is worth ~1.5% at best, and the
// completion counts alone cost about as much (3.24-3.25). The flush's float reductions cost
// nothing measurable: plain stores in their place (a diagnostic, wrong sums) ran as fast.
// Launched programmatically where MatmulContext allows it (sm_90 native path): the weights of the
// first stages are requested before the wait for the producer of x (and of a zeroed y), so that
// they stream while that producer finishes.
// Two 8 x 1 CTAs of up to 48 tokens share an SM: their registers are capped at 128 (the Q4_K
// instance at 41-48 tokens needed 134 uncapped, which would leave one CTA an SM; with the weight
// copies' offsets found once and the permute magics as arguments it needs 115, and no instance
// spills; before, ptxas spilled 8-40 bytes in the N = 6 instances and Q5_K's N = 4 one, and the
// 48-sequence qwen2-7b Q4_K_M step was unchanged by that, H200, 2026-12-01).
template <DType T, int N, int W, int MT>
__global__ void __launch_bounds__(32 * W, (W == 8 && MT == 1 && N <= 6) ? 2 : 1)
    matmul_mma_kernel(MmaArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using S = MmaShape<T, N, W, MT>;
  extern __shared__ __align__(16) uint8_t smem[];
  detail::pdl_trigger();
#ifdef DUET_CTA_TIMELINE
  const unsigned long long cta_t0 = detail::cta_clock();
#endif
  const int64_t u_begin = static_cast<int64_t>(blockIdx.x) * a.units / gridDim.x;
  const int count = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * a.units / gridDim.x - u_begin);
  const int spr = static_cast<int>(a.spr);
  // Cursors (row block, stage) of the next unit to load and of the unit computed: advanced by one
  // stage at a time, so that no division runs inside the loop.
  WeightCopies<T, N, W, MT> wc;
  weight_copies(a, wc);
  int64_t rb_l = u_begin / spr, rb_c = rb_l;
  int sb_l = static_cast<int>(u_begin - rb_l * spr), sb_c = sb_l;
  // Prologue: the weights of stages 0 .. kStages - 2, then (after the wait) their activations,
  // one commit group per stage as the loop expects (group 0 also holds every prologue weight).
#pragma unroll 1
  for (int s = 0; s < S::kStages - 1 && s < count; ++s) {
    load_stage<T, N, W, MT, kStageWeights>(a, smem + s * S::kStageBytes, rb_l, sb_l, wc);
    if (++sb_l == spr) sb_l = 0, ++rb_l;
  }
  detail::pdl_wait();
#ifdef DUET_CTA_TIMELINE
  const unsigned long long cta_t1 = detail::cta_clock();
#endif
  {
    int64_t rb_x = rb_c;
    int sb_x = sb_c;
#pragma unroll 1
    for (int s = 0; s < S::kStages - 1; ++s) {
      if (s < count) {
        load_stage<T, N, W, MT, kStageX>(a, smem + s * S::kStageBytes, rb_x, sb_x, wc);
        if (++sb_x == spr) sb_x = 0, ++rb_x;
      }
      cp_async_commit();
    }
  }
  // The side job, while the prologue's copies are in flight (after the wait: an earlier kernel
  // may still read the buffer until then).
  const int64_t zero4 = a.zero_n / 4;  // float4 stores, then the last zero_n % 4 floats
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < zero4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    reinterpret_cast<float4*>(a.zero)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (blockIdx.x == 0 && threadIdx.x < a.zero_n - 4 * zero4) a.zero[4 * zero4 + threadIdx.x] = 0.f;
  float acc[MT][N][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < N; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
  bool seg_full_start = sb_c == 0;  // the current row block's units began at its first
  int ld_stage = S::kStages - 1, st_stage = 0;  // stage buffers of the next load and of this unit
#pragma unroll 1
  for (int it = 0; it < count; ++it) {
    cp_async_wait<S::kStages - 2>();
    __syncthreads();  // stage `it` visible to all; stage it - 1 free for the next load
    if (it + S::kStages - 1 < count) {
      load_stage<T, N, W, MT>(a, smem + ld_stage * S::kStageBytes, rb_l, sb_l, wc);
      if (++sb_l == spr) sb_l = 0, ++rb_l;
    }
    cp_async_commit();
    if (++ld_stage == S::kStages) ld_stage = 0;
    const uint8_t* st = smem + st_stage * S::kStageBytes;
    if (++st_stage == S::kStages) st_stage = 0;
    const uint4* xs = reinterpret_cast<const uint4*>(st + S::kWBytes + S::kDBytes);
    if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
      compute_q45k<T, N, W, MT>(st, xs, acc, a.magic64, a.magic54);
    } else if constexpr (T == DType::kQ8_0) {
      compute_q80<N, W, MT>(st, xs, reinterpret_cast<const uint32_t*>(st + S::kWBytes), rb_c * S::kRows,
                        a.bpr, sb_c, acc, a.magic64);
    } else {
      compute_q6k<N, W, MT>(st, xs, reinterpret_cast<const uint32_t*>(st + S::kWBytes), rb_c * S::kRows,
                        a.bpr, sb_c, acc, a.magic64);
    }
    if (sb_c == spr - 1 || it == count - 1) {
      const bool full = seg_full_start && sb_c == spr - 1;
      flush<N, W, MT>(a, rb_c * S::kRows, !full, acc);
      seg_full_start = true;
    }
    if (++sb_c == spr) sb_c = 0, ++rb_c;
  }
  cp_async_wait<0>();
#ifdef DUET_CTA_TIMELINE
  detail::cta_record(a.w, a.n_rows, cta_t0, cta_t1);
#endif
#else
  static_assert(kXChunks * 8 == kSbCols && MmaType<T>::kChunks16 * 16 >= MmaType<T>::kBlockBytes,
                "stage layout");
  __trap();
#endif
}

constexpr int kMaxDevices = 64;

int current_device() {
  int dev = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  DUET_CHECK_MSG(dev >= 0 && dev < kMaxDevices, "matmul_mma: device %d beyond %d", dev,
                 kMaxDevices);
  return dev;
}

int sm_count(int dev) {
  static std::mutex mu;
  static int counts[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (counts[dev] == 0)
    DUET_CUDA_CHECK(cudaDeviceGetAttribute(&counts[dev], cudaDevAttrMultiProcessorCount, dev));
  return counts[dev];
}

// Resident CTAs per SM of one kernel instantiation on device dev, after opting it in to its
// dynamic shared memory there (both host calls that are not stream work: legal while a graph is
// being captured; done once per instantiation and device).
template <DType T, int N, int W, int MT>
int ctas_per_sm(int dev) {
  using S = MmaShape<T, N, W, MT>;
  static std::mutex mu;
  static int per_sm[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (per_sm[dev] == 0) {
    auto kernel = matmul_mma_kernel<T, N, W, MT>;
    DUET_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes));
    DUET_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm[dev], kernel, S::kThreads,
                                                                  S::kSmemBytes));
    DUET_CHECK_MSG(per_sm[dev] > 0, "matmul_mma: no CTA of %d bytes of shared memory fits an SM",
                   S::kSmemBytes);
  }
  return per_sm[dev];
}

template <DType T, int N, int W, int MT>
void run(const DeviceMatrix& w, const __half* x, int64_t ldx, int n, float* y, int64_t ldy, int dev,
         bool accumulate, bool pdl, ZeroJob zero, cudaStream_t s) {
  using S = MmaShape<T, N, W, MT>;
  MmaArgs a{};
  a.magic64 = 0x64646464u;
  a.magic54 = 0x54545454u;
  a.n_rows = w.n_rows;
  a.bpr = w.n_cols / MmaType<T>::kBlockCols;
  a.spr = (w.n_cols + kSbCols - 1) / kSbCols;
  a.n_cols = w.n_cols;
  a.row_bytes = static_cast<int64_t>(w.row_bytes);
  a.w = static_cast<const uint8_t*>(w.data);
  if constexpr (MmaType<T>::kSplitD) a.wd = a.w + w.n_rows * a.bpr * MmaType<T>::kBlockBytes;
  a.x = x;
  a.ldx = ldx;
  a.n = n;
  a.y = y;
  a.ldy = ldy;
  a.accumulate = accumulate ? 1 : 0;
  a.zero = zero.p;
  a.zero_n = zero.n;
  const int64_t row_blocks = (w.n_rows + S::kRows - 1) / S::kRows;
  a.units = row_blocks * a.spr;
  // load_stage's 32-bit offsets: a row block's weight bytes, and 8N activation rows.
  const int64_t pitch = MmaType<T>::kSplitD ? a.bpr * MmaType<T>::kBlockBytes : a.row_bytes;
  DUET_CHECK_MSG(pitch * S::kRows < (int64_t{1} << 31) && ldx * 8 * N < (int64_t{1} << 31),
                 "matmul_mma: %lld-byte rows or %lld-half activation rows too long", (long long)pitch,
                 (long long)ldx);
  // One wave; the fewest CTAs that give every CTA the smallest whole number of units.
  const int64_t slots = static_cast<int64_t>(ctas_per_sm<T, N, W, MT>(dev)) * sm_count(dev);
  const int64_t per_cta = (a.units + slots - 1) / slots;
  const int64_t grid = (a.units + per_cta - 1) / per_cta;
  // Some row block is shared by two CTAs unless every CTA boundary is a row-block boundary.
  bool shared = false;
  for (int64_t b = 1; b < grid && !shared; ++b) shared = (b * a.units / grid) % a.spr != 0;
  if (shared && !accumulate)
    DUET_CUDA_CHECK(cudaMemset2DAsync(y, ldy * sizeof(float), 0, w.n_rows * sizeof(float), n, s));
  detail::launch_maybe_pdl(matmul_mma_kernel<T, N, W, MT>, dim3(static_cast<unsigned>(grid)), dim3(S::kThreads),
                           S::kSmemBytes, s, pdl, a);
  DUET_CUDA_CHECK_LAUNCH();
}

template <DType T, int W, int MT>
void dispatch_tokens(const DeviceMatrix& w, const __half* x, int64_t ldx, int n, float* y,
                     int64_t ldy, int dev, bool acc, bool pdl, ZeroJob z, cudaStream_t s) {
  const int tiles = (n + 7) / 8;
  if (tiles <= 1) return run<T, 1, W, MT>(w, x, ldx, n, y, ldy, dev, acc, pdl, z, s);
  if (tiles <= 2) return run<T, 2, W, MT>(w, x, ldx, n, y, ldy, dev, acc, pdl, z, s);
  if (tiles <= 4) return run<T, 4, W, MT>(w, x, ldx, n, y, ldy, dev, acc, pdl, z, s);
  if (tiles <= 6) return run<T, 6, W, MT>(w, x, ldx, n, y, ldy, dev, acc, pdl, z, s);
  return run<T, 8, W, MT>(w, x, ldx, n, y, ldy, dev, acc, pdl, z, s);
}

// CTA shape (warps x m16 tiles per warp; rows per CTA = 16 x both). 4 x 2 (128 rows) by default:
// two 4-warp CTAs share an SM (shared memory), and two CTAs pipeline their stages independently,
// where one 8-warp CTA of twice the rows has units twice as coarse. H200 (2026-11-30): Q4_K 37888 x
// 3584 n = 32 47.7 us against 50.5 with 8 x 2, Q6_K 52.7 against 57.8 (MmaBench); qwen2-7b Q4_K_M
// 32-sequence step 4.21 / 4.22 ms against 4.41 / 4.42. Batches of 33-48 tokens (the six-tile
// instance) take 8 x 1: the same 128 rows and stages per CTA, twice the warps an SM to hide the
// per-stage chain of shared-memory loads, decode and mma (16 instead of 8). H200
// (2026-12-01, session 14 runs 3 and 6): 32-sequence step 3.354 / 3.344 ms against 3.382 / 3.386
// with 4 x 2, 48 sequences 4.221 / 4.238 against 4.353 / 4.357; at 8 and 16 sequences 8 x 1 was
// slower (2.525 / 2.521 and 2.837 / 2.831 against 2.422 / 2.437 and 2.724 / 2.721), at 64 level
// (5.088 / 5.080 against 5.074 / 5.068). Since the stage's instructions were cut (session 25), 4 x 2
// is at least level up to 32 tokens (2026-12-02, session 26 call 2, two rounds: 24 sequences
// 3.170 / 3.179 ms against 3.207 / 3.207 with 8 x 1, 32 sequences 3.277 / 3.285 against 3.325 /
// 3.319; call 3, another H200: 32 sequences 3.324 / 3.332 against 3.335), and 8 x 1 keeps 33-48
// tokens (call 2: 48 sequences 4.124 / 4.121 against 4.167 / 4.169 with 4 x 2).
// DUET_MMA_WARPS=4, 8 or 8x1 forces 4 x 2, 8 x 2 or 8 x 1
// (read at every launch, so that a benchmark can compare them in one process; graph replays do
// not come through here).
enum class MmaCfg { kAuto, k4x2, k8x2, k8x1 };
MmaCfg cfg_from_env(const char* name) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return MmaCfg::kAuto;
  if (std::strcmp(e, "8x1") == 0) return MmaCfg::k8x1;
  return std::atoi(e) == 8 ? MmaCfg::k8x2 : MmaCfg::k4x2;
}
MmaCfg forced_cfg() { return cfg_from_env("DUET_MMA_WARPS"); }

// DUET_MMA_SMALL_WARPS=4|8|8x1 (A/B knob, read at every launch; unset: no change): the CTA shape
// for small products, those of at most two 128-row units a CTA slot (two CTAs an SM), e.g.
// qwen2-7b's o (392 units) and q/k/v products (448 and 56) beside gate/up (4144) and down (2072).
// Their CTAs run two stages each, started only when attention's shared memory frees (session 20's
// trace: the 32-sequence o product takes 10.4 us for 7.2 MB), so their time is per-stage latency
// rather than the stream the larger products keep; 8 x 1 halves a warp's share of each stage.
// Measured on three H200s (session 27, qwen2-7b Q4_K_M, 32-sequence step ms, rounds interleaved):
// 8 x 1 3.275 / 3.290 against 3.317 / 3.296 unset (8 x 2 3.329 / 3.344); 3.282 / 3.279 / 3.288
// against 3.300 / 3.328 / 3.278; 3.298 / 3.303 / 3.313 against 3.278 / 3.278 / 3.279. Level
// within the machines' noise, so the default stays. (8 x 1 for every Q6_K product, tried the same
// way: 3.312 / 3.289 / 3.315, not kept.)
bool small_product(const DeviceMatrix& w, int dev) {
  const int64_t units = (w.n_rows + 127) / 128 * ((w.n_cols + kSbCols - 1) / kSbCols);
  return units <= 2 * 2 * static_cast<int64_t>(sm_count(dev));
}

template <DType T>
void dispatch(const DeviceMatrix& w, const __half* x, int64_t ldx, int n, float* y, int64_t ldy,
              bool acc, bool pdl, ZeroJob z, cudaStream_t s) {
  const int dev = current_device();
  MmaCfg c = forced_cfg();
  if (c == MmaCfg::kAuto) {
    const MmaCfg small = cfg_from_env("DUET_MMA_SMALL_WARPS");
    if (small != MmaCfg::kAuto && small_product(w, dev)) c = small;
  }
  if (c == MmaCfg::kAuto) {
    const int tiles = (n + 7) / 8;
    c = tiles > 4 && tiles <= 6 ? MmaCfg::k8x1 : MmaCfg::k4x2;
  }
  switch (c) {
    case MmaCfg::k8x2: return dispatch_tokens<T, 8, 2>(w, x, ldx, n, y, ldy, dev, acc, pdl, z, s);
    case MmaCfg::k8x1: return dispatch_tokens<T, 8, 1>(w, x, ldx, n, y, ldy, dev, acc, pdl, z, s);
    default: return dispatch_tokens<T, 4, 2>(w, x, ldx, n, y, ldy, dev, acc, pdl, z, s);
  }
}

}  // namespace

#ifdef DUET_CTA_TIMELINE
DUET_CTA_TIMELINE_BIND(cta_timeline_bind_quant_mma)
#endif

bool mma_supported(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K || t == DType::kQ8_0;
}

void launch_matmul_mma(const DeviceMatrix& w, const __half* x, int64_t ldx, int n, float* y,
                       int64_t ldy, cudaStream_t s, bool accumulate, bool pdl, ZeroJob zero) {
  DUET_CHECK_MSG(zero.n == 0 || reinterpret_cast<uintptr_t>(zero.p) % 16 == 0,
                 "matmul_mma: the buffer to zero needs 16-byte alignment");
  DUET_CHECK_MSG(n >= 1 && n <= kMmaMaxTokens, "matmul_mma: n_tokens %d not in [1, %d]", n,
                 kMmaMaxTokens);
  DUET_CHECK_MSG(ldx % 8 == 0 && ldx >= w.n_cols && reinterpret_cast<uintptr_t>(x) % 16 == 0,
                 "matmul_mma: x needs 16-byte aligned rows of >= %lld halves (ldx %lld)",
                 (long long)w.n_cols, (long long)ldx);
  DUET_CHECK_MSG(ldy >= w.n_rows, "matmul_mma: ldy %lld < %lld rows", (long long)ldy,
                 (long long)w.n_rows);
  const int64_t block = w.dtype == DType::kQ8_0 ? 32 : 256;
  DUET_CHECK_MSG(w.n_cols > 0 && w.n_cols % block == 0,
                 "matmul_mma: %lld columns, not a multiple of %lld", (long long)w.n_cols,
                 (long long)block);
  if (w.n_rows == 0) return;
  switch (w.dtype) {
    case DType::kQ4_K:
      return dispatch<DType::kQ4_K>(w, x, ldx, n, y, ldy, accumulate, pdl, zero, s);
    case DType::kQ5_K:
      return dispatch<DType::kQ5_K>(w, x, ldx, n, y, ldy, accumulate, pdl, zero, s);
    case DType::kQ8_0:
      return dispatch<DType::kQ8_0>(w, x, ldx, n, y, ldy, accumulate, pdl, zero, s);
    case DType::kQ6_K:
      return dispatch<DType::kQ6_K>(w, x, ldx, n, y, ldy, accumulate, pdl, zero, s);
    default:
      DUET_CHECK_MSG(false, "matmul_mma: no kernel for %s weights",
                     std::string(dtype_name(w.dtype)).c_str());
  }
}

}  // namespace duet::cuda::kernels
