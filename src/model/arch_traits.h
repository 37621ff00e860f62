// ArchTraits: what distinguishes the four decoder architectures in the forward pass (biases,
// q/k norms, Gemma's extra norms, embedding scale and activation). One table read by every
// backend (model/model.cpp on the CPU, runner/cuda_model.cpp on the GPU), so the architectures
// cannot drift apart between them.
#pragma once

#include "formats/arch.h"
#include "kernels/cpu/activation.h"

namespace duet {

struct ArchTraits {
  bool qkv_bias = false;
  bool qk_norm = false;
  bool post_norms = false;   // gemma3: norms after attention and FFN outputs
  bool embed_scale = false;  // gemma3: embeddings * sqrt(d_model)
  bool q_prescale = false;   // gemma3: q * query_pre_attn_scalar^-0.5 before the dot products
  Activation act = Activation::kSilu;
};

inline ArchTraits traits_of(Arch a) {
  ArchTraits t;
  switch (a) {
    case Arch::kLlama: break;
    case Arch::kQwen2: t.qkv_bias = true; break;
    case Arch::kQwen3: t.qk_norm = true; break;
    case Arch::kGemma3:
      t.qk_norm = t.post_norms = t.embed_scale = t.q_prescale = true;
      t.act = Activation::kGeluTanh;
      break;
  }
  return t;
}

}  // namespace duet
