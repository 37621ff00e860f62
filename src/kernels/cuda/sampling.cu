// Greedy argmax and the GPU sampler (launch_argmax, launch_sample; contracts and the semantics
// against the CPU Sampler in ops.h). One block of 1024 threads per logits row; no scratch memory:
// top-k and top-p cuts are found by bisection over the order-preserving integer keys of the
// scaled logits instead of a sort. On sm_90 the argmax splits each row over a cluster of 8 blocks
// instead (argmax_cluster_kernel: one block's pass over 152k logits cost ~23 us of a one-sequence
// decode step). Runs on the caller's stream; no allocation, no sync.
#include <atomic>

#include "base/env.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace duet::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

struct ValIdx {
  float v;
  int32_t i;
};

// a before b: larger value, then lower index (the CPU's argmax keeps the first maximum).
__device__ __forceinline__ bool better(ValIdx a, ValIdx b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }

__device__ __forceinline__ ValIdx warp_best(ValIdx a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ValIdx b{__shfl_xor_sync(detail::kFullMask, a.v, o), __shfl_xor_sync(detail::kFullMask, a.i, o)};
    if (better(b, a)) a = b;
  }
  return a;
}

// Argmax of row[0, vocab) over the block; every thread gets the result.
__device__ ValIdx block_argmax(const float* row, int64_t vocab, ValIdx* red) {
  ValIdx best{-INFINITY, 0x7fffffff};
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const ValIdx c{row[i], static_cast<int32_t>(i)};
    if (better(c, best) || best.i == 0x7fffffff) best = c;
  }
  best = warp_best(best);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = best;
  __syncthreads();
  best = red[threadIdx.x & 31];  // kWarps == 32
  return warp_best(best);
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  return v;
}

__device__ double block_sum_d(double v, double* red) {
  v = warp_sum_d(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  return warp_sum_d(red[threadIdx.x & 31]);
}

// Monotone map float -> uint32 (a < b  <=>  key(a) < key(b) for non-NaN floats).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Block per row; logits: n_rows x vocab float; out: n_rows int32. Memory-bound: one read of the row.
__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t vocab, int32_t* out) {
  __shared__ ValIdx red[kWarps];
  const ValIdx b = block_argmax(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab, red);
  if (threadIdx.x == 0) out[blockIdx.x] = b.i;
}

constexpr int kArgmaxCluster = 8;  // blocks per row (one cluster; the portable cluster size)
constexpr int kArgmaxThreads = 512;

// Argmax of a row split over a thread-block cluster (sm_90; grid n_rows x 8 blocks along x,
// clusters of (8, 1, 1), so cluster rank = blockIdx.x % 8 and row = blockIdx.x / 8). Block c takes
// the c-th slice of ceil(vocab / 8) rounded up to 4 logits (float4 loads, 4 in flight a thread,
// where the row is 16-byte aligned), reduces it with better() like block_argmax, and block 0 of
// the cluster reduces the 8 results through distributed shared memory. better() orders (value,
// index) pairs totally, so the result is the first maximum however the row is cut.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_cluster_kernel(const float* logits, int64_t vocab,
                                                                        int32_t* out) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
  __trap();  // never launched below sm_90 (use_argmax_cluster)
#else
  __shared__ ValIdx red[kArgmaxThreads / 32];
  __shared__ float block_v;
  __shared__ int32_t block_i;
  const int64_t r = blockIdx.x / kArgmaxCluster;
  const int c = static_cast<int>(blockIdx.x % kArgmaxCluster);
  const float* row = logits + r * vocab;
  const int64_t slice = ((vocab + kArgmaxCluster - 1) / kArgmaxCluster + 3) & ~int64_t{3};
  const int64_t b = min(vocab, c * slice), e = min(vocab, b + slice);
  ValIdx best{-INFINITY, 0x7fffffff};
  auto take = [&](float v, int64_t i) {
    const ValIdx x{v, static_cast<int32_t>(i)};
    if (better(x, best) || best.i == 0x7fffffff) best = x;
  };
  int64_t tail = b;
  if ((reinterpret_cast<uintptr_t>(row) & 15) == 0) {  // b is a multiple of 4: row + b is aligned too
    const int64_t e4 = b + ((e - b) & ~int64_t{3});
#pragma unroll 4
    for (int64_t i = b + 4 * threadIdx.x; i < e4; i += 4 * kArgmaxThreads) {
      const float4 v = *reinterpret_cast<const float4*>(row + i);
      take(v.x, i), take(v.y, i + 1), take(v.z, i + 2), take(v.w, i + 3);
    }
    tail = e4;
  }
  for (int64_t i = tail + threadIdx.x; i < e; i += kArgmaxThreads) take(row[i], i);
  best = warp_best(best);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = threadIdx.x < kArgmaxThreads / 32 ? red[threadIdx.x] : ValIdx{-INFINITY, 0x7fffffff};
    best = warp_best(best);
    if (threadIdx.x == 0) block_v = best.v, block_i = best.i;
  }
  detail::cluster_sync();
  if (c == 0 && threadIdx.x < 32) {
    best = ValIdx{-INFINITY, 0x7fffffff};
    if (threadIdx.x < kArgmaxCluster)
      best = ValIdx{detail::cluster_load(&block_v, threadIdx.x), detail::cluster_load(&block_i, threadIdx.x)};
    best = warp_best(best);
    if (threadIdx.x == 0) out[r] = best.i;
  }
  detail::cluster_sync();  // block 0 has read the others' results
#endif
}

std::atomic<int> g_argmax_override{static_cast<int>(ArgmaxPath::kAuto)};

// The cluster argmax where the device runs it (sm_90 code), unless set_argmax_path forced the
// block kernel or DUET_ARGMAX_CLUSTER=0 (read once per process; A/B knob). The first query of a
// device happens on its first (eager) launch.
bool use_argmax_cluster() {
  static const bool env_on = env_flag("DUET_ARGMAX_CLUSTER", true);
  if (static_cast<ArgmaxPath>(g_argmax_override.load(std::memory_order_relaxed)) == ArgmaxPath::kBlock || !env_on)
    return false;
  static std::atomic<uint64_t> known{0}, ok{0};
  return detail::device_runs(argmax_cluster_kernel, 9, 90, known, ok);
}

// Block per row: temperature -> top-k -> top-p -> draw (see ops.h). Passes over the row: 1 (max),
// + 32 counting passes for top-k, + 1 for the mass, + up to 32 exp-summing passes for top-p,
// + 2 for the draw; the row stays in L2 between passes.
__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int64_t vocab, const SamplingRow* rows,
                                                          int32_t* out) {
  __shared__ ValIdx red[kWarps];
  __shared__ double redd[kWarps];
  __shared__ double scan[kWarps];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const SamplingRow p = rows[blockIdx.x];
  const ValIdx best = block_argmax(row, vocab, red);
  if (p.temperature <= 0.0f || p.top_k == 1) {
    if (threadIdx.x == 0) out[blockIdx.x] = best.i;
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  const float zmax = best.v * inv_t;  // scaling by a positive number keeps the order
  const uint32_t kmax = order_key(zmax);

  // Top-k: the largest threshold key T with count(key >= T) >= k (the k-th largest value).
  uint32_t t_lo = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    uint32_t lo = 0, hi = kmax;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      double c = 0;
      for (int64_t i = threadIdx.x; i < vocab; i += kThreads) c += order_key(row[i] * inv_t) >= mid ? 1.0 : 0.0;
      if (block_sum_d(c, redd) >= static_cast<double>(p.top_k)) lo = mid;
      else hi = mid - 1;
    }
    t_lo = lo;
  }
  auto mass_above = [&](uint32_t t) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float z = row[i] * inv_t;
      if (order_key(z) >= t) s += expf(z - zmax);
    }
    return block_sum_d(s, redd);
  };
  // Top-p: the largest threshold whose kept mass still reaches top_p of the top-k mass.
  if (p.top_p < 1.0f) {
    const double need = static_cast<double>(p.top_p) * mass_above(t_lo);
    uint32_t lo = t_lo, hi = kmax;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      if (mass_above(mid) >= need) lo = mid;
      else hi = mid - 1;
    }
    t_lo = lo;
  }

  // Draw: walk the kept tokens in index order; thread j owns the contiguous chunk j.
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  const int64_t c0 = threadIdx.x * chunk, c1 = c0 + chunk < vocab ? c0 + chunk : vocab;
  double local = 0;
  for (int64_t i = c0; i < c1; ++i) {
    const float z = row[i] * inv_t;
    if (order_key(z) >= t_lo) local += expf(z - zmax);
  }
  // Exclusive prefix over threads: inclusive warp scan, then a scan of the warp totals.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(detail::kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) scan[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    double w = scan[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(detail::kFullMask, w, o);
      if (lane >= o) w += y;
    }
    scan[lane] = w;  // inclusive totals per warp
  }
  __syncthreads();
  const double total = scan[kWarps - 1];
  const double before = (warp > 0 ? scan[warp - 1] : 0.0) + (incl - local);
  const uint64_t h = splitmix64(p.seed ^ splitmix64(p.counter + 0x632be59bd9b4e019ull));
  const double target = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0) * total;
  if (threadIdx.x == 0) out[blockIdx.x] = best.i;  // kept always; the fallback if rounding leaves target unmatched
  __syncthreads();
  if (local > 0 && target >= before && target < before + local) {
    double acc = before;
    int32_t pick = -1;
    for (int64_t i = c0; i < c1; ++i) {
      const float z = row[i] * inv_t;
      if (order_key(z) < t_lo) continue;
      acc += expf(z - zmax);
      pick = static_cast<int32_t>(i);
      if (target < acc) break;
    }
    if (pick >= 0) out[blockIdx.x] = pick;
  }
}

}  // namespace

void launch_argmax(const float* logits, int n_rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (use_argmax_cluster()) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(n_rows) * kArgmaxCluster);
    cfg.blockDim = dim3(kArgmaxThreads);
    cfg.stream = stream;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kArgmaxCluster;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    DUET_CUDA_CHECK(cudaLaunchKernelEx(&cfg, argmax_cluster_kernel, logits, vocab, out));
  } else {
    argmax_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(logits, vocab, out);
  }
  DUET_CUDA_CHECK_LAUNCH();
}

void set_argmax_path(ArgmaxPath path) { g_argmax_override.store(static_cast<int>(path), std::memory_order_relaxed); }

ArgmaxPath argmax_path() { return use_argmax_cluster() ? ArgmaxPath::kCluster : ArgmaxPath::kBlock; }

void launch_sample(const float* logits, int n_rows, int64_t vocab, const SamplingRow* rows, int32_t* out,
                   cudaStream_t stream) {
  if (n_rows <= 0) return;
  sample_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(logits, vocab, rows, out);
  DUET_CUDA_CHECK_LAUNCH();
}

}  // namespace duet::cuda
