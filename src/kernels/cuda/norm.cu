// RMSNorm on the GPU (launch_rms_norm, launch_add_rms_norm; contracts in ops.h). The sum of
// squares is accumulated in double, like the CPU reference (kernels/cpu/norm.cpp), so results
// match it to the last bit except for rare rounding of a differently ordered double sum.
// Runs on the caller's stream; no allocation, no synchronisation.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace duet::cuda {
namespace {

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  return v;
}

// Rows of n <= 1024 (per-head q/k norms): one warp per row, kWarps rows per block.
// x, y: float rows ldx / ldy apart; w: n floats or null. Second pass re-reads x from L1.
// Memory-bound: 8 bytes per element (read + write).
constexpr int kNormWarps = 4;
__global__ void rms_norm_warp_kernel(const float* x, int64_t ldx, const float* w, float eps, int64_t n,
                                     int64_t n_rows, float* y, int64_t ldy) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kNormWarps + (threadIdx.x >> 5);
  if (r >= n_rows) return;
  const int lane = threadIdx.x & 31;
  const float* xr = x + r * ldx;
  float* yr = y + r * ldy;
  double sum = 0;
  for (int64_t i = lane; i < n; i += 32) {
    const float v = xr[i];
    sum += static_cast<double>(v * v);  // float square, as the CPU reference
  }
  sum = warp_sum_d(sum);
  const float scale = 1.0f / sqrtf(static_cast<float>(sum / static_cast<double>(n)) + eps);
  for (int64_t i = lane; i < n; i += 32) yr[i] = w ? (xr[i] * scale) * w[i] : xr[i] * scale;
}

// Long rows (d_model): one block of 256 threads per row; with `res`, first x += res (written back).
// Memory-bound: 8 bytes per element (12 + 4 with the residual).
constexpr int kNormThreads = 256;
__global__ void rms_norm_block_kernel(float* x, int64_t ldx, const float* res, const float* w, float eps, int64_t n,
                                      float* y, int64_t ldy) {
  __shared__ double red[kNormThreads / 32];
  const int64_t r = blockIdx.x;
  float* xr = x + r * ldx;
  float* yr = y + r * ldy;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kNormThreads) {
    float v = xr[i];
    if (res) {
      v += res[r * n + i];
      xr[i] = v;
    }
    sum += static_cast<double>(v * v);
  }
  sum = warp_sum_d(sum);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    double s = threadIdx.x < kNormThreads / 32 ? red[threadIdx.x] : 0.0;
    s = warp_sum_d(s);
    if (threadIdx.x == 0) red[0] = s;
  }
  __syncthreads();
  const float scale = 1.0f / sqrtf(static_cast<float>(red[0] / static_cast<double>(n)) + eps);
  // Each thread re-reads the elements it wrote itself, so no barrier is needed for x.
  for (int64_t i = threadIdx.x; i < n; i += kNormThreads) yr[i] = w ? (xr[i] * scale) * w[i] : xr[i] * scale;
}

}  // namespace

void launch_rms_norm(const float* x, int64_t ldx, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
                     int64_t ldy, cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  if (n <= 1024) {
    const unsigned blocks = static_cast<unsigned>(detail::ceil_div(n_rows, kNormWarps));
    rms_norm_warp_kernel<<<blocks, kNormWarps * 32, 0, stream>>>(x, ldx, w, eps, n, n_rows, y, ldy);
  } else {
    // y may equal x: the block kernel reads x[i] before writing y[i] in the same thread.
    rms_norm_block_kernel<<<static_cast<unsigned>(n_rows), kNormThreads, 0, stream>>>(const_cast<float*>(x), ldx,
                                                                                    nullptr, w, eps, n, y, ldy);
  }
  DUET_CUDA_CHECK_LAUNCH();
}

void launch_add_rms_norm(float* x, const float* res, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
                         cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  rms_norm_block_kernel<<<static_cast<unsigned>(n_rows), kNormThreads, 0, stream>>>(x, n, res, w, eps, n, y, n);
  DUET_CUDA_CHECK_LAUNCH();
}

}  // namespace duet::cuda
