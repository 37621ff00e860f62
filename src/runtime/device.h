// The CUDA device duet runs on: its capabilities (compute capability, memory, which number
// formats its tensor cores have) and the kernel path chosen for it. `DUET_KERNELS=generic` forces
// the generic path (only what sm_70 has: FP16 tensor cores, dp4a; no BF16, no FP8) on any card,
// which is how the V100 path is tested on newer GPUs. Host-side only; safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace duet::cuda {

enum class KernelPath { kNative, kGeneric };

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm = 0;  // major * 10 + minor: 70 V100, 80 A100, 89 L40S, 90 H100/H200
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  int n_sms = 0;
  double mem_bandwidth_gbs = 0;  // theoretical, from the memory clock and bus width
  bool has_bf16 = false;         // sm >= 80
  bool has_fp8 = false;          // sm >= 89
  // mma.sync with E4M3 operands is one FP8 tensor-core instruction (QMMA) on sm_89 and sm_120+;
  // on sm_90 and sm_100 ptxas lowers it to E4M3 -> F16 conversions and F16 HMMA (their FP8
  // tensor cores are reached through wgmma / tcgen05 only).
  bool has_fp8_mma_sync = false;
  KernelPath path = KernelPath::kNative;

  // What the kernels may use: the hardware's, less what the generic path forgoes.
  bool use_bf16() const { return has_bf16 && path == KernelPath::kNative; }
  bool use_fp8() const { return has_fp8 && path == KernelPath::kNative; }
};

// Number of visible CUDA devices (0 when there is no driver or no device).
int device_count();

// Queries device `ordinal` and reads DUET_KERNELS (native|generic; anything else is an error).
Result<DeviceInfo> query_device(int ordinal = 0);

const char* kernel_path_name(KernelPath p);

}  // namespace duet::cuda
