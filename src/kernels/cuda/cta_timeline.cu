// Host side of the per-CTA timelines (kernels/cuda/cta_timeline.h); empty unless the build
// defines DUET_CTA_TIMELINE.
#ifdef DUET_CTA_TIMELINE
#include "kernels/cuda/cta_timeline.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/log.h"
#include "runtime/cuda_check.h"

namespace duet::cuda::kernels {
namespace {
unsigned long long* g_buf = nullptr;  // bound by cta_timeline_start, null otherwise
unsigned long long g_cap = 0;
std::string g_out;  // DUET_CTA_TIMELINE_OUT when g_buf was bound
}  // namespace

void cta_timeline_start() {
  const char* out = std::getenv("DUET_CTA_TIMELINE_OUT");
  if (out == nullptr || *out == 0 || g_buf != nullptr) return;
  g_out = out;
  const char* m = std::getenv("DUET_CTA_TIMELINE_MAX");
  g_cap = m != nullptr && std::atoll(m) > 0 ? static_cast<unsigned long long>(std::atoll(m)) : 4ull << 20;
  DUET_CUDA_CHECK(cudaMalloc(&g_buf, (1 + 6 * g_cap) * sizeof(unsigned long long)));
  DUET_CUDA_CHECK(cudaMemset(g_buf, 0, sizeof(unsigned long long)));
  cta_timeline_bind_matvec_mma(g_buf, g_cap);
  cta_timeline_bind_quant_mma(g_buf, g_cap);
}

void cta_timeline_dump() {
  if (g_buf == nullptr) return;
  const char* out = g_out.c_str();
  DUET_CUDA_CHECK(cudaDeviceSynchronize());
  unsigned long long count = 0;
  DUET_CUDA_CHECK(cudaMemcpy(&count, g_buf, sizeof(count), cudaMemcpyDeviceToHost));
  const unsigned long long n = count < g_cap ? count : g_cap;
  std::vector<unsigned long long> r(6 * n);
  if (n > 0)
    DUET_CUDA_CHECK(cudaMemcpy(r.data(), g_buf + 1, r.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::FILE* f = std::fopen(out, "w");
  if (f == nullptr) {
    DUET_LOG_ERROR("cta timeline: cannot write %s", out);
  } else {
    std::fprintf(f, "w,block,smid,t_start,t_wait,t_end,grid,rows\n");
    for (unsigned long long i = 0; i < n; ++i) {
      const unsigned long long* p = r.data() + 6 * i;
      std::fprintf(f, "%llx,%llu,%llu,%llu,%llu,%llu,%llu,%llu\n", p[0], p[1] & 0xffffffffull, p[1] >> 32, p[2], p[3],
                   p[4], p[5] & 0xffffffffull, p[5] >> 32);
    }
    std::fclose(f);
    DUET_LOG_INFO("cta timeline: %llu records (%llu dropped) to %s", n, count - n, out);
  }
  DUET_CUDA_CHECK(cudaFree(g_buf));
  g_buf = nullptr;
}

}  // namespace duet::cuda::kernels
#endif
