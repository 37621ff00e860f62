// Gated activations (see activation.h).
#include "kernels/cpu/activation.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "tensor/half.h"

namespace duet {
namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kGeluCoef = 0.044715f;

// ggml_gelu_f32 with the multiply-add GCC contracts `1.0f + GELU_COEF_A*x*x` into.
float gelu_ggml(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kGeluCoef * x, x, 1.0f)));
}

// One entry per F16 input, plus one of padding: the AVX2 path gathers 32 bits per entry.
const std::vector<uint16_t>& gelu_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t((1 << 16) + 1, 0);
    for (uint32_t i = 0; i < (1u << 16); ++i) t[i] = f32_to_f16(gelu_ggml(f16_to_f32(static_cast<uint16_t>(i))));
    return t;
  }();
  return table;
}

}  // namespace

void gated_activation(Activation act, GeluMode gelu, const float* gate, const float* up, float* out, int64_t n) {
  if (act == Activation::kSilu) {
    int64_t i = 0;
    const int64_t n8 = n & ~int64_t{7};
    if (n8 > 0 && cpu_features().level >= SimdLevel::kAvx2 && detail::swiglu_avx2(gate, up, out, n8)) {
      i = n8;
    } else {
      for (; i < n8; ++i) out[i] = gate[i] / (1.0f + ggml_expf(0.0f - gate[i])) * up[i];
    }
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    return;
  }
  if (gelu == GeluMode::kF16Table) {
    const uint16_t* table = gelu_table().data();
    int64_t i0 = 0;
    if (cpu_features().level >= SimdLevel::kAvx2) i0 = detail::geglu_table_avx2(table, gate, up, out, n);
    for (int64_t i = i0; i < n; ++i) {
      const float g = gate[i];
      if (g <= -10.0f) out[i] = 0.0f;
      else if (g >= 10.0f) out[i] = g * up[i];
      else out[i] = f16_to_f32(table[f32_to_f16(g)]) * up[i];
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kGeluCoef * g * g))) * up[i];
  }
}

}  // namespace duet
