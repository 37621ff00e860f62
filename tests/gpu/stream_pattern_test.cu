// How fast the GPU streams a weight matrix under the access shapes a decode kernel may give its
// warps (a diagnostic for matvec_mma.cu's streaming kernel, which reads FP8 gate/up weights at
// ~3.5 TB/s where a float kernel streams BF16 at ~4.45). Each shape reads every 16-byte piece of
// the matrix exactly once with cp.async into a per-thread ring in shared memory (the streaming
// kernel's copy engine: persistent CTAs of 8 warps, 2 an SM, D slots of four 16-byte copies a
// thread) and XORs what it read, so the test asserts that the shape covers the matrix exactly once
// (the XOR of all pieces, computed on the host) and prints the bandwidth (never fails on speed).
//
// A shape: a warp's job is RPJ rows x 2048 / RPJ bytes (four copies a lane); one copy instruction
// covers IR rows x 512 / IR bytes. The jobs are ordered row group by row group (RPJ rows), column
// job by column job, and a CTA takes an equal share of the job list, its warps the jobs round-robin.
// The streaming kernel's shape today is (32, 8): 32 rows x 64 bytes a job, 8 rows x 64 bytes a
// copy. "linear" is the matrix read as 2048-byte rows, one row a job, 512 bytes a copy (memcpy's
// order). L2F: the copies' L2 prefetch-size hint in bytes (0: none).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "graph_timing.h"

namespace duet::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

template <int RPJ, int IR, int D, int L2F>
__global__ void __launch_bounds__(kThreads) stream_shape_kernel(const uint8_t* w, int64_t n_rows, int64_t row_bytes,
                                                                unsigned* xor_out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ uint4 ring[];  // [D][4][kThreads], thread-private slots
  constexpr int kJobBytes = 2048 / RPJ;  // bytes of a row in one job
  constexpr int kLanesPerRow = 32 / IR;  // lanes of one copy instruction on one row
  constexpr int kTileRows = RPJ / IR;    // copy tiles down a job
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t col_jobs = row_bytes / kJobBytes;
  const int64_t n_jobs = n_rows / RPJ * col_jobs;
  const int64_t G = gridDim.x, b = blockIdx.x;
  const int64_t j0 = b * n_jobs / G, j1 = (b + 1) * n_jobs / G;
  int64_t cp_job = j0 + warp;
  // The lane's four (row, byte) offsets inside a job.
  int64_t off[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int tr = i % kTileRows, tc = i / kTileRows;
    const int r = tr * IR + lane / kLanesPerRow;
    const int piece = tc * kLanesPerRow + lane % kLanesPerRow;
    off[i] = r * row_bytes + piece * 16;
  }
  auto copy_next = [&](int slot) {
    if (cp_job < j1) {
      const int64_t base = (cp_job / col_jobs) * RPJ * row_bytes + (cp_job % col_jobs) * kJobBytes;
#pragma unroll
      for (int i = 0; i < 4; ++i) detail::cp_async16_l2<L2F>(&ring[(slot * 4 + i) * kThreads + tid], w + base + off[i], 16);
      cp_job += kWarps;
    }
    detail::cp_async_commit();
  };
#pragma unroll
  for (int d = 0; d < D - 1; ++d) copy_next(d);
  uint4 acc = make_uint4(0, 0, 0, 0);
  int slot = 0;
  for (int64_t job = j0 + warp; job < j1; job += kWarps) {
    detail::cp_async_wait<D - 2>();
    uint4 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = ring[(slot * 4 + i) * kThreads + tid];
    copy_next(slot == 0 ? D - 1 : slot - 1);
    slot = slot == D - 1 ? 0 : slot + 1;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc.x ^= v[i].x;
      acc.y ^= v[i].y;
      acc.z ^= v[i].z;
      acc.w ^= v[i].w;
    }
  }
  detail::cp_async_wait<0>();
  atomicXor(xor_out + 0, acc.x);
  atomicXor(xor_out + 1, acc.y);
  atomicXor(xor_out + 2, acc.z);
  atomicXor(xor_out + 3, acc.w);
#else
  __trap();
#endif
}

struct Shape {
  const char* name;
  void (*launch)(const uint8_t*, int64_t, int64_t, unsigned*, cudaStream_t);
  bool linear;
};

template <int RPJ, int IR, int D, int L2F>
void launch_shape(const uint8_t* w, int64_t n_rows, int64_t row_bytes, unsigned* xor_out, cudaStream_t s) {
  constexpr size_t kSmem = size_t{D} * 4 * kThreads * 16;
  const auto kernel = stream_shape_kernel<RPJ, IR, D, L2F>;
  const int per_sm = detail::opt_in_ctas_per_sm(reinterpret_cast<const void*>(kernel), kThreads, kSmem);
  kernel<<<per_sm * detail::current_sm_count(), kThreads, kSmem, s>>>(w, n_rows, row_bytes, xor_out);
  DUET_CUDA_CHECK(cudaGetLastError());
}

const Shape kShapes[] = {
    {"32x64 (8x64 copies), today's", launch_shape<32, 8, 4, 0>, false},
    {"32x64, L2::256B", launch_shape<32, 8, 4, 256>, false},
    {"32x64, 8 slots", launch_shape<32, 8, 8, 0>, false},
    {"16x128 (8x64 copies)", launch_shape<16, 8, 4, 0>, false},
    {"16x128 (4x128 copies)", launch_shape<16, 4, 4, 0>, false},
    {"16x128 (4x128), L2::256B", launch_shape<16, 4, 4, 256>, false},
    {"16x128 (4x128), 6 slots", launch_shape<16, 4, 6, 0>, false},
    {"16x128 (4x128), 8 slots", launch_shape<16, 4, 8, 0>, false},
    {"32x64, 6 slots", launch_shape<32, 8, 6, 0>, false},
    {"32x64, 6 slots, L2::128B", launch_shape<32, 8, 6, 128>, false},
    {"32x64, 6 slots, L2::256B", launch_shape<32, 8, 6, 256>, false},
    {"32x64, 5 slots, L2::128B", launch_shape<32, 8, 5, 128>, false},
    {"32x64, L2::128B", launch_shape<32, 8, 4, 128>, false},
    {"8x256 (2x256 copies)", launch_shape<8, 2, 4, 0>, false},
    {"4x512 (1x512 copies)", launch_shape<4, 1, 4, 0>, false},
    {"linear (512-byte copies)", launch_shape<1, 1, 4, 0>, true},
    {"linear, 8 slots", launch_shape<1, 1, 8, 0>, true},
    {"linear, 6 slots", launch_shape<1, 1, 6, 0>, true},
    {"linear, 6 slots, L2::256B", launch_shape<1, 1, 6, 256>, true},
};

TEST(StreamPatternBench, EveryShapeReadsEachPieceOnce) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) GTEST_FAIL() << "no CUDA device";
  auto dev_r = query_device(0);
  ASSERT_TRUE(dev_r.is_ok());
  if (dev_r->sm < 80) GTEST_FAIL() << "cp.async needs sm_80+; this test runs on such a card";
  cudaStream_t s;
  DUET_CUDA_CHECK(cudaStreamCreate(&s));
  unsigned* xor_d = nullptr;
  DUET_CUDA_CHECK(cudaMalloc(&xor_d, 16));
  // qwen2-7b's FP8 gate/up (one launch), down and output products.
  const std::pair<int64_t, int64_t> shapes[] = {{37888, 3584}, {3584, 18944}, {152064, 3584}};
  std::printf("matrix reads by access shape (GB/s; %% of 4300; each figure the mean of a graph of 20 launches\n"
              "over copies that together exceed the L2, best of 3 replays)\n");
  for (auto [rows, row_bytes] : shapes) {
    const size_t bytes = static_cast<size_t>(rows * row_bytes);
    const size_t n_copies = std::clamp<size_t>((size_t{640} << 20) / bytes + 1, 2, 16);
    std::vector<uint8_t> host(bytes);
    std::mt19937_64 rng(static_cast<uint64_t>(rows));
    for (size_t i = 0; i < bytes; i += 8) {
      const uint64_t v = rng();
      std::memcpy(host.data() + i, &v, 8);
    }
    unsigned want[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < bytes; i += 16)
      for (int k = 0; k < 4; ++k) {
        unsigned u;
        std::memcpy(&u, host.data() + i + 4 * k, 4);
        want[k] ^= u;
      }
    std::vector<uint8_t*> copies(n_copies);
    for (auto& c : copies) {
      DUET_CUDA_CHECK(cudaMalloc(&c, bytes));
      DUET_CUDA_CHECK(cudaMemcpy(c, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    for (const Shape& sh : kShapes) {
      const int64_t r = sh.linear ? static_cast<int64_t>(bytes / 2048) : rows;
      const int64_t rb = sh.linear ? 2048 : row_bytes;
      // Exactly once: one launch's XOR equals the host's.
      DUET_CUDA_CHECK(cudaMemset(xor_d, 0, 16));
      sh.launch(copies[0], r, rb, xor_d, s);
      unsigned got[4];
      DUET_CUDA_CHECK(cudaMemcpyAsync(got, xor_d, 16, cudaMemcpyDeviceToHost, s));
      DUET_CUDA_CHECK(cudaStreamSynchronize(s));
      for (int k = 0; k < 4; ++k) EXPECT_EQ(got[k], want[k]) << sh.name << " " << rows << "x" << row_bytes;
      // Timing: 20 launches over the copies in one graph, best of 3 replays.
      const double us = 1e6 * graph_seconds_per_call(
                                  s, 20, [&](int i) { sh.launch(copies[i % n_copies], r, rb, xor_d, s); }, 3);
      const double gbs = bytes / (us * 1e3);
      std::printf("  %6lld x %-6lld %-32s %8.1f us  %6.0f GB/s  %5.1f%%\n", static_cast<long long>(rows),
                  static_cast<long long>(row_bytes), sh.name, us, gbs, 100 * gbs / 4300);
    }
    for (auto* c : copies) cudaFree(c);
  }
  cudaFree(xor_d);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace duet::cuda
