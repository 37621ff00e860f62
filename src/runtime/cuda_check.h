// Checked CUDA and cuBLAS calls: every runtime/library call in duet goes through these macros, and
// a failure aborts with the call, the file and line and the library's own message (a failed CUDA
// call is a broken invariant or a lost device, never bad user input).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define DUET_CUDA_CHECK(call)                                                                          \
  do {                                                                                                 \
    const cudaError_t duet_err_ = (call);                                                              \
    if (duet_err_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "duet: CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call,           \
                   cudaGetErrorString(duet_err_));                                                     \
      std::abort();                                                                                    \
    }                                                                                                  \
  } while (0)

#define DUET_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                 \
    const cublasStatus_t duet_st_ = (call);                                                            \
    if (duet_st_ != CUBLAS_STATUS_SUCCESS) {                                                           \
      std::fprintf(stderr, "duet: cuBLAS error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call,         \
                   cublasGetStatusString(duet_st_));                                                   \
      std::abort();                                                                                    \
    }                                                                                                  \
  } while (0)

// After a kernel launch: catches bad launch configurations at once (asynchronous faults surface
// at the next synchronising call, which is checked too).
#define DUET_CUDA_CHECK_LAUNCH() DUET_CUDA_CHECK(cudaGetLastError())
