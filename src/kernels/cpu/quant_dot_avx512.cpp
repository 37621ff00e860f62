// AVX-512 (F/BW/VL/DQ + VNNI) level of the dot products (see quant_dot.h): the multi-row kernels
// of quant_dot_x86.inc compiled with eight activation rows per pass (AVX-512 VL gives 32 YMM
// registers) and dpbusd for the u8 x s8 sums. Single-row dot products have no AVX-512 variant
// (decode is memory-bound): vec_dot_fn() falls back to the AVX2 level, whose results these
// kernels reproduce bit for bit. Pure functions, any thread.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/simd_target.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

DUET_SIMD_TARGET_BEGIN(DUET_AVX512_ISA)

namespace duet {
namespace {

#define DUET_X86_PASS_ROWS 8
#define DUET_X86_VNNI 1
#include "kernels/cpu/quant_dot_x86.inc"

}  // namespace

namespace detail {

VecDotFn vec_dot_avx512(DType, DotVariant) { return nullptr; }
VecDotMultiFn vec_dot_multi_avx512(DType w, DotVariant v) { return multi_kernel(w, v); }

}  // namespace detail
}  // namespace duet

DUET_SIMD_TARGET_END
