// Small vector helpers used inside kernels (attention's weighted sums, residual adds), dispatched
// once per call on cpu_features(): AVX2 variants in simd_ops_avx2.cpp, scalar fallbacks here.
// Pure; any thread.
#pragma once

#include <cstdint>

namespace duet {

void axpy_f16(int64_t n, float a, const uint16_t* x, float* y);  // y += a * f16(x)
void axpy_f32(int64_t n, float a, const float* x, float* y);     // y += a * x
void add_f32(int64_t n, const float* x, float* y);               // y += x

namespace detail {
bool axpy_f16_avx2(int64_t n, float a, const uint16_t* x, float* y);
bool axpy_f32_avx2(int64_t n, float a, const float* x, float* y);
}  // namespace detail

}  // namespace duet
