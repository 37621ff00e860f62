// Applies a target attribute to every function that follows (until DUET_SIMD_TARGET_END), so a
// SIMD translation unit is compiled for its ISA without -march flags and the binary still runs
// on any x86-64: callers reach these functions only after cpu_features() said the ISA is usable.
// Include system headers before DUET_SIMD_TARGET_BEGIN.
#pragma once

#define DUET_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define DUET_SIMD_TARGET_BEGIN(isa) \
  DUET_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define DUET_SIMD_TARGET_END DUET_PRAGMA(clang attribute pop)
#else
#define DUET_SIMD_TARGET_BEGIN(isa) DUET_PRAGMA(GCC push_options) DUET_PRAGMA(GCC target(isa))
#define DUET_SIMD_TARGET_END DUET_PRAGMA(GCC pop_options)
#endif

#define DUET_AVX2_ISA "avx2,fma,f16c"
#define DUET_AVX512_ISA "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
