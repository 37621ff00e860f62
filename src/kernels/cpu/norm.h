// RMSNorm over rows: y = x / sqrt(mean(x^2) + eps) * w (w may be null: no weight). The float squares are
// summed in double, as ggml does, so a norm is reproducible whatever the SIMD level.
// Row-parallel callers split rows; each call is single-threaded. Memory-bound, cheap.
#pragma once

#include <cstddef>
#include <cstdint>

namespace duet {

// n_rows rows of n floats; x and y rows are x_stride / y_stride floats apart; y may equal x.
void rms_norm(const float* x, size_t x_stride, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
              size_t y_stride);

}  // namespace duet
