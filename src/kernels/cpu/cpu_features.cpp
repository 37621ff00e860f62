// CPU feature detection (see cpu_features.h).
#include "kernels/cpu/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace duet {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

SimdLevel supported_level(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.avx2 && f.fma && f.f16c)
    return SimdLevel::kAvx512;
  if (f.avx2 && f.fma && f.f16c) return SimdLevel::kAvx2;
  return SimdLevel::kGeneric;
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  uint32_t a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const bool has_avx = c & (1u << 28);
  const bool has_fma = c & (1u << 12);
  const bool has_f16c = c & (1u << 29);
  if (!osxsave || !has_avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;      // SSE + AVX state
  const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;    // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_ok) return f;
  uint32_t a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  if (__get_cpuid_max(0, nullptr) >= 7) __cpuid_count(7, 0, a7, b7, c7, d7);
  uint32_t a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  if (__get_cpuid_max(0, nullptr) >= 7) __cpuid_count(7, 1, a71, b71, c71, d71);
  f.fma = has_fma;
  f.f16c = has_f16c;
  f.avx2 = b7 & (1u << 5);
  if (zmm_ok) {
    f.avx512f = b7 & (1u << 16);
    f.avx512dq = b7 & (1u << 17);
    f.avx512bw = b7 & (1u << 30);
    f.avx512vl = b7 & (1u << 31);
    f.avx512vnni = c7 & (1u << 11);
    f.avx512bf16 = a71 & (1u << 5);
  }
#endif
  f.level = supported_level(f);
  if (const char* env = std::getenv("DUET_CPU")) {
    SimdLevel cap = f.level;
    if (!std::strcmp(env, "generic")) cap = SimdLevel::kGeneric;
    else if (!std::strcmp(env, "avx2")) cap = SimdLevel::kAvx2;
    else if (!std::strcmp(env, "avx512")) cap = SimdLevel::kAvx512;
    if (cap < f.level) f.level = cap;
  }
  return f;
}

CpuFeatures& features_mut() {
  static CpuFeatures f = detect();
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() { return features_mut(); }

void set_simd_level(SimdLevel level) {
  CpuFeatures& f = features_mut();
  const SimdLevel max = supported_level(f);
  f.level = level < max ? level : max;
}

std::string simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kGeneric: return "generic";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "?";
}

}  // namespace duet
