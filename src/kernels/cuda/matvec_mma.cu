// Decode products y = W x^T (1-8 token rows) of FP8 E4M3, F16 and BF16 weights on tensor cores
// (mma.sync, sm_80+; FP8 E4M3 x E4M3 and the hardware E4M3 conversion sm_89+). A decode product
// is a matrix-vector product, so the tensor core's N dimension (8 columns) holds the up-to-8
// tokens and its M dimension (16 rows) 16 weight rows; the point is not FLOPs but instructions
// per weight: one mma.sync consumes 256 (F16/BF16) or 512 (E4M3) weights of a warp, where the
// float kernels (quant_matvec.cu) spend a multiply-add and a conversion per weight and lane.
// On sm_90 an E4M3 mma.sync is not an FP8 tensor-core instruction (Hopper's FP8 tensor cores are
// reached only through wgmma): ptxas lowers each m16n8k32 E4M3 mma to F2FP.F16.E4M3.UNPACK_B
// conversions of both operands and two F16 HMMA.16816, so native FP8 decode here multiplies as
// weight-only does, with its activations first rounded to E4M3 (per chunk of 2 KB a warp: 40
// conversions and 8 HMMA against weight-only's 32 + 8 F16 packs and 8 HMMA; BF16 4 packs and 4
// HMMA; scripts/sass_opcodes.py, perf.md session 33). On sm_89 it is a native FP8 instruction, so
// MatmulContext takes this kind for native FP8 decode only there and on sm_120+ (matmul.cu,
// native_decode_e4m3); on sm_90 native decode multiplies as weight-only.
//
// Layout trick: a dot product does not care in which order k is summed, so each lane loads 16
// contiguous bytes of its two fragment rows (g and g + 8, g = lane / 4) at column piece
// 4 c + lane % 4 of 64-byte (FP8) or 32-element (16-bit) chunk c, and the activation fragment
// is loaded in the same permuted order: the A fragment needs no shuffles or shared memory, each
// weight byte is read once from DRAM in 64-byte runs per row (two full sectors), and the lanes of
// token t (lanes 4t .. 4t + 3) read 64 contiguous float activations per chunk (from L1/L2: every
// CTA reads x, which is small).
//
// Activations are read as float and rounded in registers (or, for FP8 weights on the streaming
// kernel, staged in that rounding once per product by launch_stage_act_mma): to F16 (FP8 weight-only and F16
// weights: 2^-11 relative), BF16 (BF16 weights: 2^-9), or, for native FP8, to E4M3 with one
// scale per token and 64-column chunk (amax / 448 over the 16 values of each of the token's 4
// lanes; the chunk's partial products are scaled back in float before they are summed). FP8
// weight-only converts E4M3 to F16 with cvt.rn.f16x2.e4m3x2 (sm_89+) or, on sm_80-88, by bit
// arithmetic (quant_types.cuh fp8x4_to_float's even/odd halves, value * 2^-8, exact; the
// activation pairs are formed to match its (0, 2), (1, 3) byte order).
//
// Work split: a CTA of kWarps warps owns MT m16 tiles (16 MT rows); its warps take the row's
// chunks round-robin (K split inside the CTA), U chunks in flight per warp with the weight loads
// of all U issued before any activation is read (and before the programmatic-launch wait: the
// weights do not depend on the producer). Warps are summed through shared memory at the end; the
// per-row FP8 scales (per-tensor / per-channel) are applied there, block scales per chunk.
// Bound: memory at n = 1 (goal >= 80% of HBM bandwidth on 7B-shaped matrices on the H200); at
// n = 8 the activation reads from L1 double the load instructions, still under the DRAM time.
// Measured on the H200 (2026-11-30, launcher defaults, % of 4.3 TB/s at 3584x3584 / 18944x3584 /
// 3584x18944 / 152064x3584, n = 1): FP8 weight-only (hardware conversion) 47.6 / 66.5 / 61.0 /
// 89.2 (the float kernels: 41.4 / 54.3 / 47.5 / 93.8), n = 8 at 18944 rows 55.5 (11.4); native
// FP8 32.5 / 53.9 / 38.8 / 73.6 (its per-chunk activation quantization costs); BF16 57.3 / 76.3 /
// 67.0 / 87.8 against the float kernel's 67.1 / 93.5 / 90.4 / 103.9 at n = 1, but 67.6 against
// 21.2 at n = 8 (MatmulContext takes it for F16/BF16 from 2 rows on). Not reached: the 80% goal
// (wave quantization of the grid and the short 64-byte runs per row are the suspects; the
// DUET_MATVEC_MMA_MT / _CFG knobs sweep tiles and warps). qwen2-7b FP8 weight-only decode went
// from 236.5 to 262.6 tok/s with it (same run).
// The launcher runs the streaming form of the kernel (matvec_mma_stream_kernel: persistent CTAs,
// weights through a per-thread cp.async ring) unless DUET_MATVEC_STREAM=0; the figures above are
// the classic form's.
// Owns no memory; runs on the caller's stream; no sync (graph-capturable).
// DUET_MATVEC_DIAG (CMake, timing builds only, WRONG results): 1 multiplies the weight-only kind's
// raw E4M3 bytes as F16 (its 32 conversions a chunk gone, its 8 HMMA kept), 2 folds them by XOR
// (neither conversions nor HMMA), so that the products' rate without that work can be measured.
#ifndef DUET_MATVEC_DIAG
#define DUET_MATVEC_DIAG 0
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/env.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cta_timeline.cuh"
#include "kernels/cuda/cta_timeline.h"
#include "kernels/cuda/matvec_mma.h"
#include "kernels/cuda/quant_types.cuh"
#include "runtime/cuda_check.h"

namespace duet::cuda::kernels {
namespace {

using detail::pdl_trigger;
using detail::pdl_wait;

constexpr int kChunkPieces = 4;  // 16-byte pieces of a row per chunk (one per lane of a row's quad)
constexpr int64_t kMaxStreamWarps = 16;  // the most warps of a streaming CTA that reads staged input

struct MvArgs {
  const uint8_t* w;
  int64_t n_rows;
  int64_t row_bytes;
  int64_t n_pieces;  // 16-byte pieces per row (row_bytes / 16)
  const float* x;    // [n][ldx], valid (zero padded) up to n_pieces * elements-per-piece columns
  int64_t ldx;
  int n;
  float* y;
  int64_t ldy;
  bool accumulate;
  // FP8 scales (null for F16/BF16): value = e4m3 * scales[(row / block_rows) * scale_cols + col / block_cols]
  const float* scales;
  int64_t block_rows, block_cols, scale_cols;
  bool chunk_scales;  // block_cols < n_cols: a scale per (16-row tile, 64-column chunk)
  float unscale;      // multiplies every result (2^8 for the software E4M3 conversion, else 1)
  // Streaming kernel: split units across CTAs ("stream-K": equal chunk ranges a CTA; needs
  // accumulate), and a side job zero[0 .. zero_n) = 0 after the launch wait (or null).
  bool stream_k;
  float* zero;
  int64_t zero_n;
  int n_chunks;  // 64-byte chunks of a row (n_pieces / 4 rounded up)
  // Staged activations (launch_stage_act_mma; FP8 kinds, streaming kernel): xs [n][64 n_chunks]
  // F16 (weight-only: in chunk_mma's pairing) or E4M3 (native), and for native xsc [n_chunks][8]
  // the scales of each chunk's tokens; null otherwise.
  const void* xs;
  const float* xsc;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 890
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
__device__ __forceinline__ uint32_t pack_bf2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
// Four floats -> four E4M3 bytes (saturating), first value in the low byte.
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}
// Two E4M3 bytes (low, high) -> F16x2, exact (sm_89+).
__device__ __forceinline__ uint32_t e4m3x2_to_h2(uint32_t v) {
#if __CUDA_ARCH__ >= 890
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(static_cast<unsigned short>(v)));
  return r;
#else
  __trap();
  return 0;
#endif
}

__device__ __forceinline__ uint4 ldg_stream(const uint8_t* p) {  // weights: read once, keep out of L1
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

#endif  // __CUDA_ARCH__ >= 800

template <MatvecMmaKind K>
struct KindOf {
  static constexpr int kElems = 16;  // weights per 16-byte piece (E4M3)
};
template <>
struct KindOf<MatvecMmaKind::kF16> {
  static constexpr int kElems = 8;
};
template <>
struct KindOf<MatvecMmaKind::kBf16> {
  static constexpr int kElems = 8;
};

// One chunk of one m16 tile: wg/wh = the lane's pieces of rows g and g + 8, xv = the lane's E
// activations (token g's, zero for tokens >= n), c += W x over the chunk. For native FP8, xq are
// the E4M3 activation words (the chunk's scale is applied by the caller).
template <MatvecMmaKind K>
__device__ __forceinline__ void chunk_mma(float (&c)[4], const uint4& wg, const uint4& wh, const uint32_t* xw) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t a[4] = {wg.x, wg.y, wg.z, wg.w};
  const uint32_t b[4] = {wh.x, wh.y, wh.z, wh.w};
  if constexpr (K == MatvecMmaKind::kF16) {
#pragma unroll
    for (int i = 0; i < 2; ++i) mma_f16(c, a[2 * i], b[2 * i], a[2 * i + 1], b[2 * i + 1], xw[2 * i], xw[2 * i + 1]);
  } else if constexpr (K == MatvecMmaKind::kBf16) {
#pragma unroll
    for (int i = 0; i < 2; ++i) mma_bf16(c, a[2 * i], b[2 * i], a[2 * i + 1], b[2 * i + 1], xw[2 * i], xw[2 * i + 1]);
  } else if constexpr (K == MatvecMmaKind::kFp8Native) {
#pragma unroll
    for (int j = 0; j < 2; ++j) mma_e4m3(c, a[2 * j], b[2 * j], a[2 * j + 1], b[2 * j + 1], xw[2 * j], xw[2 * j + 1]);
  } else if constexpr (K == MatvecMmaKind::kFp8Hw) {
#if DUET_MATVEC_DIAG == 1  // timing build: the raw bytes as F16 (wrong results, no conversions)
#pragma unroll
    for (int i = 0; i < 4; ++i) mma_f16(c, a[i], b[i], a[i] ^ b[i], b[i] + a[i], xw[2 * i], xw[2 * i + 1]);
    return;
#elif DUET_MATVEC_DIAG == 2  // timing build: the bytes folded by XOR (wrong results, no mma)
    uint32_t f = xw[0];
#pragma unroll
    for (int i = 0; i < 4; ++i) f ^= a[i] ^ b[i];
    c[0] += __uint_as_float(f & 0x3fffffffu);
    return;
#endif
#pragma unroll
    for (int i = 0; i < 4; ++i)
      mma_f16(c, e4m3x2_to_h2(a[i] & 0xffffu), e4m3x2_to_h2(b[i] & 0xffffu), e4m3x2_to_h2(a[i] >> 16),
              e4m3x2_to_h2(b[i] >> 16), xw[2 * i], xw[2 * i + 1]);
  } else {  // kFp8Soft: halves (byte 0, byte 2) and (byte 1, byte 3), each value * 2^-8
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t ea = ((a[i] & 0x007f007fu) << 7) | ((a[i] & 0x00800080u) << 8);
      const uint32_t oa = (a[i] & 0x80008000u) | ((a[i] >> 1) & 0x3f803f80u);
      const uint32_t eb = ((b[i] & 0x007f007fu) << 7) | ((b[i] & 0x00800080u) << 8);
      const uint32_t ob = (b[i] & 0x80008000u) | ((b[i] >> 1) & 0x3f803f80u);
      mma_f16(c, ea, eb, oa, ob, xw[2 * i], xw[2 * i + 1]);
    }
  }
#endif
}

// The lane's activation words of one chunk from its 16 (FP8) or 8 (16-bit) floats v, in the
// order chunk_mma pairs them with the weights.
template <MatvecMmaKind K>
__device__ __forceinline__ void pack_x(const float* v, uint32_t* xw, float inv_scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (K == MatvecMmaKind::kF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) xw[i] = pack_h2(v[2 * i], v[2 * i + 1]);
  } else if constexpr (K == MatvecMmaKind::kBf16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) xw[i] = pack_bf2(v[2 * i], v[2 * i + 1]);
  } else if constexpr (K == MatvecMmaKind::kFp8Hw) {
#pragma unroll
    for (int i = 0; i < 8; ++i) xw[i] = pack_h2(v[2 * i], v[2 * i + 1]);
  } else if constexpr (K == MatvecMmaKind::kFp8Soft) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      xw[2 * i] = pack_h2(v[4 * i], v[4 * i + 2]);
      xw[2 * i + 1] = pack_h2(v[4 * i + 1], v[4 * i + 3]);
    }
  } else {  // native: E4M3 at the chunk's scale
#pragma unroll
    for (int i = 0; i < 4; ++i)
      xw[i] = pack_e4m3x4(v[4 * i] * inv_scale, v[4 * i + 1] * inv_scale, v[4 * i + 2] * inv_scale,
                          v[4 * i + 3] * inv_scale);
  }
#endif
}

// The lane's activation words of one chunk for chunk_mma (xw) and, native FP8, the chunk's
// activation scales of tokens 2p, 2p + 1 (tok_scale), from its E floats v (token g's, zeros past
// n): rounded as the kind wants (native FP8: E4M3 at the chunk's per-token scale, amax over the
// token's 4 lanes). Every lane of the warp calls it.
template <MatvecMmaKind K>
constexpr int kXWords = K == MatvecMmaKind::kFp8Hw || K == MatvecMmaKind::kFp8Soft ? 8 : 4;
template <MatvecMmaKind K>
__device__ __forceinline__ void round_x(const float* v, int p, uint32_t (&xw)[kXWords<K>], float (&tok_scale)[2]) {
  constexpr int E = KindOf<K>::kElems;
  tok_scale[0] = tok_scale[1] = 1.f;
  if constexpr (K == MatvecMmaKind::kFp8Native) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < E; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float s = amax / 448.f;
    pack_x<K>(v, xw, amax > 0.f ? 448.f / amax : 0.f);
    tok_scale[0] = __shfl_sync(0xffffffffu, s, (2 * p) * 4);
    tok_scale[1] = __shfl_sync(0xffffffffu, s, (2 * p + 1) * 4);
  } else {
    pack_x<K>(v, xw, 1.f);
  }
}

// acc += this lane's share of W x over chunk c of the MT tiles (wv[mt][0 / 1]: its pieces of
// rows g and g + 8; xw, tok_scale: its activations as round_x makes them, the chunk's products
// scaled back in float for native FP8), block scales per chunk (read here, or, given ws, read
// ahead by the caller: ws[mt] the block scale of tile mt at chunk c).
template <MatvecMmaKind K, int MT>
__device__ __forceinline__ void chunk_accumulate_words(float (&acc)[MT][4], const uint4 (&wv)[MT][2],
                                                       const uint32_t (&xw)[kXWords<K>], const float (&tok_scale)[2],
                                                       int c, const MvArgs& a, const float* const (&tile_scales)[MT],
                                                       const float* ws_ahead = nullptr) {
  constexpr bool kNative = K == MatvecMmaKind::kFp8Native;
  constexpr bool kFp8 = KindOf<K>::kElems == 16;
  if (kNative || (kFp8 && a.chunk_scales)) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float t[4] = {0.f, 0.f, 0.f, 0.f};
      chunk_mma<K>(t, wv[mt][0], wv[mt][1], xw);
      const float ws = !a.chunk_scales ? 1.f
                       : ws_ahead != nullptr
                           ? ws_ahead[mt]
                           : __ldg(tile_scales[mt] + static_cast<uint32_t>(c * 64) / static_cast<uint32_t>(a.block_cols));
      acc[mt][0] = fmaf(t[0], ws * tok_scale[0], acc[mt][0]);
      acc[mt][1] = fmaf(t[1], ws * tok_scale[1], acc[mt][1]);
      acc[mt][2] = fmaf(t[2], ws * tok_scale[0], acc[mt][2]);
      acc[mt][3] = fmaf(t[3], ws * tok_scale[1], acc[mt][3]);
    }
  } else {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) chunk_mma<K>(acc[mt], wv[mt][0], wv[mt][1], xw);
  }
}

// The same from the lane's E floats v (rounded here).
template <MatvecMmaKind K, int MT>
__device__ __forceinline__ void chunk_accumulate(float (&acc)[MT][4], const uint4 (&wv)[MT][2], const float* v,
                                                 int c, int p, const MvArgs& a,
                                                 const float* const (&tile_scales)[MT],
                                                 const float* ws_ahead = nullptr) {
  uint32_t xw[kXWords<K>];
  float tok_scale[2];
  round_x<K>(v, p, xw, tok_scale);
  chunk_accumulate_words<K, MT>(acc, wv, xw, tok_scale, c, a, tile_scales, ws_ahead);
}

// The lane's activations of one chunk between their load and their use in the streaming kernel:
// floats, rounded in registers, or staged (launch_stage_act_mma) the words themselves, and for
// native FP8 the chunk's scales of tokens 2p, 2p + 1; with FP8 block scales, each tile's weight
// scale of the chunk (read with the activations, a chunk ahead: read at the mma, its global round
// trip held every chunk; qwen2-7b FP8 block-128 weight-only tg128 391.4 / 391.6 tok/s against
// 386.1 / 385.4, per-channel level, H200, perf.md session 35).
template <MatvecMmaKind K, bool kStaged>
struct XBuf {
  float v[KindOf<K>::kElems];
  float ws[2];
};
template <MatvecMmaKind K>
struct XBuf<K, true> {
  uint32_t w[kXWords<K>];
  float s[2];
  float ws[2];
};

// The block-scale row of each of the MT tiles from row0 (tiles never straddle a row block:
// block_rows % 16 == 0); null for F16/BF16.
template <MatvecMmaKind K, int MT>
__device__ __forceinline__ void tile_scale_rows(const MvArgs& a, int64_t row0, const float* (&tile_scales)[MT]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    tile_scales[mt] = nullptr;
    if constexpr (KindOf<K>::kElems == 16) {
      int64_t r = row0 + 16 * mt;
      if (r >= a.n_rows) r = a.n_rows - 1;
      tile_scales[mt] = a.scales + (r / a.block_rows) * a.scale_cols;
    }
  }
}

// What store_unit reads from global memory for this thread's outputs of a unit, read (by the
// streaming kernel) when it enters the unit instead of after its last chunk: the row's per-tensor /
// per-channel FP8 scale and, when adding into y without atomics, y's old value. At the end of a
// unit those dependent loads held the warps (and so their next weight copies) for a global round
// trip: in ncu's PC sampling of the qwen2-7b FP8 weight-only gate/up product, the multiply by the
// scale and the add of y held 11.7% and 6.1% of all warp samples. Read ahead: qwen2-7b tg128 FP8
// weight-only 403.1 / 403.5 tok/s against 386.8 / 383.8, BF16 263.0 / 262.0 against 258.8 / 260.2
// (H200, same run, perf.md session 35).
template <int MT, int W>
struct UnitPre {
  static constexpr int kItems = (MT * 128 + W * 32 - 1) / (W * 32);
  float scale[kItems];
  float y[kItems];
};

template <MatvecMmaKind K, int MT, int W>
__device__ __forceinline__ void preload_unit(UnitPre<MT, W>& pre, int64_t row0, const MvArgs& a, bool partial) {
#pragma unroll
  for (int k = 0; k < UnitPre<MT, W>::kItems; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * W * 32;
    const int mt = i >> 7, r = (i >> 3) & 15, t = i & 7;
    const int64_t row = row0 + 16 * mt + r;
    const bool valid = i < MT * 128 && t < a.n && row < a.n_rows;
    pre.scale[k] = 1.f;
    if constexpr (KindOf<K>::kElems == 16) {
      if (valid && !a.chunk_scales) pre.scale[k] = __ldg(a.scales + (row / a.block_rows) * a.scale_cols);
    }
    pre.y[k] = valid && a.accumulate && !partial ? a.y[t * a.ldy + row] : 0.f;
  }
}

// Sums the W warps' accumulators of the MT tiles from row0 through red (shared memory:
// red[warp][mt][j][lane]) and stores y (adds when accumulating; atomically for a partial unit,
// whose other chunks are another CTA's): thread i of the CTA takes (tile, row, token) i, with the
// row scale and old y that preload_unit read into pre; per-tensor / per-channel FP8 scales are
// applied here. Every thread of the CTA calls it; red may be reused after a barrier.
template <MatvecMmaKind K, int MT, int W>
__device__ __forceinline__ void store_unit(const float (&acc)[MT][4], float (&red)[W][MT][4][32], int64_t row0,
                                           const MvArgs& a, bool partial, const UnitPre<MT, W>& pre) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < 4; ++j) red[warp][mt][j][lane] = acc[mt][j];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < UnitPre<MT, W>::kItems; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * W * 32;
    if (i >= MT * 128) break;
    const int mt = i >> 7, r = (i >> 3) & 15, t = i & 7;
    const int64_t row = row0 + 16 * mt + r;
    if (t >= a.n || row >= a.n_rows) continue;
    const int src = (r & 7) * 4 + (t >> 1), j = (r >> 3) * 2 + (t & 1);
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) s += red[w][mt][j][src];
    if constexpr (KindOf<K>::kElems == 16) {
      if (!a.chunk_scales) s *= pre.scale[k];
      s *= a.unscale;
    }
    float* out = a.y + t * a.ldy + row;
    if (partial) atomicAdd(out, s);  // the unit's other chunks are another CTA's
    else *out = a.accumulate ? pre.y[k] + s : s;
  }
}

// Grid: ceil(n_rows / (16 MT)) CTAs of kWarps warps. See the file comment.
template <MatvecMmaKind K, int MT, int W, int U>
__global__ void __launch_bounds__(W * 32) matvec_mma_kernel(MvArgs a) {
  constexpr int kWarps = W;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int E = KindOf<K>::kElems;
  pdl_trigger();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, p = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * (16 * MT);
  const int64_t n_chunks = (a.n_pieces + kChunkPieces - 1) / kChunkPieces;
  const uint8_t* wrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int64_t r = row0 + 16 * mt + g + 8 * h;
      if (r >= a.n_rows) r = a.n_rows - 1;  // past the end: loaded, never stored
      wrow[mt][h] = a.w + r * a.row_bytes + p * 16;
    }
  const bool has_x = g < a.n;
  const float* xrow = a.x + (has_x ? g : 0) * a.ldx + p * E;
  const float* tile_scales[MT];
  tile_scale_rows<K, MT>(a, row0, tile_scales);
  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[mt][j] = 0.f;
  bool waited = false;
  for (int64_t c0 = warp; c0 < n_chunks; c0 += kWarps * U) {
    uint4 wv[U][MT][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + u * kWarps;
      const bool ok = c < n_chunks && c * kChunkPieces + p < a.n_pieces;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[u][mt][h] = ok ? ldg_stream(wrow[mt][h] + c * 64) : make_uint4(0, 0, 0, 0);
    }
    if (!waited) {  // activations are read only from here on
      pdl_wait();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + u * kWarps;
      if (c >= n_chunks) break;  // uniform across the warp
      float v[E];
      const bool ok = has_x && c * kChunkPieces + p < a.n_pieces;
      if (ok) {
        detail::load_as_float<float, E>(xrow + c * kChunkPieces * E, v);
      } else {
#pragma unroll
        for (int i = 0; i < E; ++i) v[i] = 0.f;
      }
      chunk_accumulate<K, MT>(acc, wv[u], v, c, p, a, tile_scales);
    }
  }
  if (!waited) pdl_wait();
  __shared__ float red[kWarps][MT][4][32];
  UnitPre<MT, kWarps> pre;
  preload_unit<K, MT, kWarps>(pre, row0, a, /*partial=*/false);
  store_unit<K, MT, kWarps>(acc, red, row0, a, /*partial=*/false, pre);
#else
  __trap();
#endif
}

// Streaming form of the kernel above (the default on sm_80+; DUET_MATVEC_STREAM=0 the kernel
// above). Persistent: the grid is the resident CTAs (at most one per unit without stream_k), CTA b
// takes an equal share of consecutive units (MT m16 tiles, all chunks), and its warps split each
// unit's chunks round-robin as above. With stream_k (products that add into y: the residual, or
// an output zeroed by an earlier launch's side job) the grid is every resident CTA and CTA b
// takes an equal share of all (unit, chunk) pairs instead: a split unit's CTAs add their sums
// atomically. Whole units left the last CTAs of a wave idle: qwen2-7b's 4608-row q/k/v product
// has 144 units of 32 rows for 132 one-CTA SMs (twelve CTAs took two), the 3584-row o and down
// products 112 (twenty SMs idle), and gate/up 1184 for 264 CTAs (4.48 a CTA, so five). The weights travel by cp.async into a ring of D slots per thread: each
// thread copies exactly the pieces it will multiply (its rows g, g + 8 of each tile, piece p of
// the chunk), so no barrier guards the ring, only the thread's own wait_group; D - 1 chunks are
// always in flight, across unit boundaries (the next unit's weights load while this one's warps
// are summed). A slot is refilled one iteration after it was read, when the mma that consumed
// its registers has issued. Where the kernel above waits a DRAM round trip for every U chunks
// and ends each CTA with the ramp of the next, this one keeps (D - 1) x 16 MT x 32 bytes a warp
// in flight for the whole call. Same arithmetic and order of sums per lane and warp as above: with
// the same warps and tiles (DUET_MATVEC_STREAM_CFG=4 and DUET_MATVEC_MMA_MT) the results are
// bit-identical to it (matmul_test MatvecMma checks). Measured on the H200 (2026-11-30, launcher
// choice): qwen2-7b FP8 weight-only tg128 339.7 / 339.8 tok/s against 312.8 / 312.2 with the
// classic kernel, native 286.8 / 286.4 against 262.3 / 262.3 (same run).
// Measured and dropped (H200, qwen2-7b tg128, perf.md session 36): a second `red` array so that
// one barrier a unit suffices, with the next unit's first activations prefetched into L1 before
// the unit's sums (FP8 weight-only 395.9 / 396.0 tok/s against 401.9 / 401.6, BF16 261.8 / 262.0
// against 262.6 / 262.6); the first unit's row scales read before the programmatic wait (402.0 /
// 402.1 against 401.8 / 402.3: level); each warp's first four chunks of activations prefetched
// into L1 after the wait (400.6 / 400.2).
// L2F: the weight copies' L2 prefetch-size hint in bytes (0: none; see launch_stream_cfg).
// kStaged (FP8 kinds): the activations come staged (a.xs, a.xsc: launch_stage_act_mma) as the
// words chunk_mma multiplies, instead of floats that every CTA rounds again for every chunk
// (see matvec_mma_stages). Chunk and unit indices are 32-bit (the launcher checks n_units x
// n_chunks), the cursor keeps its unit's chunk end, and the chunk loop is unrolled by two so that
// the activations read one chunk ahead alternate between two buffers instead of being moved:
// ~120 instructions a chunk on the weight-only path instead of ~190, qwen2-7b FP8 weight-only
// tg128 380.1 / 379.9 tok/s against 372.1 / 370.8 (H200, session 24, same run).
template <MatvecMmaKind K, int MT, int W, int D, int L2F, bool kStaged>
__global__ void __launch_bounds__(W * 32) matvec_mma_stream_kernel(MvArgs a, int n_units) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ uint4 ring[];  // [D][2 MT][W * 32]: thread-private slots, conflict-free
  constexpr int S = 2 * MT;
  constexpr int T = W * 32;
  constexpr int E = KindOf<K>::kElems;
  constexpr bool kNative = K == MatvecMmaKind::kFp8Native;
  pdl_trigger();
#ifdef DUET_CTA_TIMELINE
  const unsigned long long cta_t0 = detail::cta_clock();
#endif
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, p = lane & 3;
  const int n_chunks = a.n_chunks;
  const int n_pieces = static_cast<int>(a.n_pieces);
  // This CTA's work: the (unit, chunk) pairs f0 <= unit * n_chunks + chunk < f1, i.e. chunks
  // [lo(u), hi(u)) of units u0 <= u < u1: whole units (an equal share of them), or with
  // stream_k an equal share of all chunks, so that a unit may be split between two CTAs (or more,
  // when there are fewer units than CTAs) whose sums are then added atomically.
  const int64_t G = gridDim.x, b = blockIdx.x, total = int64_t{n_units} * n_chunks;
  const int f0 = static_cast<int>(a.stream_k ? b * total / G : b * n_units / G * n_chunks);
  const int f1 = static_cast<int>(a.stream_k ? (b + 1) * total / G : (b + 1) * n_units / G * n_chunks);
  const int u0 = f0 / n_chunks, u1 = (f1 + n_chunks - 1) / n_chunks;
  auto lo = [&](int u) { return max(f0 - u * n_chunks, 0); };
  auto hi = [&](int u) { return min(f1 - u * n_chunks, n_chunks); };
  // Copy cursor (unit, chunk) of the next chunk this warp loads, and that unit's chunk end: the
  // warps take each unit's chunks round-robin from lo(u); a warp with none left in a unit moves
  // to the next. cp_row: the lane's row starts (rows g, g + 8 of each tile) in the cursor's unit,
  // found when it enters one, so that a copy is a pointer and an offset (the copies are on every
  // iteration's issue path; qwen2-7b FP8 weight-only tg128 372.7 / 373.4 tok/s against 365.6 /
  // 367.2 with the row arithmetic at every copy, same H200 run, session 23).
  int cp_unit = u0, cp_c = lo(u0) + warp, cp_hi = hi(u0);
  const unsigned ring_s = static_cast<unsigned>(__cvta_generic_to_shared(ring + tid));  // the thread's slot 0
  const uint8_t* cp_row[MT][2];
  auto enter_unit = [&] {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int64_t r = int64_t{cp_unit} * (16 * MT) + 16 * mt + g + 8 * h;
        if (r >= a.n_rows) r = a.n_rows - 1;  // past the end: loaded, never stored
        cp_row[mt][h] = a.w + r * a.row_bytes + p * 16;
      }
  };
  auto settle = [&] {
    while (cp_unit < u1 && cp_c >= cp_hi) {
      ++cp_unit;
      cp_c = lo(cp_unit) + warp;
      cp_hi = hi(cp_unit);
      if (cp_unit < u1 && cp_c < cp_hi) enter_unit();
    }
  };
  if (cp_unit < u1 && cp_c < cp_hi) enter_unit();
  settle();
  auto copy_next = [&](int slot) {
    if (cp_unit < u1) {
      const bool ok = cp_c * kChunkPieces + p < n_pieces;
      const int off = ok ? cp_c * 64 : -p * 16;  // past the row's pieces: its start, zero-filled
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          detail::cp_async16_l2<L2F>(ring_s + (slot * S + 2 * mt + h) * (T * 16), cp_row[mt][h] + off, ok ? 16 : 0);
      cp_c += W;
      settle();
    }
    detail::cp_async_commit();  // empty groups too: every thread counts the same groups
  };
#pragma unroll
  for (int d = 0; d < D - 1; ++d) copy_next(d);
  pdl_wait();  // activations (and y, when accumulating) come from the previous kernel
#ifdef DUET_CTA_TIMELINE
  const unsigned long long cta_t1 = detail::cta_clock();
#endif
  if (a.zero_n > 0)  // the side job: a later product's output, zeroed for its atomic sums
    for (int64_t i = b * T + tid; i < a.zero_n; i += G * T) a.zero[i] = 0.f;
  const bool has_x = g < a.n;
  const float* xrow = a.x + (has_x ? g : 0) * a.ldx + p * E;
  // Staged: token g's chunk row (tokens past n read token n - 1's: their sums are never stored);
  // lane p's 16 values are 32 bytes (F16) or 16 (E4M3) at 64 columns a chunk, its tokens' scales
  // (native) a float2 at 8 a chunk. Read through pointers that step W chunks, up to W - 1 chunks
  // past the unit's last (matvec_mma_stage_size pads the buffers for it).
  constexpr int kXU = kNative ? 4 : 8;  // 16-byte units of a staged chunk
  const uint4* xs_row = static_cast<const uint4*>(a.xs) + int64_t{min(g, a.n - 1)} * n_chunks * kXU + p * (kXU / 4);
  const float2* sc_row = reinterpret_cast<const float2*>(a.xsc) + p;
  __shared__ float red[W][MT][4][32];
  int slot = 0;
  for (int unit = u0; unit < u1; ++unit) {
    const int c_lo = lo(unit), c_hi = hi(unit);
    if (c_lo >= c_hi) continue;  // uniform across the CTA
    const int64_t row0 = int64_t{unit} * (16 * MT);
    const bool partial = c_lo > 0 || c_hi < n_chunks;
    UnitPre<MT, W> pre;
    preload_unit<K, MT, W>(pre, row0, a, partial);
    const float* tile_scales[MT];
    tile_scale_rows<K, MT>(a, row0, tile_scales);
    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mt][j] = 0.f;
    // The lane's activations of chunk c, read one chunk ahead (x may come from L2: with the ring
    // in shared memory, L1 is small); staged, the chunks c_lo + warp, + W, ... in turn.
    const uint4* xp = xs_row + (c_lo + warp) * kXU;
    const float2* sp = sc_row + (c_lo + warp) * 4;
    auto load_x = [&](int c, XBuf<K, kStaged>& xb) {
      if constexpr (kStaged) {
        if constexpr (kNative) {
          const uint4 q = __ldg(xp);
          xb.w[0] = q.x, xb.w[1] = q.y, xb.w[2] = q.z, xb.w[3] = q.w;
          const float2 sc = __ldg(sp);
          xb.s[0] = sc.x, xb.s[1] = sc.y;
          xp += W * kXU;
          sp += W * 4;
        } else {
          const uint4 q0 = __ldg(xp), q1 = __ldg(xp + 1);
          xp += W * kXU;
          xb.w[0] = q0.x, xb.w[1] = q0.y, xb.w[2] = q0.z, xb.w[3] = q0.w;
          xb.w[4] = q1.x, xb.w[5] = q1.y, xb.w[6] = q1.z, xb.w[7] = q1.w;
          xb.s[0] = xb.s[1] = 1.f;
        }
      } else if (has_x && c < c_hi && c * kChunkPieces + p < n_pieces) {
        detail::load_as_float<float, E>(xrow + int64_t{c} * (kChunkPieces * E), xb.v);
      } else {
#pragma unroll
        for (int i = 0; i < E; ++i) xb.v[i] = 0.f;
      }
      if constexpr (E == 16) {
        static_assert(MT <= 2, "XBuf::ws holds two tiles' scales");
        if (a.chunk_scales) {
          const uint32_t col = static_cast<uint32_t>(min(c, n_chunks - 1) * 64) / static_cast<uint32_t>(a.block_cols);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) xb.ws[mt] = __ldg(tile_scales[mt] + col);
        }
      }
    };
    auto step = [&](int c, const XBuf<K, kStaged>& xb) {
      detail::cp_async_wait<D - 2>();  // this chunk's group has landed (D - 2 newer ones may not)
      uint4 wv[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[mt][h] = detail::lds128(ring_s + (slot * S + 2 * mt + h) * (T * 16));
      copy_next(slot == 0 ? D - 1 : slot - 1);  // the slot read last iteration
      slot = slot == D - 1 ? 0 : slot + 1;
      if constexpr (kStaged) chunk_accumulate_words<K, MT>(acc, wv, xb.w, xb.s, c, a, tile_scales, xb.ws);
      else chunk_accumulate<K, MT>(acc, wv, xb.v, c, p, a, tile_scales, xb.ws);
    };
    XBuf<K, kStaged> xa, xb;
    int c = c_lo + warp;
    load_x(c, xa);
    while (c < c_hi) {
      load_x(c + W, xb);
      step(c, xa);
      c += W;
      if (c >= c_hi) break;
      load_x(c + W, xa);
      step(c, xb);
      c += W;
    }
    // Sum the warps of this unit (the ring keeps loading the next unit meanwhile).
    store_unit<K, MT, W>(acc, red, row0, a, partial, pre);
    __syncthreads();
  }
  detail::cp_async_wait<0>();
#ifdef DUET_CTA_TIMELINE
  detail::cta_record(a.w, a.n_rows, cta_t0, cta_t1);
#endif
#else
  __trap();
#endif
}

// Benchmark knobs, read at each launch (eager benchmarks flip them between calls; env_int,
// base/env.h): DUET_MATVEC_MMA_MT=1|2 forces the tiles per CTA; DUET_MATVEC_MMA_CFG=0..3 picks
// (warps per CTA, chunks in flight per warp): 0 (8, 2 or 4 by MT: the default), 1 (4, 4), 2 (8, 4),
// 3 (16, 2).

template <MatvecMmaKind K, int MT, int W, int U>
void launch_cfg(const MvArgs& a, bool pdl, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>((a.n_rows + 16 * MT - 1) / (16 * MT));
  detail::launch_maybe_pdl(matvec_mma_kernel<K, MT, W, U>, dim3(grid), dim3(W * 32), 0, s, pdl, a);
}

template <MatvecMmaKind K, int MT>
void launch_mt(const MvArgs& a, int cfg, bool pdl, cudaStream_t s) {
  switch (cfg) {
    case 1: return launch_cfg<K, MT, 4, 4>(a, pdl, s);
    case 2: return launch_cfg<K, MT, 8, 4>(a, pdl, s);
    case 3: return launch_cfg<K, MT, 16, 2>(a, pdl, s);
    default: return launch_cfg<K, MT, 8, MT == 1 ? 4 : 2>(a, pdl, s);
  }
}

// Fraction of the last wave's CTA slots that hold work, for MT tiles per CTA of the default
// configuration: the grid is one CTA per MT tiles, and a partial last wave leaves SMs idle.
template <MatvecMmaKind K, int MT>
double wave_fill(const MvArgs& a) {
  static int per_sm = 0;  // resident CTAs per SM (once per instance; the first call is eager)
  if (per_sm == 0) {
    DUET_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, matvec_mma_kernel<K, MT, 8, MT == 1 ? 4 : 2>, 8 * 32, 0));
    per_sm = per_sm > 0 ? per_sm : 1;
  }
  const double slots = static_cast<double>(per_sm) * detail::current_sm_count();
  const double waves = static_cast<double>((a.n_rows + 16 * MT - 1) / (16 * MT)) / slots;
  return waves / std::ceil(waves);
}

// The streaming kernel with D ring slots: grid = its resident CTAs (occupancy x SMs, found once
// per instance and device), at most one per unit.
template <MatvecMmaKind K, int MT, int W, int D, int L2F, bool kStaged>
void launch_stream_hinted(const MvArgs& a, bool pdl, cudaStream_t s) {
  static_assert(!kStaged || W <= kMaxStreamWarps, "matvec_mma_stage_size pads the staged rows by kMaxStreamWarps chunks");
  constexpr size_t kSmem = size_t{D} * 2 * MT * W * 32 * 16;
  const auto kernel = matvec_mma_stream_kernel<K, MT, W, D, L2F, kStaged>;
  const int per_sm = detail::opt_in_ctas_per_sm(reinterpret_cast<const void*>(kernel), W * 32, kSmem);
  // FP8 weight-only: the smallest shared-memory carve-out for the resident CTAs, so that L1 keeps
  // the rest for the float activations every chunk reads (H200, qwen2-7b FP8 weight-only tg128,
  // perf.md session 32, two interleaved rounds: 382.7 / 384.4 tok/s at 65%, what this gives
  // there, against 378.1 / 379.7 with the driver's choice and 377.3 / 378.7 at 100%).
  // DUET_MATVEC_CARVEOUT=P (benchmark knob, 0-100, read once per kernel and device) asks for P%
  // instead, for any kind.
  const int carve = env_int("DUET_MATVEC_CARVEOUT", 0, 100);
  if (carve >= 0 || K == MatvecMmaKind::kFp8Hw || K == MatvecMmaKind::kFp8Soft)
    detail::prefer_l1_carveout(reinterpret_cast<const void*>(kernel), per_sm, kSmem, carve);
  const int64_t units = (a.n_rows + 16 * MT - 1) / (16 * MT);
  DUET_CHECK_MSG(units * a.n_chunks < (int64_t{1} << 31), "matvec_mma: %lld rows x %d chunks beyond 32-bit indices",
                 static_cast<long long>(a.n_rows), a.n_chunks);
  const int64_t slots = int64_t{per_sm} * detail::current_sm_count();
  const int64_t grid = a.stream_k ? slots : std::min<int64_t>(units, slots);
  detail::launch_maybe_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(W * 32), kSmem, s, pdl, a,
                           static_cast<int>(units));
}

// The weight copies' L2 prefetch-size hint (cp.async .L2::NB), so that a row's neighbouring
// chunks, which the CTA's other warps copy next, may come in one DRAM request: 128 bytes for FP8
// weight-only (measured on the H200, qwen2-7b FP8 weight-only, five calls of session 23: tg128
// 361.8-367.2 tok/s against 357.0-361.1 without, +1.5-2.1% in each call; the 8-sequence step
// 3.208-3.244 ms against 3.326-3.378; 256 bytes 364.1-364.9) and for native FP8 from staged
// activations (session 24: 370.6 / 370.0 against 358.3 / 358.2 without, 256 bytes 369.9 /
// 369.5; with its activations rounded in the kernel the hint had been neutral, 300.5 against
// 301.1-302.1, and it stays off there) and for F16/BF16 (session 26 call 3, qwen2-7b BF16
// one-token decode, two rounds: tg128 255.9 / 256.4 tok/s against 241.0 / 241.6 without, 256
// bytes 254.4 / 254.7). DUET_MATVEC_L2PF=0|128|256 (benchmark knob, read at each launch)
// overrides it.
template <MatvecMmaKind K, int MT, int W, int D, bool kStaged>
void launch_stream_cfg(const MvArgs& a, bool pdl, cudaStream_t s) {
  int hint = env_int("DUET_MATVEC_L2PF", 0, 256);
  if (hint < 0) hint = K == MatvecMmaKind::kFp8Native && !kStaged ? 0 : 128;
  switch (hint) {
    case 128: return launch_stream_hinted<K, MT, W, D, 128, kStaged>(a, pdl, s);
    case 256: return launch_stream_hinted<K, MT, W, D, 256, kStaged>(a, pdl, s);
    default: return launch_stream_hinted<K, MT, W, D, 0, kStaged>(a, pdl, s);
  }
}

// (warps per CTA, ring slots): 16 warps and 3 slots for matrices of fewer than two units an SM
// (without stream-K) and for F16/BF16, else 8 warps and 4 slots; DUET_MATVEC_STREAM_CFG=3|4
// (benchmark knob) forces one (at one tile a unit the slots double, so that the ring's bytes stay
// the same). From the H200 sweep (2026-11-30, n = 1, % of 4.3 TB/s against the classic kernel's,
// with three more configurations since dropped: 8 warps and 8 or 12 slots, 4 warps and 16):
// two tiles per unit everywhere; 16 warps and 3 slots for the short matrices and for F16/BF16
// (FP8 weight-only 3584 x 3584 52.9 against 47.6, 3584 x 18944 75.0 against 61.5; BF16 at n = 2
// 72-95% against 58-87%), 8 warps and 4 slots for the taller FP8 matrices (18944 x 3584 74.5
// against 65.5, 152064 x 3584 90.1 against 88.9; 16 warps there: 63.6 and 70.0). With stream-K
// (accumulating launches) the short FP8 matrices take 8 warps too: whole units had left 16-warp
// CTAs the better fit for a grid of one unit a CTA, which stream-K no longer has (qwen2-7b FP8
// weight-only one-token step 2.788-2.798 ms with 8 warps everywhere against 2.816-2.825 with 16
// for them, same run, perf.md session 21). Staged launches take two tiles.
template <MatvecMmaKind K, bool kStaged>
void launch_kind(const MvArgs& a, bool pdl, cudaStream_t s) {
  int cfg = env_int("DUET_MATVEC_STREAM_CFG", 3, 4);
  if (cfg < 0) {
    const bool short_matrix = (a.n_rows + 31) / 32 < 2 * static_cast<int64_t>(detail::current_sm_count());
    cfg = (short_matrix && !a.stream_k) || K == MatvecMmaKind::kF16 || K == MatvecMmaKind::kBf16 ? 3 : 4;
  }
  int mt = 2;
  if (const int f = env_int("DUET_MATVEC_MMA_MT", 1, 2); f > 0 && !kStaged) mt = f;
  if (mt == 2) {
    if (cfg == 3) launch_stream_cfg<K, 2, 16, 3, kStaged>(a, pdl, s);
    else launch_stream_cfg<K, 2, 8, 4, kStaged>(a, pdl, s);
  } else if constexpr (!kStaged) {
    if (cfg == 3) launch_stream_cfg<K, 1, 16, 6, false>(a, pdl, s);
    else launch_stream_cfg<K, 1, 8, 8, false>(a, pdl, s);
  }
}

// The classic kernel: two tiles per CTA (activation fragments shared by 32 rows) unless one tile
// per CTA fills the last wave of CTAs clearly better (the 3584-4608-row matrices of 7B models).
template <MatvecMmaKind K>
void launch_classic(const MvArgs& a, bool pdl, cudaStream_t s) {
  int mt = wave_fill<K, 1>(a) > wave_fill<K, 2>(a) + 0.1 ? 1 : 2;
  if (const int f = env_int("DUET_MATVEC_MMA_MT", 1, 2); f > 0) mt = f;
  const int cfg = env_int("DUET_MATVEC_MMA_CFG", 0, 3);
  if (mt == 2) launch_mt<K, 2>(a, cfg, pdl, s);
  else launch_mt<K, 1>(a, cfg, pdl, s);
}

// Stream-K for the products that add into y, unless DUET_MATVEC_STREAMK=0 (A/B knob, read once).
bool stream_k_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("DUET_MATVEC_STREAMK");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return on;
}

// launch_stage_act_mma: 16 threads per (token, 64-column chunk), four consecutive values each
// (valid is a multiple of 16, so a thread's four are all in x or all past it, where they are
// zero). Weight-only: the values as F16 in chunk_mma's pairing (pack_x's); native: the chunk's
// amax over its 16 threads (shuffles within the half-warp: whole half-warps share a chunk), the
// values times 448 / amax as E4M3 (saturating) and the scale amax / 448 (0 for an all-zero
// chunk), exactly as round_x.
template <MatvecMmaKind K>
__global__ void stage_act_mma_kernel(const float* __restrict__ x, int64_t ldx, int n, int valid, int n_chunks,
                                     void* __restrict__ xs, float* __restrict__ xsc, bool pdl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (pdl) {
    pdl_trigger();
    pdl_wait();
  }
  const int q = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) >> 4);  // token * n_chunks + chunk
  if (q >= n * n_chunks) return;
  const int j = static_cast<int>(threadIdx.x & 15);
  const int t = q / n_chunks, c = q - t * n_chunks, col = 64 * c + 4 * j;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (col < valid) v = *reinterpret_cast<const float4*>(x + t * ldx + col);
  if constexpr (K == MatvecMmaKind::kFp8Native) {
    const unsigned mask = 0xffffu << (threadIdx.x & 16);
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
    const float inv = amax > 0.f ? 448.f / amax : 0.f;
    static_cast<uint32_t*>(xs)[q * 16 + j] = pack_e4m3x4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
    if (j == 0) xsc[c * 8 + t] = amax / 448.f;
  } else if constexpr (K == MatvecMmaKind::kFp8Hw) {
    static_cast<uint2*>(xs)[q * 16 + j] = make_uint2(pack_h2(v.x, v.y), pack_h2(v.z, v.w));
  } else {  // kFp8Soft: halves (0, 2), (1, 3)
    static_cast<uint2*>(xs)[q * 16 + j] = make_uint2(pack_h2(v.x, v.z), pack_h2(v.y, v.w));
  }
#else
  __trap();
#endif
}

// 16 threads per (token, chunk), 128 a block.
template <MatvecMmaKind K>
void launch_stage(const float* x, int64_t ldx, int n, int valid, int n_chunks, void* xs, float* xsc, bool pdl,
                  cudaStream_t s) {
  const int threads = 128;
  const unsigned grid = static_cast<unsigned>((int64_t{n} * n_chunks * 16 + threads - 1) / threads);
  detail::launch_maybe_pdl(stage_act_mma_kernel<K>, dim3(grid), dim3(threads), 0, s, pdl, x, ldx, n, valid, n_chunks,
                           xs, xsc, pdl);
}

}  // namespace

// Native FP8 always (its in-kernel rounding is an amax, shuffles and four packs a chunk); weight-only
// from two tokens on. qwen2-7b on the H200 (session 24, two rounds, tg128 tok/s / x8 step ms):
// native staged 358.3 / 358.2 (x8 3.168 / 3.171) against 349.0 / 350.2 with the first staging
// form, 301.8-301.9 rounding in the kernel; weight-only at one token staged 370.6 / 370.5
// against 380.1 / 379.9 (the staging launch costs what it saves), at eight 2.991 / 2.992 ms
// against 3.161 / 3.163. DUET_MATVEC_STAGE (A/B knob): 0 never stages, 1 only by this launch
// (no producers), unset (2) as described.
// DUET_MATVEC_STAGE, -1 when unset: 0 never stages, 1 only by the staging launch, 2 as unset, 3
// producers at one token too (read at each call, like the knobs above).
int stage_mode() { return env_int("DUET_MATVEC_STAGE", 0, 3); }

bool matvec_mma_stages(MatvecMmaKind kind, int n) {
  if (kind != MatvecMmaKind::kFp8Hw && kind != MatvecMmaKind::kFp8Soft && kind != MatvecMmaKind::kFp8Native)
    return false;
  if (!matvec_mma_zeroes()) return false;
  const int mode = stage_mode();
  if (mode == 0 || mode == 1) return mode == 1;
  return kind == MatvecMmaKind::kFp8Native || n >= 2;
}

bool matvec_mma_producers_stage() {
  const int mode = stage_mode();
  return matvec_mma_zeroes() && (mode < 0 || mode >= 2);
}

int matvec_mma_producers_min_tokens() { return stage_mode() == 3 ? 1 : 2; }

// kMaxStreamWarps chunks of padding: the streaming kernel reads up to W - 1 chunks past the last.
MatvecMmaStage matvec_mma_stage_size(int n, int64_t n_cols) {
  const int64_t n_chunks = (n_cols + 63) / 64;
  return {static_cast<size_t>(n * n_chunks + kMaxStreamWarps) * 128,
          static_cast<size_t>(n_chunks + kMaxStreamWarps) * 8};
}

void launch_stage_act_mma(const DeviceMatrix& w, MatvecMmaKind kind, const float* x, int64_t ldx, int n, void* xs,
                          float* xsc, bool pdl, cudaStream_t s) {
  const int64_t n_pieces = static_cast<int64_t>(w.row_bytes / 16), n_chunks = (n_pieces + 3) / 4;
  DUET_CHECK(n >= 1 && n <= 8 && w.dtype == DType::kF8_E4M3 && n_chunks * 64 < (int64_t{1} << 31) &&
             ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(xs) % 16 == 0);
  const int valid = static_cast<int>(n_pieces * 16), nc = static_cast<int>(n_chunks);
  switch (kind) {
    case MatvecMmaKind::kFp8Hw: launch_stage<MatvecMmaKind::kFp8Hw>(x, ldx, n, valid, nc, xs, xsc, pdl, s); break;
    case MatvecMmaKind::kFp8Soft: launch_stage<MatvecMmaKind::kFp8Soft>(x, ldx, n, valid, nc, xs, xsc, pdl, s); break;
    case MatvecMmaKind::kFp8Native:
      DUET_CHECK(xsc != nullptr);
      launch_stage<MatvecMmaKind::kFp8Native>(x, ldx, n, valid, nc, xs, xsc, pdl, s);
      break;
    default: DUET_CHECK_MSG(false, "launch_stage_act_mma: an FP8 kind only");
  }
  DUET_CUDA_CHECK_LAUNCH();
}

bool matvec_mma_fits(const DeviceMatrix& w, MatvecMmaKind kind) {
  if (w.row_bytes % 16 != 0 || w.n_rows < 1) return false;
  switch (kind) {
    case MatvecMmaKind::kF16: return w.dtype == DType::kF16;
    case MatvecMmaKind::kBf16: return w.dtype == DType::kBF16;
    default:
      if (w.dtype != DType::kF8_E4M3 || w.fp8_scales == nullptr) return false;
      // Block scales: a 16-row tile and a 64-column chunk must lie inside one block.
      if (w.fp8_block_cols < w.n_cols) return w.fp8_block_cols % 64 == 0 && w.fp8_block_rows % 16 == 0;
      return true;
  }
}

bool matvec_mma_zeroes() { return env_int("DUET_MATVEC_STREAM", 0, 1) != 0; }

#ifdef DUET_CTA_TIMELINE
DUET_CTA_TIMELINE_BIND(cta_timeline_bind_matvec_mma)
#endif

namespace {

MvArgs make_args(const DeviceMatrix& w, MatvecMmaKind kind, const float* x, int64_t ldx, int n, float* y,
                 int64_t ldy, bool accumulate, float* zero, int64_t zero_n) {
  MvArgs a{};
  a.w = static_cast<const uint8_t*>(w.data);
  a.n_rows = w.n_rows;
  a.row_bytes = static_cast<int64_t>(w.row_bytes);
  a.n_pieces = a.row_bytes / 16;
  a.n_chunks = static_cast<int>((a.n_pieces + kChunkPieces - 1) / kChunkPieces);
  a.x = x;
  a.ldx = ldx;
  a.n = n;
  a.y = y;
  a.ldy = ldy;
  a.accumulate = accumulate;
  a.stream_k = accumulate && stream_k_enabled();
  a.zero = zero;
  a.zero_n = zero_n;
  a.unscale = 1.f;
  if (w.dtype == DType::kF8_E4M3) {
    a.scales = w.fp8_scales;
    a.block_rows = w.fp8_block_rows;
    a.block_cols = w.fp8_block_cols;
    a.scale_cols = w.fp8_scale_cols;
    a.chunk_scales = w.fp8_block_cols < w.n_cols;
    if (kind == MatvecMmaKind::kFp8Soft) a.unscale = quant::kFp8Unscale;
  }
  return a;
}

// Float activations: the streaming kernel (DUET_MATVEC_STREAM unset) or the classic one.
template <MatvecMmaKind K>
void launch_float_input(const MvArgs& a, bool pdl, cudaStream_t s) {
  if (matvec_mma_zeroes()) launch_kind<K, false>(a, pdl, s);
  else launch_classic<K>(a, pdl, s);
}

}  // namespace

void launch_matvec_mma(const DeviceMatrix& w, MatvecMmaKind kind, const float* x, int64_t ldx, int n, float* y,
                       int64_t ldy, bool accumulate, bool pdl, cudaStream_t s, float* zero, int64_t zero_n) {
  DUET_CHECK(n >= 1 && n <= 8 && matvec_mma_fits(w, kind) && ldx % 4 == 0 &&
             reinterpret_cast<uintptr_t>(x) % 16 == 0);
  DUET_CHECK(zero_n == 0 || (zero != nullptr && matvec_mma_zeroes()));
  const MvArgs a = make_args(w, kind, x, ldx, n, y, ldy, accumulate, zero, zero_n);
  switch (kind) {
    case MatvecMmaKind::kF16: launch_float_input<MatvecMmaKind::kF16>(a, pdl, s); break;
    case MatvecMmaKind::kBf16: launch_float_input<MatvecMmaKind::kBf16>(a, pdl, s); break;
    case MatvecMmaKind::kFp8Soft: launch_float_input<MatvecMmaKind::kFp8Soft>(a, pdl, s); break;
    case MatvecMmaKind::kFp8Hw: launch_float_input<MatvecMmaKind::kFp8Hw>(a, pdl, s); break;
    case MatvecMmaKind::kFp8Native: launch_float_input<MatvecMmaKind::kFp8Native>(a, pdl, s); break;
  }
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_matvec_mma_staged(const DeviceMatrix& w, MatvecMmaKind kind, const void* xs, const float* xsc, int n,
                              float* y, int64_t ldy, bool accumulate, bool pdl, cudaStream_t s, float* zero,
                              int64_t zero_n) {
  DUET_CHECK(n >= 1 && n <= 8 && matvec_mma_fits(w, kind) && matvec_mma_zeroes() &&
             reinterpret_cast<uintptr_t>(xs) % 16 == 0 && (kind != MatvecMmaKind::kFp8Native || xsc != nullptr));
  DUET_CHECK(zero_n == 0 || zero != nullptr);
  MvArgs a = make_args(w, kind, nullptr, 0, n, y, ldy, accumulate, zero, zero_n);
  a.xs = xs;
  a.xsc = xsc;
  switch (kind) {
    case MatvecMmaKind::kFp8Soft: launch_kind<MatvecMmaKind::kFp8Soft, true>(a, pdl, s); break;
    case MatvecMmaKind::kFp8Hw: launch_kind<MatvecMmaKind::kFp8Hw, true>(a, pdl, s); break;
    case MatvecMmaKind::kFp8Native: launch_kind<MatvecMmaKind::kFp8Native, true>(a, pdl, s); break;
    default: DUET_CHECK_MSG(false, "launch_matvec_mma_staged: an FP8 kind only");
  }
  DUET_CUDA_CHECK_LAUNCH();
}

}  // namespace duet::cuda::kernels
