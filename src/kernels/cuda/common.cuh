// Device helpers shared by the element-wise, attention and sampling kernels of kernels/cuda:
// warp/block reductions, F16 <-> F32 vector loads, ggml's expf, launch-size arithmetic.
// Header-only, device code plus a few host helpers; no state. Everything here uses only what
// sm_70 has (warp shuffles, __half conversions), so every kernel built on it runs on a V100,
// except the cp.async helpers (sm_80+, empty below), the programmatic-launch pair (sm_90+,
// no-ops below) and the thread-block cluster helpers (sm_90+, empty below).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/cuda_check.h"

namespace duet::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid size for a grid-stride loop over n items: enough blocks to fill the device, no more
// than the work needs (grid-stride kernels are correct for any grid).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = ceil_div(n, threads);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 4 ? 65535 * 4 : blocks));
}

// Resident CTAs per SM of `kernel` (threads per CTA, bytes of dynamic shared memory) on the current
// device, after opting the kernel in to that shared memory there: cudaFuncSetAttribute acts on one
// device's context, so each (kernel, device) pair is opted in once (a tensor-parallel rank on a
// second GPU needs its own). Host calls only (legal while a graph is being captured); thread-safe.
inline int opt_in_ctas_per_sm(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> known;
  int dev = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = known.try_emplace({kernel, dev}, 0);
  if (fresh) {
    DUET_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    int n = 0;
    DUET_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
    it->second = n > 0 ? n : 1;
  }
  return it->second;
}

// Asks the current device to give `kernel` the smallest shared-memory carve-out that still holds
// per_sm CTAs of `smem` dynamic bytes (plus the kernel's static shared memory and the per-CTA
// reservation), so that the rest of the SM's unified L1 / shared memory stays L1; percent >= 0
// asks for that carve-out instead (a benchmark knob). Once per (kernel, device); host calls only.
inline void prefer_l1_carveout(const void* kernel, int per_sm, size_t smem, int percent = -1) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> done;
  int dev = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (!done.try_emplace({kernel, dev}, 0).second) return;
  if (percent < 0) {
    cudaFuncAttributes attr{};
    DUET_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    int sm_bytes = 0, reserved = 0;
    DUET_CUDA_CHECK(cudaDeviceGetAttribute(&sm_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    DUET_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    const size_t need = static_cast<size_t>(per_sm) * (smem + attr.sharedSizeBytes + static_cast<size_t>(reserved));
    if (sm_bytes <= 0) return;
    percent = static_cast<int>(std::min<size_t>(100, (need * 100 + sm_bytes - 1) / static_cast<size_t>(sm_bytes)));
  }
  DUET_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
}

// Multiprocessor count of the current device (a cheap attribute query; legal during capture).
inline int current_sm_count() {
  int dev = 0, n = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  DUET_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

// Shared memory one block of the current device may opt in to (a cheap attribute query; legal
// during capture).
inline int current_smem_optin() {
  int dev = 0, n = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  DUET_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return n;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over all threads of the block (blockDim.x a multiple of 32, <= 1024); every thread gets
// the result. `red` is >= 32 floats of shared memory, reused after a barrier.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : -INFINITY;
  return warp_max(v);
}

// Ends a block's E4M3 row (the FP8-row producers: RMSNorm, gated activation; the operations of
// kernels::launch_quantize_act_fp8_rows): the row's amax from each thread's m (block_max over
// red), the scale amax / 448 into *scale (1 for a zero row), then v[k] (element threadIdx.x + T k,
// k < R) times 448 / amax as E4M3 (satfinite) into q for elements below n, and zeros from n to ld.
// Every thread of the block calls it.
template <int T, int R>
__device__ __forceinline__ void store_e4m3_row(const float (&v)[R], float m, int64_t n, uint8_t* q, int64_t ld,
                                               float* scale, float* red) {
  const float amax = block_max(m, red);
  const float inv = amax > 0.f ? 448.f / amax : 1.f;
  if (threadIdx.x == 0) *scale = amax > 0.f ? amax / 448.f : 1.f;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t i = threadIdx.x + int64_t{k} * T;
    if (i < n) q[i] = __nv_fp8_e4m3(v[k] * inv).__x;
  }
  for (int64_t i = n + threadIdx.x; i < ld; i += T) q[i] = 0;
}

// Programmatic dependent launch (sm_90; no-ops elsewhere and when the kernel was launched without
// the attribute). pdl_trigger lets the next kernel on the stream be scheduled once every block of
// this one has started; pdl_wait blocks until the kernels this one depends on have completed and
// their writes are visible. A kernel launched with the attribute (launch_maybe_pdl) must call
// pdl_wait in every block before it reads anything an earlier kernel wrote, and before it exits:
// a dependent of a kernel that never waited could otherwise run ahead of that kernel's producer.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization
// when pdl is true (the kernel must follow pdl_wait's rule above). Graph capture records the
// programmatic edge.
template <typename... KArgs, typename... Args>
void launch_maybe_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                      Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  DUET_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}

// cp.async (sm_80+: the callers are sm_80+ kernels): 16 bytes global -> shared, zero-filled past
// src_bytes (0 or 16), bypassing L1; 4 bytes likewise through L1; commit / wait for all but
// kPending of this thread's groups.
// cp_async16_l2: the same with an L2 prefetch-size hint (kBytes 64, 128 or 256: the L2 may fetch
// that aligned block around the source, sm_80+; 0: none), to a shared-memory address
// (__cvta_generic_to_shared) or pointer.
template <int kBytes>
__device__ __forceinline__ void cp_async16_l2(unsigned d, const void* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBytes == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
                 : "memory");
  else if constexpr (kBytes == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
                 : "memory");
  else if constexpr (kBytes == 64)
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
                 : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
#endif
}
template <int kBytes>
__device__ __forceinline__ void cp_async16_l2(void* dst, const void* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  cp_async16_l2<kBytes>(static_cast<unsigned>(__cvta_generic_to_shared(dst)), src, src_bytes);
#endif
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  cp_async16_l2<0>(dst, src, src_bytes);
}
// 16 bytes from a shared-memory address, ordered after the cp.async waits before it (volatile).
__device__ __forceinline__ uint4 lds128(unsigned a) {
  uint4 v{};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
#endif
  return v;
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// One warp quantizes 32 consecutive activations of one token (lane i holds value i) into the
// decode kernels' int8 format (kernels/cuda/quant_kernels.cuh: launch_quantize_act_q8): q[lane] =
// round(v * 127 / amax), *m = (amax / 127, d * sum q[0..15], d * sum q[16..31], 0). Every lane
// of the warp must call it.
__device__ __forceinline__ void quantize_group_q8(float v, int lane, int8_t* q, float4* m) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, o));
  const float d = amax / 127.f;
  const float id = amax > 0.f ? 127.f / amax : 0.f;
  const int qi = __float2int_rn(v * id);
  q[lane] = static_cast<int8_t>(qi);
  int s = qi;  // sums over lanes 0..15 and 16..31 (xor offsets < 16 stay inside a half)
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(kFullMask, s, o);
  const int s_hi = __shfl_sync(kFullMask, s, 16);
  if (lane == 0) *m = make_float4(d, d * static_cast<float>(s), d * static_cast<float>(s_hi), 0.f);
}

// ggml's vectorized expf lane by lane (kernels/cpu/attention.cpp ggml_expf): the same fused
// multiply-adds in the same order, so results are bit-identical to the CPU's.
__device__ __forceinline__ float ggml_expf_dev(float x) {
  const float r = 0x1.8p23f;
  const float z = __fmaf_rn(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = __fmaf_rn(-n, 0x1.7f7d1cp-20f, __fmaf_rn(-n, 0x1.62e4p-1f, x));
  const uint32_t e = __float_as_uint(z) << 23;
  const float k = __uint_as_float(e + __float_as_uint(1.0f));
  const bool c = fabsf(n) > 126.0f;
  const float u = b * b;
  const float j = __fmaf_rn(__fmaf_rn(__fmaf_rn(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                      __fmaf_rn(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                            u, 0x1.ffffecp-1f * b);
  if (!c) return __fmaf_rn(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = __uint_as_float(g + 0x7f000000u);
  const float s2 = __uint_as_float(e - g);
  if (fabsf(n) > 192.0f) return s1 * s1;
  return __fmaf_rn(s2, j, s2) * s1;
}

// Loads N consecutive elements of type T (float or __half) as floats. The pointer must be
// aligned to N * sizeof(T) bytes (N * sizeof(T) in {4, 8, 16, 32}).
template <typename T, int N>
__device__ __forceinline__ void load_as_float(const T* p, float* out) {
  if constexpr (sizeof(T) == 4) {
    static_assert(N % 2 == 0, "float loads come in pairs or more");
    if constexpr (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(p + i);
        out[i] = v.x, out[i + 1] = v.y, out[i + 2] = v.z, out[i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; i += 2) {
        const float2 v = *reinterpret_cast<const float2*>(p + i);
        out[i] = v.x, out[i + 1] = v.y;
      }
    }
  } else {
    static_assert(N % 2 == 0, "half loads come in pairs or more");
    if constexpr (N % 8 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(p + i);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __half22float2(h[j]);
          out[i + 2 * j] = f.x, out[i + 2 * j + 1] = f.y;
        }
      }
    } else if constexpr (N % 4 == 0) {
#pragma unroll
      for (int i = 0; i < N; i += 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(p + i);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float2 f = __half22float2(h[j]);
          out[i + 2 * j] = f.x, out[i + 2 * j + 1] = f.y;
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; i += 2) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(p + i));
        out[i] = f.x, out[i + 1] = f.y;
      }
    }
  }
}

// Thread-block clusters (sm_90, PTX ISA 7.8): only for kernels launched with cluster dimensions,
// in code compiled for sm_90+ (the helpers are empty below that).

// Every thread of every block of the cluster arrives (release) and waits (acquire): shared
// memory written before the barrier by any block is visible after it to the whole cluster.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// The 4-byte value (float, int32_t, ...) at this block's shared address p, read from the shared
// memory of cluster block `rank`.
template <typename T>
__device__ __forceinline__ T cluster_load(const T* p, unsigned rank) {
  static_assert(sizeof(T) == 4, "4-byte values");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote, bits;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.b32 %0, [%1];" : "=r"(bits) : "r"(remote) : "memory");
  T v;
  memcpy(&v, &bits, 4);
  return v;
#else
  (void)p, (void)rank;
  return T{};
#endif
}

// Whether the current device has compute capability >= min_major and `kernel`'s code was built
// for it (ptxVersion >= min_ptx: not JIT-compiled from older PTX). Cached per device in the
// caller's pair of bit sets (bit = device ordinal); the first query of a device must happen
// outside graph capture, like the shared-memory opt-ins.
template <typename Kernel>
inline bool device_runs(Kernel* kernel, int min_major, int min_ptx, std::atomic<uint64_t>& known,
                        std::atomic<uint64_t>& ok) {
  int dev = 0;
  DUET_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(known.load(std::memory_order_acquire) & bit)) {
    int major = 0;
    DUET_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaFuncAttributes fa{};
    DUET_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    if (major >= min_major && fa.ptxVersion >= min_ptx) ok.fetch_or(bit, std::memory_order_release);
    known.fetch_or(bit, std::memory_order_release);
  }
  return ok.load(std::memory_order_acquire) & bit;
}

}  // namespace duet::cuda::detail
