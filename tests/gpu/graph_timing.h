// Benchmark timing shared by the GPU tests: the GPU time of a sequence of launches captured in one
// CUDA graph (so the figure is the GPU's, not the CPU's launch rate). Test code only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/cuda_check.h"

namespace duet::cuda {

// Mean seconds per call of `iters` calls issue(i), i = 0 .. iters - 1, captured in one graph on s:
// one warm-up replay, then the best of `replays` timed replays.
template <typename F>
double graph_seconds_per_call(cudaStream_t s, int iters, F issue, int replays = 1) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DUET_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < iters; ++i) issue(i);
  DUET_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  DUET_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  DUET_CUDA_CHECK(cudaGraphDestroy(graph));
  cudaEvent_t e0, e1;
  DUET_CUDA_CHECK(cudaEventCreate(&e0));
  DUET_CUDA_CHECK(cudaEventCreate(&e1));
  DUET_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up
  float best = 0;
  for (int rep = 0; rep < replays; ++rep) {
    DUET_CUDA_CHECK(cudaEventRecord(e0, s));
    DUET_CUDA_CHECK(cudaGraphLaunch(exec, s));
    DUET_CUDA_CHECK(cudaEventRecord(e1, s));
    DUET_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    DUET_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    best = rep == 0 ? ms : std::min(best, ms);
  }
  DUET_CUDA_CHECK(cudaGraphExecDestroy(exec));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best / 1e3 / iters;
}

}  // namespace duet::cuda
