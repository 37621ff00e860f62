// Dot products of one weight row (any DType, read straight from its blocks) with one activation
// row, the way ggml does them: the activation row is first quantized to the weight type's
// "activation type" (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, F16 for
// F16, BF16 for BF16, F32 for F32 and FP8), then integer (or half) dot products run block by
// block. Variants: scalar integer code (the reference), AVX2 and AVX-512 (chosen at runtime by
// cpu_features()), and a dequantize_row() fallback for checks. All functions are pure; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "tensor/dtype.h"

namespace duet {

// The type an activation row is quantized to before dotting with a weight row of type w.
DType activation_type(DType w);
bool has_vec_dot(DType w);  // false for types duet cannot multiply (integers, Q8_K weights)

// Quantizes one activation row for weights of type w (x: n floats; y: row_bytes(act, n) bytes).
// Q8_0/Q8_1 round half to even and scale by 127/amax like ggml's x86 code; Q8_K is ggml's
// reference quantizer. n must be a multiple of the activation block size.
void quantize_activation(DType w, const float* x, void* y, int64_t n);

// Which of llama.cpp's CPU kernels' summation order a dot product reproduces (bit for bit on an
// AVX2 machine). The integer block sums are the same in all of them; they differ in how the float
// partial sums are grouped:
//   kVecDot      ggml_vec_dot_* (decode, and all quant types not listed below)
//   kTinyBlas    llamafile's tinyBLAS, used for F32/F16/BF16 weights when a batch has >= 2 rows
//   kRepackGemv  Q4_K weights repacked 8 rows at a time (x86 AVX2), single activation rows
//   kRepackGemm  the same weights, activation rows in groups of four
//   kTiled       ggml's tiled K-quant matmul (Q2_K..Q6_K weights that are not repacked, batches
//                of >= 8 rows): per super-block fma(d_w * isum, d_a, acc)
// Types without a distinct kernel for a variant use kVecDot's.
enum class DotVariant { kVecDot, kTinyBlas, kRepackGemv, kRepackGemm, kTiled };

// y = dot(w_row, a_row) for n elements. a_row is an activation row of activation_type(w).
using VecDotFn = float (*)(int64_t n, const void* w_row, const void* a_row);
VecDotFn vec_dot_fn(DType w, DotVariant v = DotVariant::kVecDot);  // best level allowed
VecDotFn vec_dot_fn_at(DType w, SimdLevel level, DotVariant v = DotVariant::kVecDot);  // nullptr if absent

// out[t] = dot(w_row, a_rows[t]) for t < n_a <= kMaxDotRows, bit-identical to the VecDotFn of the
// same type and variant for each row: one weight row is unpacked once for several activation
// rows (prompt processing). a_scales[t]: the row's block scales as floats, (d, s) per block, for
// Q8_0 / Q8_1 activations (activation_block_scales); ignored for other types. nullptr when a
// level has no such kernel for a type.
constexpr int kMaxDotRows = 8;
using VecDotMultiFn = void (*)(int64_t n, const void* w_row, const void* const* a_rows, const float* const* a_scales,
                               int n_a, float* out);
VecDotMultiFn vec_dot_multi_fn(DType w, DotVariant v = DotVariant::kVecDot);
// Fills scales with (d, s) per block of a Q8_0 / Q8_1 activation row (s = 0 for Q8_0); false for
// other activation types (which need none).
bool activation_block_scales(DType act, const void* row, int64_t n, float* scales);

// Reference for tests: dequantize_row(w) . dequantize_row(a) in double.
double vec_dot_dequant(DType w, int64_t n, const void* w_row, const void* a_row);

// FP8 E4M3 weight rows carry scales outside the row; these helpers apply one scale per
// `group` columns (group == n: one scale for the row). a_row is F32.
float vec_dot_fp8(int64_t n, const uint8_t* w_row, const float* a_row, const float* scales, int64_t group);

namespace detail {
// Per-level tables, filled by the SIMD translation units (nullptr where a type has no kernel).
VecDotFn vec_dot_generic(DType w, DotVariant v);
VecDotFn vec_dot_avx2(DType w, DotVariant v);
VecDotFn vec_dot_avx512(DType w, DotVariant v);
bool quantize_activation_avx2(DType act, const float* x, void* y, int64_t n);  // false: not handled
VecDotMultiFn vec_dot_multi_avx2(DType w, DotVariant v);
VecDotMultiFn vec_dot_multi_avx512(DType w, DotVariant v);
}  // namespace detail

}  // namespace duet
