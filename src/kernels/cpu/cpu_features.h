// Runtime CPU feature detection for the SIMD dispatch of the CPU kernels. A feature counts only
// when the CPU has it (cpuid) and the OS saves its registers (XCR0 via xgetbv): AVX needs the
// YMM state, AVX-512 the opmask/ZMM state too. Detected once, read from any thread.
// DUET_CPU=generic|avx2|avx512 in the environment caps the level (tests, benchmarks).
#pragma once

#include <string>

namespace duet {

// kAvx512 means AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Zen 4 and later); older AVX-512 parts use
// the AVX2 kernels.
enum class SimdLevel { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512dq = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  SimdLevel level = SimdLevel::kGeneric;  // highest usable level (after DUET_CPU)
};

const CpuFeatures& cpu_features();
// Overrides the level for the rest of the process (tests compare levels); clamped to what the
// machine supports. Not thread-safe: call before kernels run.
void set_simd_level(SimdLevel level);
std::string simd_level_name(SimdLevel level);

}  // namespace duet
