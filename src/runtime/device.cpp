// Device queries and the DUET_KERNELS switch (see device.h).
#include "runtime/device.h"

#include <cstdlib>
#include <cstring>

#include "runtime/cuda_check.h"

namespace duet::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

const char* kernel_path_name(KernelPath p) { return p == KernelPath::kGeneric ? "generic" : "native"; }

Result<DeviceInfo> query_device(int ordinal) {
  const int n = device_count();
  if (ordinal < 0 || ordinal >= n)
    return invalid_argument("CUDA device " + std::to_string(ordinal) + " not present (" + std::to_string(n) + " visible)");
  DeviceInfo d;
  d.ordinal = ordinal;
  cudaDeviceProp p{};
  DUET_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  d.name = p.name;
  d.sm = p.major * 10 + p.minor;
  d.total_bytes = p.totalGlobalMem;
  d.n_sms = p.multiProcessorCount;
  int mem_clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, ordinal);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, ordinal);
  cudaGetLastError();
  d.mem_bandwidth_gbs = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // DDR: two transfers a clock
  DUET_CUDA_CHECK(cudaSetDevice(ordinal));
  size_t free_b = 0, total_b = 0;
  DUET_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  d.free_bytes = free_b;
  d.has_bf16 = d.sm >= 80;
  d.has_fp8 = d.sm >= 89;
  d.has_fp8_mma_sync = d.sm == 89 || d.sm >= 120;
  if (const char* k = std::getenv("DUET_KERNELS"); k && *k) {
    if (std::strcmp(k, "generic") == 0) d.path = KernelPath::kGeneric;
    else if (std::strcmp(k, "native") == 0 || std::strcmp(k, "auto") == 0) d.path = KernelPath::kNative;
    else return invalid_argument(std::string("DUET_KERNELS='") + k + "': expected native or generic");
  }
  if (d.sm < 70) return invalid_argument("GPU " + d.name + " is sm_" + std::to_string(d.sm) + "; duet needs sm_70 or newer");
  return d;
}

}  // namespace duet::cuda
