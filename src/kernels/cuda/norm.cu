// RMSNorm on the GPU (launch_rms_norm, launch_add_rms_norm; contracts in ops.h). The sum of
// squares is accumulated in double, like the CPU reference (kernels/cpu/norm.cpp), so results
// match it to the last bit except for rare rounding of a differently ordered double sum.
// Runs on the caller's stream; no allocation, no synchronisation.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "base/check.h"
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
  detail::pdl_trigger();
  detail::pdl_wait();
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

// Long rows (d_model): one block of kNormBig threads per row, thread i holding elements i,
// i + kNormBig, ... (up to kNormRegs of them in registers, so x is read once; longer rows re-read
// the rest). With `res`, first x += res (written back). Launch-latency bound at decode sizes: a
// 256-thread block looping over a 3584-row measured ~10-13 us on the H200 (ncu), hence the wide
// block and the single pass. Memory-bound for prompts: 8 bytes per element (12 + 4 with res).
// Launched programmatically or not (pdl_wait is a no-op then).
constexpr int kNormBig = 1024;
constexpr int kNormRegs = 8;
constexpr int64_t kNormManyRows = 256;  // from here on, 256-thread blocks (prompts)

// Sum over the block's T threads; every thread gets it. red: T / 32 doubles.
template <int T = kNormBig>
__device__ __forceinline__ double block_sum_d(double v, double* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum_d(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double s = lane < T / 32 ? red[lane] : 0.0;  // T / 32 partial sums
    s = warp_sum_d(s);
    if (lane == 0) red[0] = s;
  }
  __syncthreads();
  return red[0];
}

// Where rms_norm_block_kernel's row goes, by its mode M: 0 floats (y), 1 E4M3 rows (q, qscales),
// 2 F16 rows (h; columns n .. ldh zeroed) and, in the same launch, z[r * ldz + c] = 0 for c < z_rows
// (the zeroed output of the product that reads h: MatmulContext::f16_input).
struct NormOut {
  float* y = nullptr;
  int64_t ldy = 0;
  uint8_t* q = nullptr;
  int64_t ldq = 0;
  float* qscales = nullptr;
  __half* h = nullptr;
  int64_t ldh = 0;
  float* z = nullptr;
  int64_t ldz = 0;
  int64_t z_rows = 0;
};

NormOut float_out(float* y, int64_t ldy) {
  NormOut o;
  o.y = y;
  o.ldy = ldy;
  return o;
}

// M = 1 (launch_rms_norm_fp8_rows): instead of y, the row's values as E4M3 into q + r * ldq at the
// scale amax / 448 (qscales[r]); M = 2 (launch_rms_norm_f16): as F16 into h + r * ldh; both need
// n <= T * R (the values stay in registers).
// T threads per row and R values per thread in registers: (kNormBig, kNormRegs) for a few rows
// (decode), (256, 16) for prompts, where 1024-thread blocks of ~4 values per thread spent their
// time in the block reduction. Eager profile of a qwen2-7b 2048-token FP8 prompt on the H200
// (2026-11-30): norms 2.9 ms per forward against 3.4 ms with the 1024-thread blocks.
template <int T = kNormBig, int R = kNormRegs, int M = 0>
__global__ void __launch_bounds__(T) rms_norm_block_kernel(float* x, int64_t ldx, const float* res, const float* w,
                                                           float eps, int64_t n, NormOut o) {
  constexpr int kNormBig = T;
  constexpr int kNormRegs = R;
  detail::pdl_trigger();
  // The norm weights of the register part before the wait: no producer writes them, so their
  // load overlaps the previous kernel instead of following the reduction (with the same in
  // rms_norm_q8_kernel, H200 2026-11-30, same-day runs: qwen2-7b Q4_K_M tg128 410.1 tok/s against
  // 396.9-399.3, BF16 237.5 against 231.0-233.1; one-sequence step 2.49 ms against 2.55-2.57).
  float wv[kNormRegs];
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t i = threadIdx.x + int64_t{k} * kNormBig;
    wv[k] = w != nullptr && i < n ? w[i] : 1.f;
  }
  detail::pdl_wait();
  __shared__ double red[kNormBig / 32];
  const int64_t r = blockIdx.x;
  float* xr = x + r * ldx;
  float v[kNormRegs];
  double sum = 0;
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t i = threadIdx.x + int64_t{k} * kNormBig;
    v[k] = 0.f;
    if (i < n) {
      float t = xr[i];
      if (res) {
        t += res[r * n + i];
        xr[i] = t;
      }
      v[k] = t;
      sum += static_cast<double>(t * t);
    }
  }
  for (int64_t i = threadIdx.x + int64_t{kNormRegs} * kNormBig; i < n; i += kNormBig) {
    float t = xr[i];
    if (res) {
      t += res[r * n + i];
      xr[i] = t;
    }
    sum += static_cast<double>(t * t);
  }
  sum = block_sum_d<T>(sum, red);
  const float scale = 1.0f / sqrtf(static_cast<float>(sum / static_cast<double>(n)) + eps);
  if constexpr (M == 1) {  // launch_quantize_act_fp8_rows' operations on the values below
    __shared__ float redf[kNormBig / 32];
    float m = 0.f;
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int64_t i = threadIdx.x + int64_t{k} * kNormBig;
      if (i < n) {
        v[k] = w ? (v[k] * scale) * wv[k] : v[k] * scale;
        m = fmaxf(m, fabsf(v[k]));
      }
    }
    detail::store_e4m3_row<kNormBig, kNormRegs>(v, m, n, o.q + r * o.ldq, o.ldq, o.qscales + r, redf);
  } else if constexpr (M == 2) {  // the values launch_rms_norm writes, rounded as convert_act does
    __half* hr = o.h + r * o.ldh;
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int64_t i = threadIdx.x + int64_t{k} * kNormBig;
      if (i < n) hr[i] = __float2half_rn(w ? (v[k] * scale) * wv[k] : v[k] * scale);
    }
    for (int64_t i = n + threadIdx.x; i < o.ldh; i += kNormBig) hr[i] = __float2half_rn(0.f);
    float* zr = o.z + r * o.ldz;
    for (int64_t c = threadIdx.x; c < o.z_rows; c += kNormBig) zr[c] = 0.f;
  } else {
    // Each thread writes only the elements it read (y may equal x).
    float* yr = o.y + r * o.ldy;
#pragma unroll
    for (int k = 0; k < kNormRegs; ++k) {
      const int64_t i = threadIdx.x + int64_t{k} * kNormBig;
      if (i < n) yr[i] = w ? (v[k] * scale) * wv[k] : v[k] * scale;
    }
    for (int64_t i = threadIdx.x + int64_t{kNormRegs} * kNormBig; i < n; i += kNormBig)
      yr[i] = w ? (xr[i] * scale) * w[i] : xr[i] * scale;
  }
}

// launch_rms_norm_q8: rms_norm_block_kernel's values, quantized in registers: thread i = 32 w +
// lane holds elements i + kNormBig k, i.e. lane `lane` of the 32-value group w + 32 k, so warp w
// quantizes groups w, w + 32, ... (detail::quantize_group_q8) instead of writing floats. n % 32
// == 0, n <= kNormBig * kNormRegs (8192; the launcher checks). 4 bytes read, ~1.1 written per
// element; launch-latency bound at decode sizes.
__global__ void __launch_bounds__(kNormBig) rms_norm_q8_kernel(const float* x, int64_t ldx, const float* w, float eps,
                                                               int64_t n, int8_t* xq, float4* xm) {
  detail::pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n_groups = n / 32;
  float wv[kNormRegs];  // the norm weights, loaded before the wait (as rms_norm_block_kernel)
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t g = warp + int64_t{k} * (kNormBig / 32);
    wv[k] = w != nullptr && g < n_groups ? w[g * 32 + lane] : 1.f;
  }
  detail::pdl_wait();
  __shared__ double red[kNormBig / 32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * ldx;
  float v[kNormRegs];
  double sum = 0;
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t i = threadIdx.x + int64_t{k} * kNormBig;
    v[k] = i < n ? xr[i] : 0.f;
    sum += static_cast<double>(v[k] * v[k]);
  }
  sum = block_sum_d(sum, red);
  const float scale = 1.0f / sqrtf(static_cast<float>(sum / static_cast<double>(n)) + eps);
#pragma unroll
  for (int k = 0; k < kNormRegs; ++k) {
    const int64_t g = warp + int64_t{k} * (kNormBig / 32);
    if (g < n_groups) {  // uniform per warp
      const float yv = w ? (v[k] * scale) * wv[k] : v[k] * scale;
      detail::quantize_group_q8(yv, lane, xq + r * n + g * 32, xm + r * n_groups + g);
    }
  }
}

}  // namespace

void launch_rms_norm_q8(const float* x, int64_t ldx, const float* w, float eps, int64_t n, int64_t n_rows,
                        int8_t* xq, float4* xm, bool pdl, cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  DUET_CHECK_MSG(n % 32 == 0 && n <= int64_t{kNormBig} * kNormRegs,
                 "rms_norm_q8: %lld values per row (a multiple of 32, at most %d)", static_cast<long long>(n),
                 kNormBig * kNormRegs);
  detail::launch_maybe_pdl(rms_norm_q8_kernel, dim3(static_cast<unsigned>(n_rows)), dim3(kNormBig), 0, stream, pdl, x,
                           ldx, w, eps, n, xq, xm);
}

void launch_rms_norm(const float* x, int64_t ldx, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
                     int64_t ldy, cudaStream_t stream, bool pdl) {
  if (n_rows <= 0 || n <= 0) return;
  if (n <= 1024) {
    const unsigned blocks = static_cast<unsigned>(detail::ceil_div(n_rows, kNormWarps));
    detail::launch_maybe_pdl(rms_norm_warp_kernel, dim3(blocks), dim3(kNormWarps * 32), 0, stream, pdl, x, ldx, w, eps,
                             n, n_rows, y, ldy);
  } else {
    // y may equal x: the block kernel reads x[i] before writing y[i] in the same thread.
    if (n_rows >= kNormManyRows)
      detail::launch_maybe_pdl(rms_norm_block_kernel<256, 16>, dim3(static_cast<unsigned>(n_rows)), dim3(256), 0, stream,
                               pdl, const_cast<float*>(x), ldx, static_cast<const float*>(nullptr), w, eps, n,
                               float_out(y, ldy));
    else
      detail::launch_maybe_pdl(rms_norm_block_kernel<>, dim3(static_cast<unsigned>(n_rows)), dim3(kNormBig), 0, stream,
                               pdl, const_cast<float*>(x), ldx, static_cast<const float*>(nullptr), w, eps, n,
                               float_out(y, ldy));
  }
}

void launch_add_rms_norm(float* x, const float* res, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
                         cudaStream_t stream, bool pdl) {
  if (n_rows <= 0 || n <= 0) return;
  if (n_rows >= kNormManyRows)
    detail::launch_maybe_pdl(rms_norm_block_kernel<256, 16>, dim3(static_cast<unsigned>(n_rows)), dim3(256), 0, stream,
                             pdl, x, n, res, w, eps, n, float_out(y, n));
  else
    detail::launch_maybe_pdl(rms_norm_block_kernel<>, dim3(static_cast<unsigned>(n_rows)), dim3(kNormBig), 0, stream,
                             pdl, x, n, res, w, eps, n, float_out(y, n));
}

void launch_rms_norm_fp8_rows(float* x, const float* res, const float* w, float eps, int64_t n, int64_t n_rows,
                              uint8_t* q, int64_t ldq, float* scales, cudaStream_t stream, bool pdl) {
  if (n_rows <= 0 || n <= 0) return;
  DUET_CHECK_MSG(n <= kRmsNormFp8MaxCols && ldq >= n, "rms_norm_fp8_rows: %lld values per row (at most %lld)",
                 static_cast<long long>(n), static_cast<long long>(kRmsNormFp8MaxCols));
  // The block shape launch_rms_norm / launch_add_rms_norm pick for these rows (the same sums).
  static_assert(kRmsNormFp8MaxCols <= 256 * 16 && kRmsNormFp8MaxCols <= kNormBig * kNormRegs);
  NormOut o;
  o.q = q;
  o.ldq = ldq;
  o.qscales = scales;
  if (n_rows >= kNormManyRows)
    detail::launch_maybe_pdl(rms_norm_block_kernel<256, 16, 1>, dim3(static_cast<unsigned>(n_rows)), dim3(256), 0,
                             stream, pdl, x, n, res, w, eps, n, o);
  else
    detail::launch_maybe_pdl(rms_norm_block_kernel<kNormBig, kNormRegs, 1>, dim3(static_cast<unsigned>(n_rows)),
                             dim3(kNormBig), 0, stream, pdl, x, n, res, w, eps, n, o);
}

void launch_rms_norm_f16(float* x, const float* res, const float* w, float eps, int64_t n, int64_t n_rows,
                         __half* h, int64_t ldh, float* z, int64_t ldz, int64_t z_rows, cudaStream_t stream, bool pdl) {
  if (n_rows <= 0 || n <= 0) return;
  DUET_CHECK_MSG(n > 1024 && n <= kRmsNormF16MaxCols && ldh >= n && n_rows < kNormManyRows,
                 "rms_norm_f16: %lld values per row (1025-%lld) in %lld rows (< %lld)", static_cast<long long>(n),
                 static_cast<long long>(kRmsNormF16MaxCols), static_cast<long long>(n_rows),
                 static_cast<long long>(kNormManyRows));
  // The block shape launch_rms_norm / launch_add_rms_norm pick for these rows (the same sums).
  static_assert(kRmsNormF16MaxCols <= kNormBig * kNormRegs);
  NormOut o;
  o.h = h;
  o.ldh = ldh;
  o.z = z;
  o.ldz = ldz;
  o.z_rows = z_rows;
  detail::launch_maybe_pdl(rms_norm_block_kernel<kNormBig, kNormRegs, 2>, dim3(static_cast<unsigned>(n_rows)),
                           dim3(kNormBig), 0, stream, pdl, x, n, res, w, eps, n, o);
}

}  // namespace duet::cuda
