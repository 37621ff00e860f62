// Decode matrix-vector products (n_tokens <= 8) for every weight type, reading the weights in
// their device layout (quant_types.cuh) once per call. Block-quantized weights: activations are
// first quantized to int8 per 32 values (a q8_1-like format: one float scale and the two half-block
// sums), and each 32-weight chunk is one pair of 4-dp4a chains per token, the weight's scale and
// offset applied per half chunk in float. F32/F16/BF16/FP8 weights: converted to float in
// registers, activations read as float. Runs on the caller's stream; no allocation, no sync.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdlib>
#include <type_traits>

#include "base/check.h"
#include "kernels/cuda/quant_kernels.cuh"
#include "kernels/cuda/quant_types.cuh"
#include "runtime/cuda_check.h"

namespace duet::cuda::kernels {
namespace {

using quant::Chunk;
using quant::QT;
using quant::QView;

constexpr int kThreads = 128;  // per block of every decode kernel

// Reduces acc[t] over the threads of one row (blockDim.x threads, a multiple of 32) and stores
// y[t * ldy + row] for t < n. Every thread of the block must call it.
template <int NT>
__device__ __forceinline__ void reduce_store(float (&acc)[NT], int n, float* y, int64_t ldy, int64_t row,
                                             int64_t n_rows) {
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
    y[threadIdx.x * ldy + row] = s;
  }
}

// One warp per 32 activations of one token: x [n][ldx] float -> xq [n][k] int8 (round to
// nearest, scale amax / 127) and xm [n][k / 32] float4. Grid covers n * k / 32 warps.
// Memory-bound and tiny (n <= 8 rows).
__global__ void quantize_act_q8_kernel(const float* __restrict__ x, int64_t ldx, int n, int64_t k,
                                       int8_t* __restrict__ xq, float4* __restrict__ xm) {
  const int64_t nblk = k / 32;
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (gw >= n * nblk) return;  // uniform per warp
  const int64_t t = gw / nblk, b = gw % nblk;
  const float v = x[t * ldx + b * 32 + lane];
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.f;
  const float id = amax > 0.f ? 127.f / amax : 0.f;
  const int q = __float2int_rn(v * id);
  xq[t * k + b * 32 + lane] = static_cast<int8_t>(q);
  int s = q;  // sums over lanes 0..15 and 16..31 (xor offsets < 16 stay inside a half)
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const int s_hi = __shfl_sync(0xffffffffu, s, 16);
  if (lane == 0) xm[t * nblk + b] = make_float4(d, d * static_cast<float>(s), d * static_cast<float>(s_hi), 0.f);
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
// the H200: Q8_0 70-100%, Q6_K 48-66%, Q4_K 40-58% (the K-quants are short of it: latency and
// issue, not bytes). At n = 8 the int8 activation reads from L1 dominate (9-25%).
template <DType T, int NT>
__global__ void __launch_bounds__(kThreads) matvec_q8_kernel(QView w, const int8_t* __restrict__ xq,
                                                             const float4* __restrict__ xm, int n,
                                                             float* __restrict__ y, int64_t ldy) {
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
  reduce_store<NT>(acc, n, y, ldy, row, w.n_rows);
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
// the H200: F16/BF16 84-103% of 4.3 TB/s on 7B-shaped matrices (goal 85%); FP8 36-41% (goal 80%:
// the software decode makes it issue-bound). At n = 8 the float activation reads from L1 become
// the limit (16 bytes of x per weight byte for FP8).
template <DType T, int NT>
__global__ void __launch_bounds__(kThreads) matvec_float_kernel(DeviceMatrix w, const float* __restrict__ xs,
                                                                int64_t kpad, int n, float* __restrict__ y,
                                                                int64_t ldy) {
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
  reduce_store<NT>(acc, n, y, ldy, row, w.n_rows);
}

// Threads per row, from the H200 sweeps (2026-11-29, Qwen2-7B shapes, n = 1): block-quantized
// types do best with a warp per row up to 48 chunks, two up to 160, four beyond (Q4_K 40-58%, Q6_K
// 48-66%, Q8_0 70-100% of 4.3 TB/s); F16/BF16 with two warps from 49 chunks (84-103%); FP8, whose
// software E4M3 decode makes it issue-bound, with one warp (36-41%). DUET_MATVEC_THREADS_PER_ROW
// (32, 64 or 128) overrides the choice, for benchmarking.
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

template <typename F>
void dispatch_nt(int n, F&& f) {
  if (n <= 1) f(std::integral_constant<int, 1>{});
  else if (n <= 2) f(std::integral_constant<int, 2>{});
  else if (n <= 4) f(std::integral_constant<int, 4>{});
  else f(std::integral_constant<int, 8>{});
}

template <DType T>
void matvec_q8_typed(const DeviceMatrix& w, const int8_t* xq, const float4* xm, int n, float* y, int64_t ldy,
                     cudaStream_t s) {
  const QView v{static_cast<const uint8_t*>(w.data), w.n_rows, w.n_cols / QT<T>::kBlock, w.row_bytes};
  const int tpr = threads_per_row_quant(w.n_cols / 32 / quant::kWideChunks<T>);
  const dim3 block(tpr, kThreads / tpr);
  const dim3 grid(static_cast<unsigned>((w.n_rows + block.y - 1) / block.y));
  dispatch_nt(n, [&](auto nt) {
    matvec_q8_kernel<T, decltype(nt)::value><<<grid, block, 0, s>>>(v, xq, xm, n, y, ldy);
  });
  DUET_CUDA_CHECK_LAUNCH();
}

template <DType T>
void matvec_float_typed(const DeviceMatrix& w, const float* xs, int64_t kpad, int n, float* y, int64_t ldy,
                        cudaStream_t s) {
  const int tpr = threads_per_row_float(T, static_cast<int64_t>(w.row_bytes / 16));
  const dim3 block(tpr, kThreads / tpr);
  const dim3 grid(static_cast<unsigned>((w.n_rows + block.y - 1) / block.y));
  dispatch_nt(n, [&](auto nt) {
    matvec_float_kernel<T, decltype(nt)::value><<<grid, block, 0, s>>>(w, xs, kpad, n, y, ldy);
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

void launch_quantize_act_q8(const float* x, int64_t ldx, int n, int64_t k, int8_t* xq, float4* xm, cudaStream_t s) {
  DUET_CHECK(k % 32 == 0 && n >= 1 && n <= kDecodeMaxTokens);
  const int64_t threads = n * k;  // one per value
  quantize_act_q8_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(x, ldx, n, k, xq, xm);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_stage_act_f32(const float* x, int64_t ldx, int n, int64_t k, float* xs, int64_t kpad, cudaStream_t s) {
  const int64_t total = n * kpad;
  stage_act_f32_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, s>>>(x, ldx, n, k, xs, kpad);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_matvec_q8(const DeviceMatrix& w, const int8_t* xq, const float4* xm, int n, float* y, int64_t ldy,
                      cudaStream_t s) {
  DUET_CHECK(n >= 1 && n <= kDecodeMaxTokens);
  switch (w.dtype) {
    case DType::kQ4_0: return matvec_q8_typed<DType::kQ4_0>(w, xq, xm, n, y, ldy, s);
    case DType::kQ4_1: return matvec_q8_typed<DType::kQ4_1>(w, xq, xm, n, y, ldy, s);
    case DType::kQ5_0: return matvec_q8_typed<DType::kQ5_0>(w, xq, xm, n, y, ldy, s);
    case DType::kQ5_1: return matvec_q8_typed<DType::kQ5_1>(w, xq, xm, n, y, ldy, s);
    case DType::kQ8_0: return matvec_q8_typed<DType::kQ8_0>(w, xq, xm, n, y, ldy, s);
    case DType::kQ2_K: return matvec_q8_typed<DType::kQ2_K>(w, xq, xm, n, y, ldy, s);
    case DType::kQ3_K: return matvec_q8_typed<DType::kQ3_K>(w, xq, xm, n, y, ldy, s);
    case DType::kQ4_K: return matvec_q8_typed<DType::kQ4_K>(w, xq, xm, n, y, ldy, s);
    case DType::kQ5_K: return matvec_q8_typed<DType::kQ5_K>(w, xq, xm, n, y, ldy, s);
    case DType::kQ6_K: return matvec_q8_typed<DType::kQ6_K>(w, xq, xm, n, y, ldy, s);
    default: DUET_CHECK_MSG(false, "matvec_q8: %s is not block-quantized", dtype_name(w.dtype).data());
  }
}

void launch_matvec_float(const DeviceMatrix& w, const float* xs, int64_t kpad, int n, float* y, int64_t ldy,
                         cudaStream_t s) {
  DUET_CHECK(n >= 1 && n <= kDecodeMaxTokens && w.row_bytes % 16 == 0);
  switch (w.dtype) {
    case DType::kF32: return matvec_float_typed<DType::kF32>(w, xs, kpad, n, y, ldy, s);
    case DType::kF16: return matvec_float_typed<DType::kF16>(w, xs, kpad, n, y, ldy, s);
    case DType::kBF16: return matvec_float_typed<DType::kBF16>(w, xs, kpad, n, y, ldy, s);
    case DType::kF8_E4M3: return matvec_float_typed<DType::kF8_E4M3>(w, xs, kpad, n, y, ldy, s);
    default: DUET_CHECK_MSG(false, "matvec_float: unsupported %s", dtype_name(w.dtype).data());
  }
}

}  // namespace duet::cuda::kernels
