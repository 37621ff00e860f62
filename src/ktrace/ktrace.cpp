// duet_ktrace: a CUDA injection library that records every kernel's GPU start and end time with
// CUPTI's activity API and writes them as CSV, so that a CUDA-graph replay (which CUDA events
// cannot look inside) can be taken apart kernel by kernel, overlaps of programmatic launches
// included. Nothing in duet links it: the CUDA driver loads it into any CUDA program when
//   CUDA_INJECTION64_PATH=/path/to/libduet_ktrace.so DUET_KTRACE_OUT=trace.csv duet bench ...
// is set, and calls InitializeInjection() at the first CUDA call. scripts/ktrace_report.py turns
// the CSV into a table per kernel kind. Columns: start_ns, end_ns, graph_id, graph_node_id,
// correlation_id, stream_id, grid, block, dynamic shared bytes, mangled name. Records are
// appended as CUPTI hands over its buffers, and the rest are flushed at exit.
// DUET_KTRACE_MAX (default 2,000,000) caps the records written.
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
std::mutex g_mu;
FILE* g_out = nullptr;
std::atomic<long long> g_left{2000000};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* rec = nullptr;
  while (g_out != nullptr && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    if (g_left.fetch_sub(1) <= 0) break;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    std::fprintf(g_out, "%llu,%llu,%u,%llu,%u,%u,%dx%dx%d,%dx%dx%d,%d,%s\n",
                 static_cast<unsigned long long>(k->start), static_cast<unsigned long long>(k->end), k->graphId,
                 static_cast<unsigned long long>(k->graphNodeId), k->correlationId, k->streamId, k->gridX,
                 k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ, k->dynamicSharedMemory,
                 k->name != nullptr ? k->name : "?");
  }
  std::free(buffer);
}

void flush_at_exit() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_out != nullptr) {
    std::fclose(g_out);
    g_out = nullptr;
  }
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("DUET_KTRACE_OUT");
  g_out = std::fopen(path != nullptr && *path != 0 ? path : "ktrace.csv", "w");
  if (g_out == nullptr) {
    std::fprintf(stderr, "duet_ktrace: cannot open %s\n", path != nullptr ? path : "ktrace.csv");
    return 0;
  }
  if (const char* m = std::getenv("DUET_KTRACE_MAX"); m != nullptr && *m != 0) g_left = std::atoll(m);
  std::fprintf(g_out, "start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,dyn_smem,name\n");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "duet_ktrace: CUPTI activity tracing could not be enabled\n");
    return 0;
  }
  std::atexit(flush_at_exit);
  return 1;
}
