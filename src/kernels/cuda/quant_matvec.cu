// Decode matrix-vector products (n_tokens <= 8) for every weight type, reading the weights in
// their device layout (quant_types.cuh) once per call. Block-quantized weights: activations are
// first quantized to int8 per 32 values (a q8_1-like format: one float scale and the two half-block
// sums), and each 32-weight chunk is one pair of 4-dp4a chains per token, the weight's scale and
// offset applied per half chunk in float; Q4_K and Q6_K have their own kernel (several rows per
// warp sharing each activation load). F32/F16/BF16 weights: converted to float in registers,
// activations read as float; FP8 likewise, in 4-byte words, several rows per warp (on the
// native path of sm_80+ cards MatmulContext sends FP8, and F16/BF16 batches of 2-8 rows, to the
// tensor-core decode kernel of matvec_mma.cu instead). On the native sm_90 path the K-quant
// product is launched programmatically after the activation quantizer.
// Runs on the caller's stream; no allocation, no sync.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "base/check.h"
#include "base/env.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_kernels.cuh"
#include "kernels/cuda/quant_types.cuh"
#include "runtime/cuda_check.h"

namespace duet::cuda::kernels {
namespace {

using quant::Chunk;
using quant::QT;
using quant::QView;

constexpr int kThreads = 128;  // per block of every decode kernel

using detail::pdl_trigger;
using detail::pdl_wait;

// Reduces acc[t] over the threads of one row (blockDim.x threads, a multiple of 32) and stores
// y[t * ldy + row] for t < n (adds it to y's value when accumulate: the residual add fused into
// the product). Every thread of the block must call it.
template <int NT>
__device__ __forceinline__ void reduce_store(float (&acc)[NT], int n, float* y, int64_t ldy, int64_t row,
                                             int64_t n_rows, bool accumulate) {
  __shared__ float red[kThreads / 32][NT];
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.y * blockDim.x + threadIdx.x) >> 5;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float v = acc[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[warp][t] = v;
  }
  __syncthreads();
  const int warps_per_row = blockDim.x >> 5;
  if (static_cast<int>(threadIdx.x) < n && row < n_rows) {
    float s = 0.f;
    for (int w = 0; w < warps_per_row; ++w) s += red[threadIdx.y * warps_per_row + w][threadIdx.x];
    float* out = y + threadIdx.x * ldy + row;
    *out = accumulate ? *out + s : s;
  }
}

// One warp per 32 activations of one token: x [n][ldx] float -> xq [n][k] int8 (round to
// nearest, scale amax / 127) and xm [n][k / 32] float4. Grid covers n * k / 32 warps.
// Memory-bound and tiny (n <= 8 rows). kPdl: launched programmatically (waits for its producer,
// lets its dependent start early).
template <bool kPdl>
__global__ void quantize_act_q8_kernel(const float* __restrict__ x, int64_t ldx, int n, int64_t k,
                                       int8_t* __restrict__ xq, float4* __restrict__ xm) {
  if constexpr (kPdl) {
    pdl_trigger();
    pdl_wait();
  }
  const int64_t nblk = k / 32;
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (gw >= n * nblk) return;  // uniform per warp
  const int64_t t = gw / nblk, b = gw % nblk;
  detail::quantize_group_q8(x[t * ldx + b * 32 + lane], lane, xq + t * k + b * 32, xm + t * nblk + b);
}

// One thread per element of xs [n][kpad]: copy x, zero beyond k.
__global__ void stage_act_f32_kernel(const float* __restrict__ x, int64_t ldx, int n, int64_t k,
                                     float* __restrict__ xs, int64_t kpad) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * kpad) return;
  const int64_t t = i / kpad, c = i % kpad;
  xs[i] = c < k ? x[t * ldx + c] : 0.f;
}

// Block-quantized W x int8 activations. Thread mapping: block (tpr, 128 / tpr); threadIdx.y picks
// one of 128 / tpr rows, the tpr threads of a row stride over its work items, W = kWideChunks<T>
// consecutive 32-weight chunks of one block each (chunks that share loaded bytes; consecutive
// threads take consecutive items: coalesced). W: QView of type T; xq [n][kq] int8, xm [n][kq / 32]
// float4 (kq = n_cols); y float [n][ldy]. n <= NT <= 8. Bound: memory at n = 1 (weights read once,
// activations from L1/L2); the goal is >= 70% of HBM bandwidth on 7B-shaped matrices, measured on
// the H200: Q8_0 74-101% (40% at 3584 x 3584); Q4_K 45-57%, Q6_K 54-67% here, which is why they
// moved to matvec_kquant_kernel (this one runs them under DUET_MATVEC_LEGACY=1). At n = 8 the
// int8 activation reads from L1 dominate (15-27%).
template <DType T, int NT>
__global__ void __launch_bounds__(kThreads) matvec_q8_kernel(QView w, const int8_t* __restrict__ xq,
                                                             const float4* __restrict__ xm, int n,
                                                             float* __restrict__ y, int64_t ldy, bool accumulate) {
  pdl_trigger();
  pdl_wait();
  constexpr int W = quant::kWideChunks<T>;
  constexpr int kItemsPerBlock = QT<T>::kChunks / W;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t nch = w.blocks_per_row * QT<T>::kChunks;
  const int64_t n_items = nch / W;
  const int64_t kq = nch * 32;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
  if (row < w.n_rows) {
#pragma unroll 2
    for (int64_t it = threadIdx.x; it < n_items; it += blockDim.x) {
      const int64_t b = it / kItemsPerBlock;
      const int c0 = static_cast<int>(it % kItemsPerBlock) * W;
#pragma unroll
      for (int i = 0; i < W; ++i) {
        Chunk ch;
        quant::load_chunk_at<T>(w, row, b, c0 + i, ch);
        const int64_t c = it * W + i;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t < n) {
            const int4* xp = reinterpret_cast<const int4*>(xq + t * kq + c * 32);
            const int4 xa = __ldg(xp), xb = __ldg(xp + 1);
            const float4 mt = __ldg(xm + t * nch + c);
            int s0 = __dp4a(ch.q[0], xa.x, 0);
            s0 = __dp4a(ch.q[1], xa.y, s0);
            s0 = __dp4a(ch.q[2], xa.z, s0);
            s0 = __dp4a(ch.q[3], xa.w, s0);
            int s1 = __dp4a(ch.q[4], xb.x, 0);
            s1 = __dp4a(ch.q[5], xb.y, s1);
            s1 = __dp4a(ch.q[6], xb.z, s1);
            s1 = __dp4a(ch.q[7], xb.w, s1);
            acc[t] += mt.x * (ch.d[0] * static_cast<float>(s0) + ch.d[1] * static_cast<float>(s1)) +
                      (ch.m[0] * mt.y + ch.m[1] * mt.z);
          }
        }
      }
    }
  }
  reduce_store<NT>(acc, n, y, ldy, row, w.n_rows, accumulate);
}

// Reduces acc[r][t] over the threads of one row group (blockDim.x threads, a multiple of 32) and
// stores (or, when accumulate, adds to) y[t * ldy + row0 + r] for t < n, row0 + r < n_rows. Every
// thread of the block must call it.
// (tx, ty, bdx): the thread's coordinates in its row group and the group width (threadIdx.x,
// threadIdx.y, blockDim.x in a plain launch; matvec_kquant_pair_kernel remaps a flat block).
template <int R, int NT>
__device__ __forceinline__ void reduce_store_rows(float (&acc)[R][NT], int n, float* y, int64_t ldy, int64_t row0,
                                                  int64_t n_rows, bool accumulate, int tx, int ty, int bdx) {
  static_assert(R * NT <= 32, "one lane per (row, token)");
  __shared__ float red[kThreads / 32][R * NT];
  const int lane = tx & 31;
  const int warp = (ty * bdx + tx) >> 5;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n) {
        float v = acc[r][t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red[warp][r * NT + t] = v;
      }
    }
  __syncthreads();
  const int warps_per_row = bdx >> 5;
  const int i = tx, r = i / NT, t = i % NT;
  if (i < R * NT && t < n && row0 + r < n_rows) {
    float s = 0.f;
    for (int w = 0; w < warps_per_row; ++w) s += red[ty * warps_per_row + w][i];
    float* out = y + t * ldy + row0 + r;
    *out = accumulate ? *out + s : s;
  }
}

// Q4_K / Q6_K W x int8 activations: R rows per row group, U pieces of each row in flight per
// thread. Thread mapping: block (tpr, 128 / tpr), tpr = 32, 64 or 128 threads per row group of R
// consecutive rows (threadIdx.y picks the group); thread i of a group always takes piece
// i % kPieces (quant_types.cuh: PieceQ4K, PieceQ6K) of blocks i / kPieces + k * tpr / kPieces, of
// all R rows, and issues the loads of U x R pieces (2 or 3 16-byte loads each, plus small
// header/scale loads) before decoding any. Lanes of one block read consecutive 16-byte pieces
// (coalesced, each weight byte loaded once); each activation load (16 int8 + the block's float4)
// serves R rows, which is what bounds these kernels on the H200: their L1 wavefronts (distinct
// 128-byte lines per warp load), not DRAM, once the activations cost as many as the weights.
// Each 16-weight group is one 4-dp4a chain per token, its scale and offset applied in float.
// xq [n][kq], xm [n][kq / 32] float4 from launch_quantize_act_q8; n <= NT <= 8; y float [n][ldy].
// Bound: memory at n = 1, goal >= 75% of HBM bandwidth on 7B-shaped matrices. Measured on the
// H200 (launcher defaults, before programmatic launch): Q4_K 23/49/46/81%, Q6_K 30/58/56/92% at
// 3584x3584 / 18944x3584 / 3584x18944 / 152064x3584. Since then (2026-11-30, session 11, graph
// replays of the quantizer and the product, matmul_test's MatmulBench): Q4_K's scales decoded by
// byte permutes (PieceQ4K) took 71 registers instead of 96 and 152064x3584 to 85% (74-77%), the
// register cap (cap_registers) 3584x18944 to 61%. The 152064-row shape shows the kernel can
// stream; the others lose a fixed 5-10 us per call (activation quantizer and launch, ramp-up,
// a partial last wave), not bandwidth. Q4_K's qs are repacked at upload (quant_types.cuh) so that
// the 8 lanes of a block read one 128-byte line of activations per group where the file layout
// made them read two lines half each: 18944 x 3584 61.0% (54.5% before, another H200), qwen2-7b
// Q4_K_M tg128 +2% (H200, 2026-12-01: 494.2 / 495.6 tok/s against 483.9 / 484.2, same run); laying
// the headers apart from qs (split layout) was slower; so was reading y's old value at each row
// group's start instead of after its reduction (what the streaming FP8 kernel gains from): tg128
// 464.2 / 464.6 tok/s against 482.1 / 481.1 (H200, perf.md session 36), ptxas allocating the
// instances' registers differently (e.g. 100 -> 126). Error: that of the int8 activations
// (matmul_test's bound); the rest is float rounding (Q6_K's stored offset, -32 d, is folded into
// m: exact).
// The body, over row-group blocks [block, n_blocks) of a grid, for thread (tx, ty) of a bdx x bdy
// block (matvec_kquant_kernel passes its own coordinates; the pair kernel below remaps).
template <DType T, int NT, int R, int U>
__device__ __forceinline__ void kquant_rows(const QView& w, const int8_t* __restrict__ xq,
                                            const float4* __restrict__ xm, int n, float* __restrict__ y, int64_t ldy,
                                            bool accumulate, int tx, int ty, int bdx, int bdy, int64_t block,
                                            int64_t n_blocks) {
  using P = typename quant::PieceOf<T>::type;
  constexpr int G = P::kGroups;
  const int nb = static_cast<int>(w.blocks_per_row);
  const int64_t kq = static_cast<int64_t>(nb) * 256;
  const int64_t nxb = static_cast<int64_t>(nb) * 8;  // activation blocks per token
  const int p = tx % P::kPieces;
  const int step = bdx / P::kPieces;  // blocks covered by one pass of the group
  const int half = P::x_half(p);
  const int64_t n_groups = (w.n_rows + R - 1) / R;
  bool waited = false;
  // Persistent over row groups: the launcher sizes the grid to what is resident at once, so every
  // SM gets an equal share (no partial last wave); the loop count is uniform within a block.
  for (int64_t base = block; base * bdy < n_groups; base += n_blocks) {
    const int64_t row0 = (base * bdy + ty) * R;
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
    if (row0 < w.n_rows) {
      int64_t rows[R];  // rows past the end repeat the last one (loaded, never stored)
#pragma unroll
      for (int r = 0; r < R; ++r) rows[r] = row0 + r < w.n_rows ? row0 + r : w.n_rows - 1;
      for (int b0 = tx / P::kPieces; b0 < nb; b0 += U * step) {
        P pc[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (b0 + u * step < nb)
#pragma unroll
            for (int r = 0; r < R; ++r) pc[u][r].load(w, rows[r], b0 + u * step, p);
        if (!waited) {  // activations are read only from here on
          pdl_wait();
          waited = true;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int b = b0 + u * step;
          if (b < nb) {
            uint32_t q[R][G][4];
            float d[R][G], m[R][G];
#pragma unroll
            for (int r = 0; r < R; ++r) pc[u][r].decode(p, q[r], d[r], m[r]);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
              if (t < n) {
#pragma unroll
                for (int g = 0; g < G; ++g) {
                  const int64_t e = static_cast<int64_t>(b) * 256 + P::x_offset(p, g);
                  const int4 xv = __ldg(reinterpret_cast<const int4*>(xq + t * kq + e));
                  const float4 mt = __ldg(xm + t * nxb + (e >> 5));
                  const float xs = half ? mt.z : mt.y;
#pragma unroll
                  for (int r = 0; r < R; ++r) {
                    int sd = __dp4a(static_cast<int>(q[r][g][0]), xv.x, 0);
                    sd = __dp4a(static_cast<int>(q[r][g][1]), xv.y, sd);
                    sd = __dp4a(static_cast<int>(q[r][g][2]), xv.z, sd);
                    sd = __dp4a(static_cast<int>(q[r][g][3]), xv.w, sd);
                    acc[r][t] = fmaf(d[r][g], mt.x * static_cast<float>(sd), fmaf(m[r][g], xs, acc[r][t]));
                  }
                }
              }
            }
          }
        }
      }
    }
    if (!waited) {  // y is written only after the producer of x is done
      pdl_wait();
      waited = true;
    }
    reduce_store_rows<R, NT>(acc, n, y, ldy, row0, w.n_rows, accumulate, tx, ty, bdx);
    __syncthreads();  // the next group reuses reduce_store_rows' shared array
  }
  if (!waited) pdl_wait();
}

template <DType T, int NT, int R, int U, int MinB = 0>
__global__ void __launch_bounds__(kThreads, MinB) matvec_kquant_kernel(QView w, const int8_t* __restrict__ xq,
                                                                 const float4* __restrict__ xm, int n,
                                                                 float* __restrict__ y, int64_t ldy, bool accumulate) {
  pdl_trigger();
  kquant_rows<T, NT, R, U>(w, xq, xm, n, y, ldy, accumulate, static_cast<int>(threadIdx.x),
                           static_cast<int>(threadIdx.y), static_cast<int>(blockDim.x),
                           static_cast<int>(blockDim.y), blockIdx.x, gridDim.x);
}

// Two K-quant products of the same int8 input in one launch (launch_matvec_q8_pair): blocks
// [0, blocks1) run W1 -> y1, the rest W2 -> y2, each with the thread mapping and variant (R 2,
// U 1 or, variant 4, U 4) of its own launch (tpr1 / tpr2 threads per row group in a flat block
// of kThreads), so each part computes exactly what its own launch would. The case it exists
// for: Q4_K_M's [wq; wk] (Q4_K) and its Q6_K wv, whose separate launches left the small wv
// product waiting for the first.
struct PairArgs {
  QView w1, w2;
  float* y1;
  float* y2;
  int64_t ldy;
  int tpr1, tpr2;
  int64_t blocks1, blocks2;
};
template <DType T1, int U1, DType T2, int U2, int NT>
__global__ void __launch_bounds__(kThreads) matvec_kquant_pair_kernel(PairArgs a, const int8_t* __restrict__ xq,
                                                                      const float4* __restrict__ xm, int n) {
  pdl_trigger();
  const int t = static_cast<int>(threadIdx.x);
  if (blockIdx.x < a.blocks1)
    kquant_rows<T1, NT, 2, U1>(a.w1, xq, xm, n, a.y1, a.ldy, false, t % a.tpr1, t / a.tpr1, a.tpr1, kThreads / a.tpr1,
                               blockIdx.x, a.blocks1);
  else
    kquant_rows<T2, NT, 2, U2>(a.w2, xq, xm, n, a.y2, a.ldy, false, t % a.tpr2, t / a.tpr2, a.tpr2, kThreads / a.tpr2,
                               blockIdx.x - a.blocks1, a.blocks2);
}

// 16 bytes of a float-type row -> kElems floats.
template <DType T>
struct FT;
template <>
struct FT<DType::kF32> {
  static constexpr int kElems = 4;
  __device__ static void convert(const uint4& r, float* v) {
    v[0] = __uint_as_float(r.x);
    v[1] = __uint_as_float(r.y);
    v[2] = __uint_as_float(r.z);
    v[3] = __uint_as_float(r.w);
  }
};
template <>
struct FT<DType::kF16> {
  static constexpr int kElems = 8;
  __device__ static void convert(const uint4& r, float* v) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
};
template <>
struct FT<DType::kBF16> {
  static constexpr int kElems = 8;
  __device__ static void convert(const uint4& r, float* v) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};
template <>
struct FT<DType::kF8_E4M3> {
  static constexpr int kElems = 16;
  __device__ static void convert(const uint4& r, float* v) {
    quant::fp8x4_to_float(r.x, v);
    quant::fp8x4_to_float(r.y, v + 4);
    quant::fp8x4_to_float(r.z, v + 8);
    quant::fp8x4_to_float(r.w, v + 12);
  }
};

// F32/F16/BF16/FP8 W x float activations. Thread mapping as matvec_q8_kernel, with 16-byte
// chunks (4, 8 or 16 weights). W: row_bytes % 16 == 0, zero padding; xs [n][kpad] float, zero
// padded; y float [n][ldy]. FP8: one scale per row or per 16-column chunk (block_cols % 16 == 0
// or >= n_cols, checked at upload), E4M3 decoded in software. Bound: memory at n = 1; measured on
// the H200: F16/BF16 70-104% of 4.3 TB/s on 7B-shaped matrices (goal 85%); FP8 28-42%, bounded
// by its activation loads (each lane's float4 loads span 16 lines), which is why FP8 moved to
// matvec_fp8_kernel (this one runs it under DUET_MATVEC_LEGACY=1). At n = 8 the float
// activation reads from L1 are the limit.
template <DType T, int NT>
__global__ void __launch_bounds__(kThreads) matvec_float_kernel(DeviceMatrix w, const float* __restrict__ xs,
                                                                int64_t kpad, int n, float* __restrict__ y,
                                                                int64_t ldy, bool accumulate) {
  pdl_trigger();
  pdl_wait();
  constexpr int E = FT<T>::kElems;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t nch = static_cast<int64_t>(w.row_bytes / 16);
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
  if (row < w.n_rows) {
    const uint8_t* wr = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
    const float* srow = nullptr;
    // FP8: one scale per row (per-tensor / per-channel: applied once at the end) or per 16-column
    // chunk (block scales; 32-bit division, columns < 2^31).
    bool chunk_scales = false;
    if constexpr (T == DType::kF8_E4M3) {
      srow = w.fp8_scales + (row / w.fp8_block_rows) * w.fp8_scale_cols;
      chunk_scales = w.fp8_block_cols < w.n_cols;
    }
    const uint32_t bc = static_cast<uint32_t>(w.fp8_block_cols);
#pragma unroll 2
    for (int64_t c = threadIdx.x; c < nch; c += blockDim.x) {
      const uint4 raw = quant::ld128(wr + c * 16);
      float v[E];
      FT<T>::convert(raw, v);
      float s = 1.f;
      if constexpr (T == DType::kF8_E4M3)
        if (chunk_scales) s = __ldg(srow + static_cast<uint32_t>(c * E) / bc);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < n) {
          const float4* xp = reinterpret_cast<const float4*>(xs + t * kpad + c * E);
          float p = 0.f;
#pragma unroll
          for (int j = 0; j < E / 4; ++j) {
            const float4 xv = __ldg(xp + j);
            p = fmaf(v[4 * j], xv.x, p);
            p = fmaf(v[4 * j + 1], xv.y, p);
            p = fmaf(v[4 * j + 2], xv.z, p);
            p = fmaf(v[4 * j + 3], xv.w, p);
          }
          acc[t] = fmaf(p, s, acc[t]);
        }
      }
    }
    if constexpr (T == DType::kF8_E4M3) {
      const float rs = (chunk_scales ? 1.f : __ldg(srow)) * quant::kFp8Unscale;
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[t] *= rs;
    }
  }
  reduce_store<NT>(acc, n, y, ldy, row, w.n_rows, accumulate);
}

// acc[r][t] += sc[r] * (v[r][0..3] . xv) for the R rows of one 4-weight word (FP8 kernels).
template <int R, int NT>
__device__ __forceinline__ void fma_word4(float (&acc)[R][NT], const float (&v)[R][4], const float (&sc)[R], int t,
                                          const float4& xv) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float pr = v[r][0] * xv.x;
    pr = fmaf(v[r][1], xv.y, pr);
    pr = fmaf(v[r][2], xv.z, pr);
    pr = fmaf(v[r][3], xv.w, pr);
    acc[r][t] = fmaf(pr, sc[r], acc[r][t]);
  }
}

// FP8 E4M3 W (weight-only) x float activations: R rows per row group, U 4-byte words of each row
// in flight per thread. Thread mapping: block (tpr, 128 / tpr), threadIdx.y picks the group of
// R consecutive rows, thread i of a group loads words i + k * tpr (4 weights each, coalesced:
// 128 bytes per row per warp load) of all R rows, U at a time, before converting any. Words,
// not 16-byte chunks: a thread's activations are then one float4 per word, consecutive across
// the warp (4 lines per warp load, shared by the R rows), where 16-byte chunks of FP8 made every
// float4 load touch 16 lines and bounded the kernel by L1 wavefronts at ~40% of HBM bandwidth.
// W: row_bytes % 16 == 0, zero padding; one scale per row or per column block (block_cols %
// 16 == 0 or >= n_cols, as matvec_float_kernel); xs [n][kpad] float (kpad % 4 == 0); y float
// [n][ldy]. E4M3 decoded by the bit arithmetic of quant::fp8x4_to_float on every card (on the
// H200 it beat the hardware cvt here: 3584x18944 47.2% of HBM bandwidth against 32.7%). Every
// weight is exact in F16 and the products and sums are float32, so the error is float
// accumulation only (the float types' 1e-5 bound). Bound: memory at n = 1. Measured on the H200
// (2026-11-30): 40/-/47/-% at 3584x3584 / 18944x3584 / 3584x18944 / 152064x3584 (the larger two
// take matvec_fp8_smem_kernel); the shorter matrices lose fixed per-call time.
template <int NT, int R, int U>
__global__ void __launch_bounds__(kThreads) matvec_fp8_kernel(DeviceMatrix w, const float* __restrict__ xs,
                                                              int64_t kpad, int n, float* __restrict__ y,
                                                              int64_t ldy, bool accumulate) {
  pdl_trigger();
  pdl_wait();
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y) * R;
  const int64_t nw = static_cast<int64_t>(w.row_bytes / 4);
  float acc[R][NT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
  if (row0 < w.n_rows) {
    const uint8_t* wr[R];
    const float* srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + r < w.n_rows ? row0 + r : w.n_rows - 1;  // past the end: never stored
      wr[r] = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
      srow[r] = w.fp8_scales + (row / w.fp8_block_rows) * w.fp8_scale_cols;
    }
    const bool chunk_scales = w.fp8_block_cols < w.n_cols;  // else one scale per row, applied at the end
    const uint32_t bc = static_cast<uint32_t>(w.fp8_block_cols);
    const int tpr = static_cast<int>(blockDim.x);
    for (int64_t c0 = threadIdx.x; c0 < nw; c0 += U * tpr) {
      uint32_t raw[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (c0 + u * tpr < nw)
#pragma unroll
          for (int r = 0; r < R; ++r) raw[u][r] = quant::ld32(wr[r] + (c0 + u * tpr) * 4);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + u * tpr;
        if (c < nw) {
          float v[R][4], sc[R];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            quant::fp8x4_to_float(raw[u][r], v[r]);
            sc[r] = 1.f;
          }
          if (chunk_scales) {  // 32-bit division: columns < 2^31
            const uint32_t blk = static_cast<uint32_t>(c * 4) / bc;
#pragma unroll
            for (int r = 0; r < R; ++r) sc[r] = __ldg(srow[r] + blk);
          }
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            if (t < n) {
              fma_word4<R, NT>(acc, v, sc, t, __ldg(reinterpret_cast<const float4*>(xs + t * kpad + c * 4)));
            }
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float rs = (chunk_scales ? 1.f : __ldg(srow[r])) * quant::kFp8Unscale;
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] *= rs;
    }
  }
  reduce_store_rows<R, NT>(acc, n, y, ldy, row0, w.n_rows, accumulate, static_cast<int>(threadIdx.x),
                             static_cast<int>(threadIdx.y), static_cast<int>(blockDim.x));
}

// FP8 E4M3 W (weight-only) x float activations staged in shared memory (launch_fp8_smem picks it
// when the n activation rows fit). Thread mapping: kSmemThreads threads, each warp owns R whole
// rows at a time (warp w of block b takes row groups b * warps + w + k * gridDim.x * warps), and
// lane l reads the 16-byte chunks c = l + 32 i of each row (16 weights; 512 contiguous bytes per
// warp load, R x U loads in flight per lane before any conversion). The block first copies x into
// shared memory permuted so that the q-th float4 of chunk c sits at float4 index
// (4 (c / 32) + q) * 32 + c % 32: each activation load of a warp is then 512 contiguous bytes of
// shared memory (4 wavefronts, no bank conflicts) shared by the R rows, where reading x from
// global memory spans 2 KB per warp load (16 L1 wavefronts). No cross-warp reduction: a warp's
// lanes sum by shuffles and lane 0 stores. Scales and conversion as matvec_fp8_kernel (exact
// weights, float32 products and sums: the float types' 1e-5 bound). Smem: n * nch16 * 64 bytes
// (nch16 = row chunks rounded up to 32). Bound: memory at n = 1; goal >= 80% of HBM bandwidth
// on 7B-shaped matrices on the H200.
constexpr int kSmemThreads = 256;
template <int NT, int R, int U, bool kHw>
__global__ void __launch_bounds__(kSmemThreads) matvec_fp8_smem_kernel(DeviceMatrix w, const float* __restrict__ x,
                                                                      int64_t ldx, int n, float* __restrict__ y,
                                                                      int64_t ldy, bool accumulate) {
  extern __shared__ float4 xs4[];
  pdl_trigger();
  const int64_t nch = static_cast<int64_t>(w.row_bytes / 16);  // 16-byte chunks per row
  const int64_t nch32 = (nch + 31) / 32 * 32;
  const int64_t k = w.n_cols;
  pdl_wait();
  // Stage: thread j writes permuted float4 slots j, j + blockDim, ... (consecutive: no conflicts).
  for (int64_t j = threadIdx.x; j < n * nch32 * 4; j += kSmemThreads) {
    const int64_t t = j / (nch32 * 4), jj = j - t * nch32 * 4;
    const int64_t l = jj % 32, q = (jj / 32) % 4, i = jj / 128;
    const int64_t col = (i * 32 + l) * 16 + q * 4;
    const float* src = x + t * ldx + col;
    float4 v;
    v.x = col < k ? src[0] : 0.f;
    v.y = col + 1 < k ? src[1] : 0.f;
    v.z = col + 2 < k ? src[2] : 0.f;
    v.w = col + 3 < k ? src[3] : 0.f;
    xs4[j] = v;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int warps = kSmemThreads / 32;
  const int64_t groups = (w.n_rows + R - 1) / R;
  const bool chunk_scales = w.fp8_block_cols < w.n_cols;  // else one scale per row, applied at the end
  const uint32_t bc = static_cast<uint32_t>(w.fp8_block_cols);
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5); g < groups;
       g += static_cast<int64_t>(gridDim.x) * warps) {
    const uint8_t* wr[R];
    const float* srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = g * R + r < w.n_rows ? g * R + r : w.n_rows - 1;  // past the end: never stored
      wr[r] = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
      srow[r] = w.fp8_scales + (row / w.fp8_block_rows) * w.fp8_scale_cols;
    }
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
    for (int64_t c0 = lane; c0 < nch; c0 += 32 * U) {
      uint4 raw[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (c0 + 32 * u < nch)
#pragma unroll
          for (int r = 0; r < R; ++r) raw[u][r] = quant::ld128(wr[r] + (c0 + 32 * u) * 16);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c < nch) {
          float sc[R];
#pragma unroll
          for (int r = 0; r < R; ++r) sc[r] = chunk_scales ? __ldg(srow[r] + static_cast<uint32_t>(c * 16) / bc) : 1.f;
          const int64_t base = (c / 32) * 128 + lane;  // float4 slot of quarter 0
#pragma unroll
          for (int qq = 0; qq < 4; ++qq) {
            float v[R][4];
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const uint32_t word = qq == 0 ? raw[u][r].x : qq == 1 ? raw[u][r].y : qq == 2 ? raw[u][r].z : raw[u][r].w;
              if constexpr (kHw) quant::fp8x4_to_float_hw(word, v[r]);
              else quant::fp8x4_to_float(word, v[r]);
            }
#pragma unroll
            for (int t = 0; t < NT; ++t) {
              if (t < n) {
                fma_word4<R, NT>(acc, v, sc, t, xs4[t * nch32 * 4 + base + qq * 32]);
              }
            }
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float rs = (chunk_scales ? 1.f : __ldg(srow[r])) * (kHw ? 1.f : quant::kFp8Unscale);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float v = acc[r][t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && t < n && g * R + r < w.n_rows) {
          float* out = y + t * ldy + g * R + r;
          *out = accumulate ? *out + v * rs : v * rs;
        }
      }
    }
  }
}

// Threads per row, from the H200 sweeps (2026-11-29, Qwen2-7B shapes, n = 1): block-quantized
// types on matvec_q8_kernel do best with a warp per row up to 48 chunks, two up to 160, four
// beyond (Q8_0 40-101% of 4.3 TB/s); F16/BF16 with two warps from 49 chunks (70-104%). Q4_K, Q6_K
// and FP8 have their own kernels and choices (kquant_choice, fp8_choice).
// DUET_MATVEC_THREADS_PER_ROW (32, 64 or 128) overrides every choice, for benchmarking.
int forced_threads_per_row() {
  const char* e = std::getenv("DUET_MATVEC_THREADS_PER_ROW");
  const int v = e ? std::atoi(e) : 0;
  return v == 32 || v == 64 || v == 128 ? v : 0;
}
int threads_per_row_quant(int64_t n_chunks) {
  if (const int f = forced_threads_per_row()) return f;
  return n_chunks <= 48 ? 32 : (n_chunks <= 160 ? 64 : 128);
}
int threads_per_row_float(DType t, int64_t n_chunks) {
  if (const int f = forced_threads_per_row()) return f;
  if (t == DType::kF8_E4M3) return 32;
  return n_chunks <= 48 ? 32 : 64;
}
// Benchmark knobs: DUET_MATVEC_VARIANT (0-4) picks the (rows per group, loads in flight) variant
// of the Q4_K/Q6_K/FP8 kernels from the tables below; DUET_MATVEC_LEGACY=1 runs the
// one-chunk-per-thread kernels (matvec_q8_kernel, matvec_float_kernel) for them instead.
int forced_variant() {
  const char* e = std::getenv("DUET_MATVEC_VARIANT");
  return e != nullptr && e[0] >= '0' && e[0] <= '4' && e[1] == 0 ? e[0] - '0' : -1;
}
bool legacy_kernels() {
  const char* e = std::getenv("DUET_MATVEC_LEGACY");
  return e != nullptr && e[0] == '1';
}
// Threads per row group: a warp where the groups alone give >= 1024 warps, else 128 threads
// (short-and-wide matrices), no more than the row has work for; matrices of fewer than 1024
// rows take 128 threads whenever the row has 48 items (one wave of short warps measured best
// there: 512 x 3584 at 6-9% of HBM bandwidth against 3-6% with a warp per row).
int threads_per_group(int64_t n_rows, int64_t n_groups, int64_t items_per_row) {
  if (const int f = forced_threads_per_row()) return f;
  if (n_rows < 1024 && items_per_row >= 48) return 128;
  int tpr = n_groups >= 1024 ? 32 : 128;
  while (tpr > 32 && items_per_row < 2 * tpr) tpr /= 2;
  return tpr;
}

// Blocks of `kernel` resident at once on the device (occupancy x SMs), at most `needed`: the
// grid of the persistent decode kernels. DUET_MATVEC_PERSISTENT=0 returns `needed` (one block per
// unit of work, the earlier launch shape; benchmark knob).
unsigned resident_grid(const void* kernel, int threads, size_t smem, int64_t needed) {
  const char* e = std::getenv("DUET_MATVEC_PERSISTENT");
  if (e != nullptr && e[0] == '0') return static_cast<unsigned>(needed);
  int per_sm = 0;
  DUET_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int64_t cap = int64_t{std::max(per_sm, 1)} * detail::current_sm_count();
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, cap)));
}

template <typename F>
void dispatch_nt(int n, F&& f) {
  if (n <= 1) f(std::integral_constant<int, 1>{});
  else if (n <= 2) f(std::integral_constant<int, 2>{});
  else if (n <= 4) f(std::integral_constant<int, 4>{});
  else f(std::integral_constant<int, 8>{});
}

template <DType T>
void matvec_q8_typed(const DeviceMatrix& w, const int8_t* xq, const float4* xm, int n, float* y, int64_t ldy,
                     bool accumulate, bool pdl, cudaStream_t s) {
  const QView v{static_cast<const uint8_t*>(w.data), w.n_rows, w.n_cols / QT<T>::kBlock, w.row_bytes};
  const int tpr = threads_per_row_quant(w.n_cols / 32 / quant::kWideChunks<T>);
  const dim3 block(tpr, kThreads / tpr);
  const dim3 grid(static_cast<unsigned>((w.n_rows + block.y - 1) / block.y));
  dispatch_nt(n, [&](auto nt) {
    detail::launch_maybe_pdl(matvec_q8_kernel<T, decltype(nt)::value>, grid, block, 0, s, pdl, v, xq, xm, n, y, ldy,
                             accumulate);
  });
  DUET_CUDA_CHECK_LAUNCH();
}

// Programmatic dependent launch of the K-quant kernel after the activation quantizer, where the
// device and path allow it (sm_90, native): measured on the H200 at +1-4 points of HBM bandwidth
// (Q4_K 49.4 -> 53.2%, Q6_K 57.8 -> 61.4% at 18944 x 3584; 3584 x 3584: 24.4 -> 25.8%, 29.8 ->
// 34.1%). DUET_MATVEC_PDL=0 turns it off (benchmark knob).
bool use_pdl(bool allowed) {
  if (!allowed) return false;
  return env_flag("DUET_MATVEC_PDL", true);
}

// (R rows per group, U loads in flight) of the K-quant kernel, by DUET_MATVEC_VARIANT:
// 0: (1, 2), 1: (2, 1), 2: (2, 2), 3: (4, 1). Chosen from the H200 sweep (2026-11-29, % of
// 4.3 TB/s, without programmatic launch; variants 0 / 1 / 2 / 3):
//   Q4_K n=1: 3584x3584 22.0/23.2/22.3/21.4, 18944x3584 45.2/49.6/49.6/48.9, 3584x18944
//             41.8/43.2/42.3/45.8, 152064x3584 61.2/73.3/73.0/80.6; n=2 (18944 rows)
//             32.6/37.9/37.2/34.6; n=8 12.4/17.9/16.8/14.6.
//   Q6_K n=1: 3584x3584 28.1/29.8/29.6/29.7, 18944x3584 47.5/57.5/56.4/57.9, 3584x18944
//             48.5/50.9/57.5/56.4, 152064x3584 67.1/92.4/79.2/91.9; n=2 27.9/42.9/38.9/48.1;
//             n=8 10.6/16.5/16.4/20.6.
// Fewer than 1024 rows (512 x 3584): Q4_K variant 2, Q6_K variant 1, 128 threads (6.2%, 7.3%).
// Variant 4, (2, 4), Q4_K only: one sequence, 2048-8191 rows of at most 16 blocks (the q/k/v and
// o products of 7B-class models, latency-bound at ~21% of HBM bandwidth): a warp per row group
// then takes every piece of its rows in one pass, so all of the matrix is loaded before the
// programmatic-launch wait, while the kernels before it (attention, the norm) leave HBM idle.
// qwen2-7b Q4_K_M tg128 455.8 / 455.3 tok/s against 453.5 / 452.2 with DUET_MATVEC_PRELOAD=0,
// which keeps variant 1 there (A/B knob; H200, 2026-11-30, interleaved in one run).
bool preload_enabled() {
  static const bool on = env_flag("DUET_MATVEC_PRELOAD", true);
  return on;
}
bool cap_registers();

// Variant 5 (under DUET_MATVEC_MINB=1 only, see cap_registers): variant 3 with 3-row groups
// (Q4_K, one token, the register-capped instance), for
// tall matrices (>= 8192 rows, a warp per group, 4 groups a block) whose blocks fill the last wave
// of 8 resident blocks an SM better with 3 rows than with 4: blocks(R) = ceil(rows / R / 4),
// waves = blocks / (8 x SMs), filled = waves / ceil(waves). qwen2-7b's fused gate/up (37888 rows,
// 132 SMs): 2.24 waves of 4-row groups (the last a quarter full) against 2.99 of 3-row groups.
// The rows' sums do not depend on R (each row is reduced alike), so results are the same.
// DUET_MATVEC_R3=0 keeps variant 3 (A/B knob, read once).
bool r3_enabled() {
  static const bool on = env_flag("DUET_MATVEC_R3", true);
  return on;
}
double wave_fill(int64_t n_rows, int R, int64_t slots) {
  constexpr int kGroupsPerBlock = kThreads / 32;  // a warp per group (threads_per_group at >= 1024 groups)
  const int64_t blocks = ((n_rows + R - 1) / R + kGroupsPerBlock - 1) / kGroupsPerBlock;
  const double waves = static_cast<double>(blocks) / static_cast<double>(slots);
  return waves / std::ceil(waves);
}
bool prefer_r3(int64_t n_rows) {
  if (n_rows < 8192 || !r3_enabled() || !cap_registers()) return false;
  const int64_t slots = int64_t{8} * detail::current_sm_count();
  return wave_fill(n_rows, 3, slots) > wave_fill(n_rows, 4, slots) + 0.05;
}

int kquant_variant(DType t, int64_t n_rows, int64_t n_cols, int n) {
  if (const int f = forced_variant(); f >= 0) return f;
  if (t == DType::kQ6_K) return n_rows < 1024 ? 1 : 3;
  if (n_rows < 1024) return 2;
  if (n > 1) return 1;
  if (n_rows >= 2048 && n_rows < 8192 && n_cols <= 16 * 256 && preload_enabled()) return 4;
  if (n_rows >= 8192 || n_cols >= 8192) return prefer_r3(n_rows) ? 5 : 3;
  return 1;
}

// Q4_K's variant 3 at one token is compiled twice: registers capped at 64 (8 blocks of 128
// threads an SM; no spills) and uncapped (71 registers, 7 blocks). With the file's qs order the
// cap measured faster on the H200 (2026-11-30, qwen2-7b Q4_K_M tg128 469.5-470.0 tok/s against
// 462.9-463.6; 3584 x 18944 61.3% of HBM bandwidth against 59.7%). With the repacked qs
// (quant_types.cuh) the uncapped instance is faster (2026-12-01, one H200, two interleaved
// rounds: tg128 491.0 / 493.1 against 487.0 / 487.1 capped with variant 5), so it is the
// default; DUET_MATVEC_MINB=1 takes the capped instance (and with it variant 5; A/B knob, read
// at each launch). Q6_K spills heavily under any cap (80 registers: 176 bytes; 3584 x 18944
// 38.9% against 54.2%) and keeps its 128.
bool cap_registers() { return env_flag("DUET_MATVEC_MINB", false); }

// A K-quant matrix as the decode kernels read it (256 columns a block).
QView kquant_view(const DeviceMatrix& w) {
  return QView{static_cast<const uint8_t*>(w.data), w.n_rows, w.n_cols / 256, w.row_bytes};
}

// The thread mapping of R-row groups: tpr threads per group, kThreads / tpr groups per block, and
// the blocks that take every group once (launch_kquant's grid; the pair launch gives each part
// the same).
struct KquantGrid {
  int tpr;
  int64_t blocks;
};
template <DType T>
KquantGrid kquant_grid(const QView& v, int R) {
  using P = typename quant::PieceOf<T>::type;
  const int64_t groups = (v.n_rows + R - 1) / R;
  const int tpr = threads_per_group(v.n_rows, groups, v.blocks_per_row * P::kPieces);
  const int64_t per_block = kThreads / tpr;
  return {tpr, (groups + per_block - 1) / per_block};
}

template <DType T, int NT, int R, int U, int MinB = 0>
void launch_kquant(const QView& v, const int8_t* xq, const float4* xm, int n, float* y, int64_t ldy, bool accumulate,
                   bool pdl, cudaStream_t s) {
  const KquantGrid g = kquant_grid<T>(v, R);
  const dim3 block(g.tpr, kThreads / g.tpr);
  auto kernel = matvec_kquant_kernel<T, NT, R, U, MinB>;
  // One block per unit of work: capping the grid at the resident blocks (the loop in the kernel
  // supports it, DUET_MATVEC_PERSISTENT=1) measured slower on the H200 (Q4_K 3584 x 18944 48.0%
  // against 51.8% of HBM bandwidth, 152064 x 3584 70.2% against 77.2%).
  const int64_t needed = g.blocks;
  const char* pe = std::getenv("DUET_MATVEC_PERSISTENT");
  const unsigned grid = pe != nullptr && pe[0] == '1' ? resident_grid(reinterpret_cast<const void*>(kernel), kThreads, 0, needed)
                                                      : static_cast<unsigned>(needed);
  detail::launch_maybe_pdl(kernel, dim3(grid), block, 0, s, pdl, v, xq, xm, n, y, ldy, accumulate);
}

template <DType T>
void matvec_kquant_typed(const DeviceMatrix& w, const int8_t* xq, const float4* xm, int n, float* y, int64_t ldy,
                         bool accumulate, bool pdl, cudaStream_t s) {
  const QView v = kquant_view(w);
  const int var = kquant_variant(T, w.n_rows, w.n_cols, n);
  dispatch_nt(n, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    switch (var) {
      case 0: return launch_kquant<T, NT, 1, 2>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
      case 1: return launch_kquant<T, NT, 2, 1>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
      case 2: return launch_kquant<T, NT, 2, 2>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
      case 3:
        if constexpr (NT == 1 && T == DType::kQ4_K) {  // registers capped for 8 blocks an SM (cap_registers)
          if (cap_registers()) return launch_kquant<T, NT, 4, 1, 8>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
        }
        return launch_kquant<T, NT, 4, 1>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
      case 5:  // Q4_K, one sequence, tall (prefer_r3); other instances fall back to variant 3
        if constexpr (NT == 1 && T == DType::kQ4_K) {
          if (cap_registers()) return launch_kquant<T, NT, 3, 1, 8>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
        }
        return launch_kquant<T, NT, 4, 1>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
      default:  // 4: Q4_K, one sequence (kquant_variant); other instances fall back to variant 2
        if constexpr (T == DType::kQ4_K && NT == 1)
          return launch_kquant<T, NT, 2, 4>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
        else
          return launch_kquant<T, NT, 2, 2>(v, xq, xm, n, y, ldy, accumulate, pdl, s);
    }
  });
  DUET_CUDA_CHECK_LAUNCH();
}

// (R rows per group, U words in flight) of the FP8 kernel, by DUET_MATVEC_VARIANT:
// 0: (1, 8), 1: (2, 4), 2: (2, 8), 3: (4, 4). Chosen from the H200 sweep (2026-11-29, hardware
// conversion, % of 4.3 TB/s; variants 0 / 1 / 2 / 3; threads per group by threads_per_group,
// which gives 128 to the 3584-row shapes under variant 3 only):
//   n=1: 512x3584 9.2/8.6/9.3/7.9, 3584x3584 23.4/22.5/23.4/39.1, 18944x3584 31.5/43.3/41.2/40.1,
//        3584x18944 18.9/18.9/19.3/47.3, 152064x3584 35.7/66.0/60.2/73.7;
//   18944x3584 n=2: 24.4/39.5/33.4/28.4; n=8: 10.2/12.0/11.6/9.8.
// The generic (software E4M3) path measured within 1-5 points of these.
int fp8_variant(int64_t n_rows, int n) {
  if (const int f = forced_variant(); f >= 0) return f;
  if (n_rows < 1024) return 2;
  if (n_rows < 8192) return 3;  // 128 threads per group (above); n > 1 not measured there
  return n > 1 || n_rows < 65536 ? 1 : 3;
}

template <int NT, int R, int U>
void launch_fp8(const DeviceMatrix& w, const float* xs, int64_t kpad, int n, float* y, int64_t ldy, bool accumulate,
                bool pdl, cudaStream_t s) {
  const int64_t groups = (w.n_rows + R - 1) / R;
  const int tpr = threads_per_group(w.n_rows, groups, static_cast<int64_t>(w.row_bytes / 4));
  const dim3 block(tpr, kThreads / tpr);
  const dim3 grid(static_cast<unsigned>((groups + block.y - 1) / block.y));
  detail::launch_maybe_pdl(matvec_fp8_kernel<NT, R, U>, grid, block, 0, s, pdl, w, xs, kpad, n, y, ldy, accumulate);
}

void matvec_fp8(const DeviceMatrix& w, const float* xs, int64_t kpad, int n, float* y, int64_t ldy, bool accumulate,
                bool pdl, cudaStream_t s) {
  const int var = fp8_variant(w.n_rows, n);
  dispatch_nt(n, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    switch (var) {
      case 0: return launch_fp8<NT, 1, 8>(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
      case 1: return launch_fp8<NT, 2, 4>(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
      case 2: return launch_fp8<NT, 2, 8>(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
      default: return launch_fp8<NT, 4, 4>(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
    }
  });
  DUET_CUDA_CHECK_LAUNCH();
}

// Shared-memory bytes of matvec_fp8_smem_kernel for n activation rows of a matrix; 0 when they
// exceed kFp8SmemMax (the launcher then takes matvec_fp8_kernel).
constexpr size_t kFp8SmemMax = 96 * 1024;  // V100's opt-in maximum; the H200 allows 227 KB
size_t fp8_smem_bytes(const DeviceMatrix& w, int n) {
  // Fewer rows: each block's staging is shared by too few rows (3584 x 18944 measured 26.8% of
  // HBM bandwidth against 32.3% without staging; 18944 x 3584 54.1% against 51.3%, 152064 x 3584
  // 95.1% against 72.1%; H200, n = 1).
  if (w.n_rows < 8192) return 0;
  const size_t nch32 = (w.row_bytes / 16 + 31) / 32 * 32;
  const size_t bytes = static_cast<size_t>(n) * nch32 * 64;
  return bytes <= kFp8SmemMax ? bytes : 0;
}

bool fp8_smem_disabled() {  // DUET_MATVEC_FP8_SMEM=0: the global-memory kernel (benchmark knob)
  return !env_flag("DUET_MATVEC_FP8_SMEM", true);
}

// (R rows per warp, U chunks in flight): R = 4 where that still gives every SM two blocks of
// warps, else 2, else 1 (3584-row matrices); grid: enough blocks for every row group, capped at
// what is resident at once (each block stages x once for all its row groups).
template <int NT, int R, bool kHw>
void launch_fp8_smem_r(const DeviceMatrix& w, const float* x, int64_t ldx, int n, float* y, int64_t ldy, bool accumulate,
                       bool pdl, size_t smem, cudaStream_t s) {
  constexpr int U = R >= 4 ? 1 : 2;
  auto kernel = matvec_fp8_smem_kernel<NT, R, U, kHw>;
  detail::opt_in_ctas_per_sm(reinterpret_cast<const void*>(kernel), kSmemThreads, kFp8SmemMax);  // once per device
  const int64_t groups = (w.n_rows + R - 1) / R;
  const unsigned blocks = resident_grid(reinterpret_cast<const void*>(kernel), kSmemThreads, smem,
                                        (groups + kSmemThreads / 32 - 1) / (kSmemThreads / 32));
  detail::launch_maybe_pdl(kernel, dim3(blocks), dim3(kSmemThreads), smem, s, pdl, w, x, ldx, n, y, ldy, accumulate);
}

template <int NT, bool kHw>
void launch_fp8_smem(const DeviceMatrix& w, const float* x, int64_t ldx, int n, float* y, int64_t ldy, bool accumulate,
                     bool pdl, size_t smem, cudaStream_t s) {
  const int64_t warps_wanted = int64_t{2} * (kSmemThreads / 32) * detail::current_sm_count();
  const int var = forced_variant();
  const int r = var == 0 ? 1 : var == 1 ? 2 : var == 2 ? 4 : (w.n_rows / 4 >= warps_wanted ? 4 : w.n_rows / 2 >= warps_wanted ? 2 : 1);
  if (r == 4) launch_fp8_smem_r<NT, 4, kHw>(w, x, ldx, n, y, ldy, accumulate, pdl, smem, s);
  else if (r == 2) launch_fp8_smem_r<NT, 2, kHw>(w, x, ldx, n, y, ldy, accumulate, pdl, smem, s);
  else launch_fp8_smem_r<NT, 1, kHw>(w, x, ldx, n, y, ldy, accumulate, pdl, smem, s);
}

template <DType T>
void matvec_float_typed(const DeviceMatrix& w, const float* xs, int64_t kpad, int n, float* y, int64_t ldy,
                        bool accumulate, bool pdl, cudaStream_t s) {
  const int tpr = threads_per_row_float(T, static_cast<int64_t>(w.row_bytes / 16));
  const dim3 block(tpr, kThreads / tpr);
  const dim3 grid(static_cast<unsigned>((w.n_rows + block.y - 1) / block.y));
  dispatch_nt(n, [&](auto nt) {
    detail::launch_maybe_pdl(matvec_float_kernel<T, decltype(nt)::value>, grid, block, 0, s, pdl, w, xs, kpad, n, y,
                             ldy, accumulate);
  });
  DUET_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool is_block_quant(DType t) {
  switch (t) {
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ8_0:
    case DType::kQ2_K: case DType::kQ3_K: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void launch_quantize_act_q8(const float* x, int64_t ldx, int n, int64_t k, int8_t* xq, float4* xm, bool pdl_ok,
                            cudaStream_t s) {
  DUET_CHECK(k % 32 == 0 && n >= 1 && n <= kDecodeMaxTokens);
  const int64_t threads = n * k;  // one per value
  const unsigned grid = static_cast<unsigned>((threads + 255) / 256);
  if (use_pdl(pdl_ok)) detail::launch_maybe_pdl(quantize_act_q8_kernel<true>, grid, 256, 0, s, true, x, ldx, n, k, xq, xm);
  else quantize_act_q8_kernel<false><<<grid, 256, 0, s>>>(x, ldx, n, k, xq, xm);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_stage_act_f32(const float* x, int64_t ldx, int n, int64_t k, float* xs, int64_t kpad, cudaStream_t s) {
  const int64_t total = n * kpad;
  stage_act_f32_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, s>>>(x, ldx, n, k, xs, kpad);
  DUET_CUDA_CHECK_LAUNCH();
}

namespace {
// The pair launch: both matrices Q4_K or Q6_K with the same columns, each taking kquant variant 1
// (R = 2, U = 1) at n tokens, or variant 4 (a one-token Q4_K part); DUET_MATVEC_PAIR not "0"
// (A/B knob). A Q4_K part under 1024 rows (variant 2: Q4_K_M's Q4_K wv layers) is declined.
// qwen2-7b Q4_K_M tg128 455.8 / 455.3 tok/s against 453.3 / 454.7 with DUET_MATVEC_PAIR=0 (H200,
// 2026-11-30, interleaved in one run): 14 of 28 layers lose a launch.
bool matvec_q8_pairs(const DeviceMatrix& w1, const DeviceMatrix& w2, int n) {
  const auto kq = [](DType t) { return t == DType::kQ4_K || t == DType::kQ6_K; };
  const auto v_ok = [n](const DeviceMatrix& w) {  // variant 1, or 4 (Q4_K, one token: kquant_variant)
    const int v = kquant_variant(w.dtype, w.n_rows, w.n_cols, n);
    return v == 1 || (v == 4 && w.dtype == DType::kQ4_K && n == 1);
  };
  static const bool off = !env_flag("DUET_MATVEC_PAIR", true);
  if (off || legacy_kernels() || forced_variant() >= 0) return false;
  return kq(w1.dtype) && kq(w2.dtype) && w1.n_cols == w2.n_cols && n >= 1 && n <= kDecodeMaxTokens && v_ok(w1) &&
         v_ok(w2);
}

// u1, u2: each part's loads in flight, 1 or 4 (variant 4: Q4_K, one token only). Each part gets
// the threads per group and blocks of its own launch_kquant<T, NT, 2, U>.
template <DType T1, DType T2>
void launch_pair_typed(const DeviceMatrix& w1, float* y1, const DeviceMatrix& w2, float* y2, int64_t ldy, int u1,
                       int u2, const int8_t* xq, const float4* xm, int n, bool pdl, cudaStream_t s) {
  PairArgs a;
  a.w1 = kquant_view(w1);
  a.w2 = kquant_view(w2);
  a.y1 = y1;
  a.y2 = y2;
  a.ldy = ldy;
  const KquantGrid g1 = kquant_grid<T1>(a.w1, 2), g2 = kquant_grid<T2>(a.w2, 2);
  a.tpr1 = g1.tpr, a.blocks1 = g1.blocks;
  a.tpr2 = g2.tpr, a.blocks2 = g2.blocks;
  const dim3 grid(static_cast<unsigned>(a.blocks1 + a.blocks2));
  auto go = [&](auto kernel) { detail::launch_maybe_pdl(kernel, grid, dim3(kThreads), 0, s, pdl, a, xq, xm, n); };
  dispatch_nt(n, [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    // The U = 4 instances exist only where a part can take variant 4 (a one-token Q4_K part).
    if constexpr (NT == 1 && T1 == DType::kQ4_K && T2 == DType::kQ4_K) {
      if (u1 == 4 && u2 == 4) return go(matvec_kquant_pair_kernel<T1, 4, T2, 4, NT>);
      if (u1 == 4) return go(matvec_kquant_pair_kernel<T1, 4, T2, 1, NT>);
      if (u2 == 4) return go(matvec_kquant_pair_kernel<T1, 1, T2, 4, NT>);
    } else if constexpr (NT == 1 && T1 == DType::kQ4_K) {
      if (u1 == 4) return go(matvec_kquant_pair_kernel<T1, 4, T2, 1, NT>);
    } else if constexpr (NT == 1 && T2 == DType::kQ4_K) {
      if (u2 == 4) return go(matvec_kquant_pair_kernel<T1, 1, T2, 4, NT>);
    }
    go(matvec_kquant_pair_kernel<T1, 1, T2, 1, NT>);
  });
}
}  // namespace

bool launch_matvec_q8_pair(const DeviceMatrix& w1, float* y1, const DeviceMatrix& w2, float* y2, int64_t ldy,
                           const int8_t* xq, const float4* xm, int n, bool pdl_ok, cudaStream_t s) {
  if (!matvec_q8_pairs(w1, w2, n)) return false;
  const bool pdl = use_pdl(pdl_ok);
  const bool q4_1 = w1.dtype == DType::kQ4_K, q4_2 = w2.dtype == DType::kQ4_K;
  const int u1 = kquant_variant(w1.dtype, w1.n_rows, w1.n_cols, n) == 4 ? 4 : 1;
  const int u2 = kquant_variant(w2.dtype, w2.n_rows, w2.n_cols, n) == 4 ? 4 : 1;
  if (q4_1 && !q4_2) launch_pair_typed<DType::kQ4_K, DType::kQ6_K>(w1, y1, w2, y2, ldy, u1, u2, xq, xm, n, pdl, s);
  else if (q4_1) launch_pair_typed<DType::kQ4_K, DType::kQ4_K>(w1, y1, w2, y2, ldy, u1, u2, xq, xm, n, pdl, s);
  else if (!q4_2) launch_pair_typed<DType::kQ6_K, DType::kQ6_K>(w1, y1, w2, y2, ldy, u1, u2, xq, xm, n, pdl, s);
  else launch_pair_typed<DType::kQ6_K, DType::kQ4_K>(w1, y1, w2, y2, ldy, u1, u2, xq, xm, n, pdl, s);
  DUET_CUDA_CHECK_LAUNCH();
  return true;
}

void launch_matvec_q8(const DeviceMatrix& w, const int8_t* xq, const float4* xm, int n, float* y, int64_t ldy,
                      bool accumulate, bool pdl_ok, cudaStream_t s) {
  DUET_CHECK(n >= 1 && n <= kDecodeMaxTokens);
  const bool pdl = use_pdl(pdl_ok);
  switch (w.dtype) {
    case DType::kQ4_0: return matvec_q8_typed<DType::kQ4_0>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ4_1: return matvec_q8_typed<DType::kQ4_1>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ5_0: return matvec_q8_typed<DType::kQ5_0>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ5_1: return matvec_q8_typed<DType::kQ5_1>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ8_0: return matvec_q8_typed<DType::kQ8_0>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ2_K: return matvec_q8_typed<DType::kQ2_K>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ3_K: return matvec_q8_typed<DType::kQ3_K>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ4_K:
      if (legacy_kernels()) return matvec_q8_typed<DType::kQ4_K>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
      return matvec_kquant_typed<DType::kQ4_K>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ5_K: return matvec_q8_typed<DType::kQ5_K>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    case DType::kQ6_K:
      if (legacy_kernels()) return matvec_q8_typed<DType::kQ6_K>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
      return matvec_kquant_typed<DType::kQ6_K>(w, xq, xm, n, y, ldy, accumulate, pdl, s);
    default: DUET_CHECK_MSG(false, "matvec_q8: %s is not block-quantized", dtype_name(w.dtype).data());
  }
}

void launch_matvec_float(const DeviceMatrix& w, const float* xs, int64_t kpad, int n, float* y, int64_t ldy,
                         bool fp8_hw, bool accumulate, bool pdl_ok, cudaStream_t s) {
  DUET_CHECK(n >= 1 && n <= kDecodeMaxTokens && w.row_bytes % 16 == 0);
  const bool pdl = use_pdl(pdl_ok);
  switch (w.dtype) {
    case DType::kF32: return matvec_float_typed<DType::kF32>(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
    case DType::kF16: return matvec_float_typed<DType::kF16>(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
    case DType::kBF16: return matvec_float_typed<DType::kBF16>(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
    case DType::kF8_E4M3: {
      if (legacy_kernels()) return matvec_float_typed<DType::kF8_E4M3>(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
      const size_t smem = fp8_smem_disabled() ? 0 : fp8_smem_bytes(w, n);
      // The global-memory kernel converts E4M3 in software even where the hardware could: on
      // the H200 the cvt.rn.f16x2.e4m3x2 form measured slower there (3584 x 18944: 32.7% of HBM
      // bandwidth against 47.2%; 3584 x 3584: 28.4% against 39.6%), the staged kernel faster
      // with it (152064 x 3584: 93.8% against 86.0%).
      if (smem == 0) return matvec_fp8(w, xs, kpad, n, y, ldy, accumulate, pdl, s);
      dispatch_nt(n, [&](auto nt) {
        constexpr int NT = decltype(nt)::value;
        if (fp8_hw) launch_fp8_smem<NT, true>(w, xs, kpad, n, y, ldy, accumulate, pdl, smem, s);
        else launch_fp8_smem<NT, false>(w, xs, kpad, n, y, ldy, accumulate, pdl, smem, s);
      });
      DUET_CUDA_CHECK_LAUNCH();
      return;
    }
    default: DUET_CHECK_MSG(false, "matvec_float: unsupported %s", dtype_name(w.dtype).data());
  }
}

}  // namespace duet::cuda::kernels
