// Per-CTA timelines of the decode products, a diagnostic build only (cmake -DDUET_CTA_TIMELINE=ON;
// without it this header defines nothing and the kernels' code is unchanged). The kernel tracer
// (src/ktrace) sees a kernel's first start and last end; this sees each CTA: when it started (was
// resident), when its programmatic-launch wait returned, and when it ended, on which SM. It
// answers what the graph-replay traces leave open, e.g. why the one-token o product ends ~8 us
// after attention's merge although its CTAs start during attention (perf.md sessions 20 and 26).
// Each instrumented kernel keeps t_start / t_wait in thread 0 and calls cta_record at its end:
// after a barrier, thread 0 appends (w, block | smid << 32, t_start, t_wait, t_end, grid | rows
// << 32) as six uint64 to the buffer bound by cta_timeline_start (kernels/cuda/cta_timeline.h),
// whose first word counts the records (appends past its capacity are dropped). Times are
// %globaltimer nanoseconds. Without -rdc each translation unit has its own buffer pointer, bound
// by its own cta_timeline_bind_* function.
#pragma once

#ifdef DUET_CTA_TIMELINE
#include <cstdint>

namespace duet::cuda::detail {

static __device__ unsigned long long* g_cta_timeline = nullptr;  // [0]: count; then 6 words a record
static __device__ unsigned long long g_cta_timeline_cap = 0;

__device__ __forceinline__ unsigned long long cta_clock() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned cta_smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// Every thread of the CTA calls it (it has a barrier); thread 0 writes.
__device__ __forceinline__ void cta_record(const void* w, long long rows, unsigned long long t_start,
                                           unsigned long long t_wait) {
  __syncthreads();
  if (threadIdx.x != 0 || g_cta_timeline == nullptr) return;
  const unsigned long long t_end = cta_clock();
  const unsigned long long i = atomicAdd(g_cta_timeline, 1ull);
  if (i >= g_cta_timeline_cap) return;
  unsigned long long* r = g_cta_timeline + 1 + 6 * i;
  r[0] = reinterpret_cast<unsigned long long>(w);
  r[1] = blockIdx.x | (static_cast<unsigned long long>(cta_smid()) << 32);
  r[2] = t_start;
  r[3] = t_wait;
  r[4] = t_end;
  r[5] = gridDim.x | (static_cast<unsigned long long>(rows & 0xffffffff) << 32);
}

}  // namespace duet::cuda::detail

// Binds this translation unit's buffer pointer (host code; one definition per instrumented .cu).
#define DUET_CTA_TIMELINE_BIND(name)                                                                   \
  void name(unsigned long long* buf, unsigned long long cap) {                                         \
    DUET_CUDA_CHECK(cudaMemcpyToSymbol(detail::g_cta_timeline, &buf, sizeof(buf)));                    \
    DUET_CUDA_CHECK(cudaMemcpyToSymbol(detail::g_cta_timeline_cap, &cap, sizeof(cap)));                \
  }
#endif
