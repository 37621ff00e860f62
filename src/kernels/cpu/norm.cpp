// RMSNorm (see norm.h).
#include "kernels/cpu/norm.h"

#include <cmath>

namespace duet {

void rms_norm(const float* x, size_t x_stride, const float* w, float eps, int64_t n, int64_t n_rows, float* y,
              size_t y_stride) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);  // float square, as ggml
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
    if (w) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * scale) * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale;
    }
  }
}

}  // namespace duet
