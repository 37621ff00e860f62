// Gated activations on the GPU (launch_gated_activation; contract in ops.h, numerics as
// kernels/cpu/activation.h). SiLU uses ggml's expf with the CPU's fused multiply-adds on the
// first n & ~7 elements and expf on the tail, like the CPU, so it matches bit for bit. GELU uses
// tanhf (<= 2 ulp from glibc's tanh); in kF16Table mode input and result are rounded to F16 as
// ggml's table, so a result is the table's entry or (rarely, at an F16 rounding boundary) its
// neighbour. Runs on the caller's stream; no allocation, no synchronisation.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "base/check.h"
#include "base/env.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace duet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kGeluCoef = 0.044715f;

// act(g) * u for mode 0 (SiLU), 1 (GELU tanh, float32), 2 (GELU through ggml's F16 table).
// tail: the element lies past the last multiple of 8 of the whole tensor, where the CPU (and
// ggml) uses expf instead of the vectorised exponential.
__device__ __forceinline__ float gated_value(int mode, float g, float u, bool tail) {
  if (mode == 0) {  // SiLU
    const float e = tail ? expf(-g) : detail::ggml_expf_dev(0.0f - g);
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u);
  }
  if (mode == 1) return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * (1.0f + kGeluCoef * g * g))) * u;
  if (g <= -10.0f) return 0.0f;
  if (g >= 10.0f) return __fmul_rn(g, u);
  const float x = __half2float(__float2half_rn(g));
  const float y = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * __fmaf_rn(kGeluCoef * x, x, 1.0f)));
  return __fmul_rn(__half2float(__float2half_rn(y)), u);
}

// Grid (column blocks, row blocks): thread i of a column block takes V consecutive elements
// (float4 loads and stores when V == 4: n, ldi, ldo multiples of 4 and 16-byte aligned rows) of
// rows blockIdx.y, blockIdx.y + gridDim.y, ... (no 64-bit division per element). Eager profile of
// a qwen2-7b 2048-token prompt on the H200 (2026-11-30): 3.1 ms per forward against 7.0 ms for
// the 1-D grid-stride kernel it replaced (~1.9 TB/s). gate/up rows ldi
// apart, out rows ldo apart (out may equal gate when ldo == ldi). n8: the whole tensor's
// n_rows * n rounded down to 8 (the CPU's vectorised/tail split, see gated_value). Memory-bound:
// 12 bytes per element.
// O: float, or __half (launch_gated_activation_f16: each value rounded to nearest, 8-byte stores).
// pdl_trigger at the start lets a dependent launched programmatically (the down product of
// tensor-core batches, which then requests its first weights early) be scheduled at once, however
// this kernel was launched; pdl_wait waits for the producer when this kernel was launched
// programmatically (launch_gated_activation_f16's pdl) and is a no-op otherwise.
template <int V, typename O = float>
__global__ void gated_activation_kernel(int mode, const float* gate, const float* up, int64_t ldi, int64_t n,
                                        O* out, int64_t ldo, int64_t n_rows, int64_t n8) {
  detail::pdl_trigger();
  detail::pdl_wait();
  for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
    for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * V; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads * V) {
      const int64_t e = r * n + i;
      if constexpr (V == 4) {
        const float4 g = *reinterpret_cast<const float4*>(gate + r * ldi + i);
        const float4 u = *reinterpret_cast<const float4*>(up + r * ldi + i);
        float4 o;
        o.x = gated_value(mode, g.x, u.x, e >= n8);
        o.y = gated_value(mode, g.y, u.y, e + 1 >= n8);
        o.z = gated_value(mode, g.z, u.z, e + 2 >= n8);
        o.w = gated_value(mode, g.w, u.w, e + 3 >= n8);
        if constexpr (std::is_same_v<O, __half>) {
          const __half2 a = __floats2half2_rn(o.x, o.y), b = __floats2half2_rn(o.z, o.w);
          uint2 bits;
          memcpy(&bits.x, &a, 4);
          memcpy(&bits.y, &b, 4);
          *reinterpret_cast<uint2*>(out + r * ldo + i) = bits;
        } else {
          *reinterpret_cast<float4*>(out + r * ldo + i) = o;
        }
      } else {
        const float o = gated_value(mode, gate[r * ldi + i], up[r * ldi + i], e >= n8);
        if constexpr (std::is_same_v<O, __half>)
          out[r * ldo + i] = __float2half_rn(o);
        else
          out[r * ldo + i] = o;
      }
    }
  }
}

// One warp per 32 values of one row: the values of gated_activation_kernel, quantized in
// registers (detail::quantize_group_q8) into xq [n_rows][n], xm [n_rows][n / 32]. n % 32 == 0.
__global__ void gated_activation_q8_kernel(int mode, const float* gate, const float* up, int64_t ldi, int64_t n,
                                           int64_t n_rows, int8_t* xq, float4* xm) {
  detail::pdl_trigger();
  detail::pdl_wait();
  const int64_t groups = n / 32;
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (gw >= n_rows * groups) return;  // uniform per warp
  const int64_t r = gw / groups, g = gw - r * groups, i = g * 32 + lane;
  const int64_t n8 = (n_rows * n) & ~int64_t{7};
  const float v = gated_value(mode, gate[r * ldi + i], up[r * ldi + i], r * n + i >= n8);
  detail::quantize_group_q8(v, lane, xq + r * n + g * 32, xm + r * groups + g);
}

// One block of kFp8Threads threads per row r: the row's values of gated_activation_kernel held in
// registers (thread i: elements i + kFp8Threads k), their amax (block reduction), then the row
// as E4M3 at scale amax / 448 into out[r * ldo ..] (0 from n to ldo) and the scale into
// scales[r]: exactly what launch_quantize_act_fp8_rows writes from the float values, without
// writing and re-reading them. n <= kGatedFp8MaxCols.
constexpr int kFp8Threads = 512;
constexpr int kFp8Regs = static_cast<int>(kGatedFp8MaxCols / kFp8Threads);
__global__ void __launch_bounds__(kFp8Threads) gated_activation_fp8_rows_kernel(int mode, const float* gate,
                                                                                const float* up, int64_t ldi,
                                                                                int64_t n, int64_t n8, uint8_t* out,
                                                                                int64_t ldo, float* scales) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  float v[kFp8Regs];
  float m = 0.f;
#pragma unroll
  for (int k = 0; k < kFp8Regs; ++k) {
    const int64_t i = threadIdx.x + int64_t{k} * kFp8Threads;
    v[k] = i < n ? gated_value(mode, gate[r * ldi + i], up[r * ldi + i], r * n + i >= n8) : 0.f;
    m = fmaxf(m, fabsf(v[k]));
  }
  detail::store_e4m3_row<kFp8Threads, kFp8Regs>(v, m, n, out + r * ldo, ldo, scales + r, red);
}

// The same output as gated_activation_fp8_rows_kernel, for rows whose values can be read as
// float4 (n, ldi multiples of 4, 16-byte aligned gate/up; ldo a multiple of 4): one block of
// kFp8SmemThreads threads per row, the row's values staged in shared memory (n floats, dynamic)
// instead of registers. The register form (59 registers, 512 threads) holds two rows per SM and
// measured 51.6 us per qwen2-7b 512-token layer, ~34% of HBM bandwidth (ncu, H200): here few
// registers are needed, so up to three rows (n = 18944: 74 KiB each) share an SM, with float4
// loads and 4-byte stores. Pass 1: values into shared memory and the row's amax; pass 2: E4M3
// from shared memory. DUET_ACT_FP8_SMEM=0 keeps the register form (A/B knob).
constexpr int kFp8SmemThreads = 512;
__global__ void __launch_bounds__(kFp8SmemThreads) gated_activation_fp8_rows_smem_kernel(
    int mode, const float* gate, const float* up, int64_t ldi, int64_t n, int64_t n8, uint8_t* out, int64_t ldo,
    float* scales) {
  extern __shared__ float4 vals[];  // n / 4
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const int64_t n4 = n / 4;
  const float4* g4 = reinterpret_cast<const float4*>(gate + r * ldi);
  const float4* u4 = reinterpret_cast<const float4*>(up + r * ldi);
  float m = 0.f;
  for (int64_t j = threadIdx.x; j < n4; j += kFp8SmemThreads) {
    const float4 g = g4[j], u = u4[j];
    const int64_t e = r * n + 4 * j;
    float4 v;
    v.x = gated_value(mode, g.x, u.x, e >= n8);
    v.y = gated_value(mode, g.y, u.y, e + 1 >= n8);
    v.z = gated_value(mode, g.z, u.z, e + 2 >= n8);
    v.w = gated_value(mode, g.w, u.w, e + 3 >= n8);
    vals[j] = v;
    m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
  }
  const float amax = detail::block_max(m, red);  // synchronises the block: vals complete
  const float inv = amax > 0.f ? 448.f / amax : 1.f;
  if (threadIdx.x == 0) scales[r] = amax > 0.f ? amax / 448.f : 1.f;
  uint32_t* o4 = reinterpret_cast<uint32_t*>(out + r * ldo);
  for (int64_t j = threadIdx.x; j < n4; j += kFp8SmemThreads) {
    const float4 v = vals[j];
    o4[j] = uint32_t{__nv_fp8_e4m3(v.x * inv).__x} | uint32_t{__nv_fp8_e4m3(v.y * inv).__x} << 8 |
            uint32_t{__nv_fp8_e4m3(v.z * inv).__x} << 16 | uint32_t{__nv_fp8_e4m3(v.w * inv).__x} << 24;
  }
  for (int64_t j = n4 + threadIdx.x; j < ldo / 4; j += kFp8SmemThreads) o4[j] = 0;
}

bool fp8_rows_smem_enabled() {
  static const bool on = env_flag("DUET_ACT_FP8_SMEM", true);
  return on;
}

int mode_of(Activation act, GeluMode gelu) { return act == Activation::kSilu ? 0 : (gelu == GeluMode::kExact ? 1 : 2); }

}  // namespace

void launch_gated_activation(Activation act, GeluMode gelu, const float* gate, const float* up, float* out, int64_t n,
                             cudaStream_t stream) {
  launch_gated_activation_rows(act, gelu, gate, up, n, 1, n, out, n, stream);
}

namespace {
// The element-wise gated activation into float or F16 rows (vectorised by 4 where the rows and
// pointers allow: 16-byte input loads, 4 x sizeof(O)-byte stores).
template <typename O>
void launch_gated_rows(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi, int64_t n_rows,
                       int64_t n, O* out, int64_t ldo, cudaStream_t stream, bool pdl = false) {
  const int64_t total = n_rows * n;
  if (total <= 0) return;
  const bool vec = n % 4 == 0 && ldi % 4 == 0 && ldo % 4 == 0 && reinterpret_cast<uintptr_t>(gate) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(up) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % (4 * sizeof(O)) == 0;
  const int v = vec ? 4 : 1;
  const int64_t col_blocks = (n + int64_t{kThreads} * v - 1) / (int64_t{kThreads} * v);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(col_blocks, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(n_rows, 65535)));
  const int64_t n8 = total & ~int64_t{7};
  const int mode = mode_of(act, gelu);
  if (vec)
    detail::launch_maybe_pdl(gated_activation_kernel<4, O>, grid, dim3(kThreads), 0, stream, pdl, mode, gate, up, ldi, n,
                             out, ldo, n_rows, n8);
  else
    detail::launch_maybe_pdl(gated_activation_kernel<1, O>, grid, dim3(kThreads), 0, stream, pdl, mode, gate, up, ldi, n,
                             out, ldo, n_rows, n8);
  DUET_CUDA_CHECK_LAUNCH();
}
}  // namespace

void launch_gated_activation_rows(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                  int64_t n_rows, int64_t n, float* out, int64_t ldo, cudaStream_t stream, bool pdl) {
  launch_gated_rows(act, gelu, gate, up, ldi, n_rows, n, out, ldo, stream, pdl);
}

void launch_gated_activation_f16(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                 int64_t n_rows, int64_t n, __half* out, int64_t ldo, cudaStream_t stream, bool pdl) {
  launch_gated_rows(act, gelu, gate, up, ldi, n_rows, n, out, ldo, stream, pdl);
}

void launch_gated_activation_q8(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                int64_t n_rows, int64_t n, int8_t* xq, float4* xm, bool pdl, cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  DUET_CHECK_MSG(n % 32 == 0, "gated_activation_q8: %lld values per row, not a multiple of 32", static_cast<long long>(n));
  const int64_t threads = n_rows * n;  // one per value
  detail::launch_maybe_pdl(gated_activation_q8_kernel, dim3(static_cast<unsigned>((threads + 255) / 256)), dim3(256), 0,
                           stream, pdl, mode_of(act, gelu), gate, up, ldi, n, n_rows, xq, xm);
}

void launch_gated_activation_fp8_rows(Activation act, GeluMode gelu, const float* gate, const float* up, int64_t ldi,
                                      int64_t n_rows, int64_t n, uint8_t* out, int64_t ldo, float* scales,
                                      cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  DUET_CHECK_MSG(n <= kGatedFp8MaxCols && ldo >= n, "gated_activation_fp8_rows: %lld values per row (at most %lld)",
                 static_cast<long long>(n), static_cast<long long>(kGatedFp8MaxCols));
  const int64_t n8 = (n_rows * n) & ~int64_t{7};
  const bool vec = n % 4 == 0 && ldi % 4 == 0 && ldo % 4 == 0 && reinterpret_cast<uintptr_t>(gate) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(up) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (vec && fp8_rows_smem_enabled()) {
    static std::atomic<uint64_t> opted_in{0};
    int dev = 0;
    DUET_CUDA_CHECK(cudaGetDevice(&dev));
    const uint64_t bit = uint64_t{1} << (dev & 63);
    if (!(opted_in.load(std::memory_order_acquire) & bit)) {
      DUET_CUDA_CHECK(cudaFuncSetAttribute(gated_activation_fp8_rows_smem_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kGatedFp8MaxCols * sizeof(float))));
      opted_in.fetch_or(bit, std::memory_order_release);
    }
    gated_activation_fp8_rows_smem_kernel<<<static_cast<unsigned>(n_rows), kFp8SmemThreads, n * sizeof(float), stream>>>(
        mode_of(act, gelu), gate, up, ldi, n, n8, out, ldo, scales);
  } else {
    gated_activation_fp8_rows_kernel<<<static_cast<unsigned>(n_rows), kFp8Threads, 0, stream>>>(
        mode_of(act, gelu), gate, up, ldi, n, n8, out, ldo, scales);
  }
  DUET_CUDA_CHECK_LAUNCH();
}

}  // namespace duet::cuda
