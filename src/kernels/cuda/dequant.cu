// Element-wise kernels around the prompt-path GEMMs and the embedding lookup: weights dequantized
// to F16 tiles for cuBLAS, activations converted to F16/BF16 or quantized to E4M3 (with a
// per-tensor scale computed on the GPU), per-row FP8 scales applied after a GEMM, and get_rows.
// All memory-bound; run on the caller's stream; no allocation, no sync.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "base/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_kernels.cuh"
#include "kernels/cuda/quant_types.cuh"
#include "runtime/cuda_check.h"

namespace duet::cuda::kernels {
namespace {

using quant::Chunk;
using quant::QT;
using quant::QView;

unsigned blocks_for(int64_t threads, int per_block) {
  const int64_t b = (threads + per_block - 1) / per_block;
  return static_cast<unsigned>(b < (1 << 30) ? b : (1 << 30));
}

template <DType T>
QView qview(const DeviceMatrix& w) {
  return QView{static_cast<const uint8_t*>(w.data), w.n_rows, w.n_cols / QT<T>::kBlock, w.row_bytes};
}

// One thread per 32-weight chunk of rows [row0, row0 + n_rows): decode, write 32 halves (four
// 16-byte stores) to out [n_rows][ldo]. ldo % 8 == 0. Memory-bound: reads the quantized rows,
// writes 2 bytes a weight.
template <DType T>
__global__ void dequant_f16_kernel(QView w, int64_t row0, int64_t n_rows, __half* __restrict__ out, int64_t ldo) {
  const int64_t nch = w.blocks_per_row * QT<T>::kChunks;
  const int64_t total = n_rows * nch;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = g / nch, c = g % nch;
    Chunk ch;
    quant::load_chunk<T>(w, row0 + r, c, ch);
    uint32_t h[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const __half2 v = __floats2half2_rn(quant::chunk_value(ch, 2 * e), quant::chunk_value(ch, 2 * e + 1));
      h[e] = *reinterpret_cast<const uint32_t*>(&v);
    }
    uint4* o = reinterpret_cast<uint4*>(out + r * ldo + c * 32);
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
  }
}

// One thread per 16 FP8 weights of rows [row0, row0 + n_rows): value * its block scale -> F16,
// two 16-byte stores to out [n_rows][ldo] (ldo >= row_bytes, % 8 == 0; padding decodes to 0).
__global__ void dequant_fp8_f16_kernel(DeviceMatrix w, int64_t row0, int64_t n_rows, __half* __restrict__ out,
                                       int64_t ldo) {
  const int64_t nch = static_cast<int64_t>(w.row_bytes / 16);
  const int64_t total = n_rows * nch;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = g / nch, c = g % nch, row = row0 + r;
    const uint4 raw = quant::ld128(static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes) + c * 16);
    const float s = __ldg(w.fp8_scales + (row / w.fp8_block_rows) * w.fp8_scale_cols + (c * 16) / w.fp8_block_cols) *
                    quant::kFp8Unscale;
    float v[16];
    quant::fp8x4_to_float(raw.x, v);
    quant::fp8x4_to_float(raw.y, v + 4);
    quant::fp8x4_to_float(raw.z, v + 8);
    quant::fp8x4_to_float(raw.w, v + 12);
    uint32_t h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const __half2 p = __floats2half2_rn(v[2 * e] * s, v[2 * e + 1] * s);
      h[e] = *reinterpret_cast<const uint32_t*>(&p);
    }
    uint4* o = reinterpret_cast<uint4*>(out + r * ldo + c * 16);
    o[0] = make_uint4(h[0], h[1], h[2], h[3]);
    o[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

// One thread per output element of out [n][ldo]: x converted (round to nearest), 0 beyond k.
template <typename H>
__global__ void convert_act_kernel(const float* __restrict__ x, int64_t ldx, int n, int64_t k, H* __restrict__ out,
                                   int64_t ldo) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * ldo) return;
  const int64_t t = i / ldo, c = i % ldo;
  const float v = c < k ? x[t * ldx + c] : 0.f;
  if constexpr (sizeof(H) == 2 && std::is_same_v<H, __half>) out[i] = __float2half_rn(v);
  else out[i] = __float2bfloat16_rn(v);
}

// Token row blockIdx.y: columns c of x -> F16 (zero beyond k, up to ldo) and y[c] = 0 for c < y_rows,
// a grid-stride loop over the longer of the two.
__global__ void convert_act_zero_kernel(const float* __restrict__ x, int64_t ldx, int64_t k,
                                        __half* __restrict__ out, int64_t ldo, float* __restrict__ y,
                                        int64_t ldy, int64_t y_rows) {
  const int64_t t = blockIdx.y;
  const int64_t end = ldo > y_rows ? ldo : y_rows;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < end;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (c < ldo) out[t * ldo + c] = __float2half_rn(c < k ? x[t * ldx + c] : 0.f);
    if (c < y_rows) y[t * ldy + c] = 0.f;
  }
}

// Grid-stride max |x| over x [n][ldx] (k columns); one atomic per warp. amax starts at 0, and
// non-negative floats order like their bit patterns, so an integer atomicMax is exact.
__global__ void act_amax_kernel(const float* __restrict__ x, int64_t ldx, int n, int64_t k, float* amax) {
  float m = 0.f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n * k;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(x[(i / k) * ldx + i % k]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

// One thread per element of out [n][ldo]: E4M3(x / scale) with saturation, 0 beyond k.
__global__ void quantize_act_fp8_kernel(const float* __restrict__ x, int64_t ldx, int n, int64_t k,
                                        const float* __restrict__ amax, uint8_t* __restrict__ out, int64_t ldo,
                                        float* scale_out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const float a = *amax;
  const float scale = a > 0.f ? a / 448.f : 1.f;
  if (i == 0) *scale_out = scale;
  if (i >= n * ldo) return;
  const int64_t t = i / ldo, c = i % ldo;
  const float v = c < k ? x[t * ldx + c] / scale : 0.f;
  out[i] = __nv_fp8_e4m3(v).__x;
}

// One block per token row t: amax over the row (block reduction), then out[t][c] = E4M3(x / s)
// with s = amax / 448 (1 when the row is 0) written to scales[t]; 0 for k <= c < ldo. The second
// pass re-reads the row from L1/L2.
__global__ void quantize_act_fp8_rows_kernel(const float* __restrict__ x, int64_t ldx, int64_t k, uint8_t* out,
                                             int64_t ldo, float* scales) {
  __shared__ float red[32];
  const int t = blockIdx.x;
  const float* xr = x + t * ldx;
  float m = 0.f;
  for (int64_t c = threadIdx.x; c < k; c += blockDim.x) m = fmaxf(m, fabsf(xr[c]));
  const float amax = detail::block_max(m, red);
  const float inv = amax > 0.f ? 448.f / amax : 1.f;
  if (threadIdx.x == 0) scales[t] = amax > 0.f ? amax / 448.f : 1.f;
  uint8_t* o = out + t * ldo;
  for (int64_t c = threadIdx.x; c < ldo; c += blockDim.x) o[c] = c < k ? __nv_fp8_e4m3(xr[c] * inv).__x : 0;
}

// One thread per element of y's n x n_rows block: y *= its row's scale (times *extra).
__global__ void scale_rows_kernel(float* y, int64_t ldy, int n, int64_t n_rows, const float* __restrict__ scales,
                                  int64_t block_rows, const float* __restrict__ extra) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * n_rows) return;
  const int64_t t = i / n_rows, r = i % n_rows;
  float f = __ldg(scales + r / block_rows);
  if (extra) f *= *extra;
  y[t * ldy + r] *= f;
}

// One thread per element of y's n x n_rows block: BF16 GEMM output tile -> float, times row scales.
__global__ void store_rows_bf16_kernel(const __nv_bfloat16* __restrict__ src, int64_t lds, int n, int64_t n_rows,
                                       float* __restrict__ y, int64_t ldy, const float* __restrict__ row_scales,
                                       int64_t block_rows, int64_t row0) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * n_rows) return;
  const int64_t t = i / n_rows, r = i % n_rows;
  float v = __bfloat162float(src[t * lds + r]);
  if (row_scales) v *= __ldg(row_scales + (row0 + r) / block_rows);
  y[t * ldy + r] = v;
}

// One block per requested row, threads over its 32-weight chunks; out [n][n_cols] float.
// Bit-exact with dequantize_row (same float operations), then times scale.
template <DType T>
__global__ void get_rows_q_kernel(QView w, const int32_t* __restrict__ rows, float scale, float* __restrict__ out) {
  const int64_t row = rows[blockIdx.x];
  const int64_t nch = w.blocks_per_row * QT<T>::kChunks;
  float* o = out + static_cast<int64_t>(blockIdx.x) * nch * 32;
  for (int64_t c = threadIdx.x; c < nch; c += blockDim.x) {
    Chunk ch;
    quant::load_chunk<T>(w, row, c, ch);
#pragma unroll
    for (int e = 0; e < 32; ++e) o[c * 32 + e] = __fmul_rn(quant::chunk_value(ch, e), scale);
  }
}

// One block per requested row, one thread per element; F32/F16/BF16/FP8 (times its scale).
__global__ void get_rows_float_kernel(DeviceMatrix w, const int32_t* __restrict__ rows, float scale,
                                      float* __restrict__ out) {
  const int64_t row = rows[blockIdx.x];
  const uint8_t* wr = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
  float* o = out + static_cast<int64_t>(blockIdx.x) * w.n_cols;
  for (int64_t c = threadIdx.x; c < w.n_cols; c += blockDim.x) {
    float v;
    switch (w.dtype) {
      case DType::kF32: v = reinterpret_cast<const float*>(wr)[c]; break;
      case DType::kF16: v = __half2float(reinterpret_cast<const __half*>(wr)[c]); break;
      case DType::kBF16: v = __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(wr)[c]) << 16); break;
      default: {  // FP8 E4M3, decoded as in quant::fp8x4_to_float (exact), times its block scale
        const uint32_t b = wr[c];
        const uint32_t h = ((b & 0x7f) << 7) | ((b & 0x80) << 8);
        v = __half2float(__ushort_as_half(static_cast<unsigned short>(h))) * quant::kFp8Unscale;
        v = __fmul_rn(v, w.fp8_scales[(row / w.fp8_block_rows) * w.fp8_scale_cols + c / w.fp8_block_cols]);
      }
    }
    o[c] = __fmul_rn(v, scale);
  }
}

template <DType T>
void dequant_f16_typed(const DeviceMatrix& w, int64_t row0, int64_t n_rows, void* out, int64_t ldo, cudaStream_t s) {
  const int64_t total = n_rows * (w.n_cols / 32);
  dequant_f16_kernel<T><<<blocks_for(total, 256), 256, 0, s>>>(qview<T>(w), row0, n_rows, static_cast<__half*>(out), ldo);
  DUET_CUDA_CHECK_LAUNCH();
}

template <DType T>
void get_rows_typed(const DeviceMatrix& w, const int32_t* rows, int n, float scale, float* out, cudaStream_t s) {
  get_rows_q_kernel<T><<<n, 128, 0, s>>>(qview<T>(w), rows, scale, out);
  DUET_CUDA_CHECK_LAUNCH();
}

#define DUET_QUANT_CASES(F, ...)                                   \
  case DType::kQ4_0: return F<DType::kQ4_0>(__VA_ARGS__);          \
  case DType::kQ4_1: return F<DType::kQ4_1>(__VA_ARGS__);          \
  case DType::kQ5_0: return F<DType::kQ5_0>(__VA_ARGS__);          \
  case DType::kQ5_1: return F<DType::kQ5_1>(__VA_ARGS__);          \
  case DType::kQ8_0: return F<DType::kQ8_0>(__VA_ARGS__);          \
  case DType::kQ2_K: return F<DType::kQ2_K>(__VA_ARGS__);          \
  case DType::kQ3_K: return F<DType::kQ3_K>(__VA_ARGS__);          \
  case DType::kQ4_K: return F<DType::kQ4_K>(__VA_ARGS__);          \
  case DType::kQ5_K: return F<DType::kQ5_K>(__VA_ARGS__);          \
  case DType::kQ6_K: return F<DType::kQ6_K>(__VA_ARGS__);

}  // namespace

void launch_dequant_f16(const DeviceMatrix& w, int64_t row0, int64_t n_rows, void* out, int64_t ldo, cudaStream_t s) {
  DUET_CHECK(ldo % 8 == 0 && ldo >= w.n_cols && row0 >= 0 && row0 + n_rows <= w.n_rows);
  if (n_rows <= 0) return;
  if (w.dtype == DType::kF8_E4M3) {
    DUET_CHECK(static_cast<int64_t>(w.row_bytes) <= ldo);
    const int64_t total = n_rows * static_cast<int64_t>(w.row_bytes / 16);
    dequant_fp8_f16_kernel<<<blocks_for(total, 256), 256, 0, s>>>(w, row0, n_rows, static_cast<__half*>(out), ldo);
    DUET_CUDA_CHECK_LAUNCH();
    return;
  }
  switch (w.dtype) {
    DUET_QUANT_CASES(dequant_f16_typed, w, row0, n_rows, out, ldo, s)
    default: DUET_CHECK_MSG(false, "dequant_f16: unsupported %s", dtype_name(w.dtype).data());
  }
}

void launch_convert_act(const float* x, int64_t ldx, int n, int64_t k, void* out, int64_t ldo, bool bf16,
                        cudaStream_t s) {
  const int64_t total = n * ldo;
  if (bf16)
    convert_act_kernel<__nv_bfloat16><<<blocks_for(total, 256), 256, 0, s>>>(x, ldx, n, k, static_cast<__nv_bfloat16*>(out), ldo);
  else
    convert_act_kernel<__half><<<blocks_for(total, 256), 256, 0, s>>>(x, ldx, n, k, static_cast<__half*>(out), ldo);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_convert_act_zero(const float* x, int64_t ldx, int n, int64_t k, __half* out, int64_t ldo,
                             float* y, int64_t ldy, int64_t y_rows, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t end = ldo > y_rows ? ldo : y_rows;
  const unsigned bx = blocks_for(end, 256) < 64 ? blocks_for(end, 256) : 64;
  convert_act_zero_kernel<<<dim3(bx, static_cast<unsigned>(n)), 256, 0, s>>>(x, ldx, k, out, ldo, y, ldy,
                                                                             y_rows);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_act_amax(const float* x, int64_t ldx, int n, int64_t k, float* amax, cudaStream_t s) {
  const int64_t total = n * k;
  const unsigned blocks = blocks_for(total, 256) < 1024 ? blocks_for(total, 256) : 1024;
  act_amax_kernel<<<blocks, 256, 0, s>>>(x, ldx, n, k, amax);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_quantize_act_fp8(const float* x, int64_t ldx, int n, int64_t k, const float* amax, uint8_t* out,
                             int64_t ldo, float* scale_out, cudaStream_t s) {
  const int64_t total = n * ldo;
  quantize_act_fp8_kernel<<<blocks_for(total, 256), 256, 0, s>>>(x, ldx, n, k, amax, out, ldo, scale_out);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_quantize_act_fp8_rows(const float* x, int64_t ldx, int n, int64_t k, uint8_t* out, int64_t ldo,
                                  float* scales, cudaStream_t s) {
  if (n <= 0) return;
  quantize_act_fp8_rows_kernel<<<n, 512, 0, s>>>(x, ldx, k, out, ldo, scales);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_scale_rows(float* y, int64_t ldy, int n, int64_t n_rows, const float* scales, int64_t block_rows,
                       const float* extra, cudaStream_t s) {
  scale_rows_kernel<<<blocks_for(n * n_rows, 256), 256, 0, s>>>(y, ldy, n, n_rows, scales, block_rows, extra);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_store_rows_bf16(const void* src, int64_t lds, int n, int64_t n_rows, float* y, int64_t ldy,
                            const float* row_scales, int64_t block_rows, int64_t row0, cudaStream_t s) {
  store_rows_bf16_kernel<<<blocks_for(n * n_rows, 256), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(src), lds, n,
                                                                      n_rows, y, ldy, row_scales, block_rows, row0);
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_get_rows(const DeviceMatrix& w, const int32_t* rows, int n, float scale, float* out, cudaStream_t s) {
  if (n <= 0) return;
  if (!is_block_quant(w.dtype)) {
    get_rows_float_kernel<<<n, 256, 0, s>>>(w, rows, scale, out);
    DUET_CUDA_CHECK_LAUNCH();
    return;
  }
  switch (w.dtype) {
    DUET_QUANT_CASES(get_rows_typed, w, rows, n, scale, out, s)
    default: break;
  }
}

}  // namespace duet::cuda::kernels
