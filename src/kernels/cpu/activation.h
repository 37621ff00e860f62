// Gated FFN activations: out = act(gate) * up, element-wise, computed like llama.cpp's CPU ops so
// GGUF models reproduce it bit for bit: SiLU as x / (1 + e^-x) with ggml's vectorized expf
// (ggml_v_silu) in groups of 8 and libm expf for a tail; GELU (tanh approximation) either
// exactly in float32 (transformers' gelu_pytorch_tanh) or, like ggml, from a table of the
// function at every F16 input (input and result rounded to F16) — see GeluMode.
// Single-threaded per call; callers split rows. Compute-light, memory-bound.
#pragma once

#include <cstdint>

namespace duet {

enum class Activation { kSilu, kGeluTanh };
enum class GeluMode { kExact, kF16Table };

void gated_activation(Activation act, GeluMode gelu, const float* gate, const float* up, float* out, int64_t n);

namespace detail {
bool swiglu_avx2(const float* gate, const float* up, float* out, int64_t n);  // n % 8 == 0 only
// GELU through the F16 table (65536 entries + 1 of padding) for the first n & ~7 elements;
// returns how many it did.
int64_t geglu_table_avx2(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n);
}

}  // namespace duet
