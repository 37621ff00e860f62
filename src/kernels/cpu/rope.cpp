// RoPE (see rope.h).
#include "kernels/cpu/rope.h"

#include <cmath>

namespace duet {

void rope_cache(int64_t pos, float base, int64_t head_dim, const float* freq_factors, float* cs) {
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(head_dim));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float t = freq_factors ? theta / freq_factors[i] : theta;
    cs[2 * i] = std::cos(t);
    cs[2 * i + 1] = std::sin(t);
    theta *= theta_scale;
  }
}

void rope_apply(float* x, int64_t n_heads, int64_t head_dim, const float* cs, RopeStyle style) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const int64_t i0 = style == RopeStyle::kNormal ? 2 * i : i;
      const int64_t i1 = style == RopeStyle::kNormal ? 2 * i + 1 : i + half;
      const float x0 = v[i0], x1 = v[i1];
      // The fused forms GCC contracts ggml's `x0*c - x1*s` and `x0*s + x1*c` into.
      v[i0] = std::fma(x0, c, -(x1 * s));
      v[i1] = std::fma(x0, s, x1 * c);
    }
  }
}

}  // namespace duet
