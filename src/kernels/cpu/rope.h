// Rotary position embedding, GGML's two layouts: kNormal rotates adjacent pairs (x[2i], x[2i+1])
// (GGUF llama, whose converter permuted q/k rows), kNeox rotates halves (x[i], x[i + d/2])
// (HF layout; qwen2, qwen3, gemma3, and unpermuted HF llama). Angles follow ggml's rope cache:
// theta_i = pos * base^(-2i/d) / freq_factor[i], built by repeated multiplication in float, and
// the rotation uses the fused multiply-adds llama.cpp's build contracts it into (bit-exact).
// Pure functions over one token; callers parallelize over tokens.
#pragma once

#include <cstdint>

namespace duet {

enum class RopeStyle { kNormal, kNeox };

// cs: head_dim floats, (cos, sin) for each of the head_dim / 2 frequencies at position pos.
// freq_factors: head_dim / 2 divisors of the angle, or null.
void rope_cache(int64_t pos, float base, int64_t head_dim, const float* freq_factors, float* cs);

// Rotates n_heads heads of head_dim floats (heads head_dim apart) in place.
void rope_apply(float* x, int64_t n_heads, int64_t head_dim, const float* cs, RopeStyle style);

}  // namespace duet
