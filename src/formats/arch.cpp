// Architecture tables (see arch.h).
#include "formats/arch.h"

#include <cstring>

#include "base/text.h"

namespace duet {
namespace {

uint32_t ju32(const nlohmann::json& j, const char* k, uint32_t def) {
  if (!j.contains(k) || j[k].is_null()) return def;
  if (!j[k].is_number_unsigned() && !j[k].is_number_integer()) return def;
  int64_t v = j[k].get<int64_t>();
  return v < 0 || v > UINT32_MAX ? 0 : static_cast<uint32_t>(v);
}
float jf(const nlohmann::json& j, const char* k, float def) {
  if (!j.contains(k) || !j[k].is_number()) return def;
  return j[k].get<float>();
}

}  // namespace

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kGemma3: return "gemma3";
  }
  return "?";
}

std::optional<Arch> arch_from_name(const std::string& s) {
  for (Arch a : {Arch::kLlama, Arch::kQwen2, Arch::kQwen3, Arch::kGemma3})
    if (s == arch_name(a)) return a;
  if (s == "gemma3_text") return Arch::kGemma3;
  if (s == "mistral") return Arch::kLlama;
  return std::nullopt;
}

Status HParams::validate() const {
  auto bad = [](const std::string& m) { return invalid_argument("model hyperparameters: " + m); };
  if (n_layers == 0 || n_layers > 1024) return bad("n_layers " + std::to_string(n_layers) + " not in 1..1024");
  if (d_model == 0 || d_model > 65536) return bad("d_model " + std::to_string(d_model) + " not in 1..65536");
  if (d_ff == 0 || d_ff > 1 << 20) return bad("d_ff " + std::to_string(d_ff) + " out of range");
  if (n_heads == 0 || n_heads > 1024) return bad("n_heads " + std::to_string(n_heads) + " out of range");
  if (n_kv_heads == 0 || n_heads % n_kv_heads != 0)
    return bad("n_kv_heads " + std::to_string(n_kv_heads) + " must divide n_heads " + std::to_string(n_heads));
  if (head_dim == 0 || head_dim > 1024 || head_dim % 2 != 0)
    return bad("head_dim " + std::to_string(head_dim) + " must be even and in 2..1024");
  if (vocab_size == 0 || vocab_size > (1u << 24)) return bad("vocab_size " + std::to_string(vocab_size) + " out of range");
  if (!(rms_eps > 0 && rms_eps < 1)) return bad("rms_eps must be in (0, 1)");
  if (!(rope_theta > 0)) return bad("rope_theta must be positive");
  return Status::ok();
}

Result<HParams> hparams_from_hf_config(const nlohmann::json& cfg_in) {
  if (!cfg_in.is_object()) return invalid_argument("config.json is not an object");
  std::string mt = cfg_in.contains("model_type") && cfg_in["model_type"].is_string() ? cfg_in["model_type"].get<std::string>() : "";
  auto arch = arch_from_name(mt);
  if (!arch) return unsupported("config.json model_type '" + printable(mt) + "' is not supported (llama, mistral, qwen2, qwen3, gemma3)");
  const nlohmann::json& c = cfg_in.contains("text_config") && cfg_in["text_config"].is_object() ? cfg_in["text_config"] : cfg_in;
  HParams hp;
  hp.arch = *arch;
  hp.n_layers = ju32(c, "num_hidden_layers", 0);
  hp.d_model = ju32(c, "hidden_size", 0);
  hp.d_ff = ju32(c, "intermediate_size", 0);
  hp.n_heads = ju32(c, "num_attention_heads", 0);
  hp.n_kv_heads = ju32(c, "num_key_value_heads", hp.n_heads);
  hp.head_dim = ju32(c, "head_dim", hp.n_heads ? hp.d_model / hp.n_heads : 0);
  hp.vocab_size = ju32(c, "vocab_size", 0);
  hp.context_length = ju32(c, "max_position_embeddings", 4096);
  hp.rope_theta = jf(c, "rope_theta", hp.arch == Arch::kGemma3 ? 1e6f : 10000.0f);
  hp.rms_eps = jf(c, "rms_norm_eps", 1e-6f);
  bool tie_default = hp.arch == Arch::kGemma3;
  const nlohmann::json& tie_src = c.contains("tie_word_embeddings") ? c : cfg_in;
  hp.tied_embeddings = tie_src.contains("tie_word_embeddings") && tie_src["tie_word_embeddings"].is_boolean()
                           ? tie_src["tie_word_embeddings"].get<bool>() : tie_default;
  if (hp.arch == Arch::kGemma3) {
    hp.rope_theta_local = jf(c, "rope_local_base_freq", 10000.0f);
    hp.sliding_window = ju32(c, "sliding_window", 512);
    hp.sliding_window_pattern = ju32(c, "sliding_window_pattern", 6);
    hp.query_pre_attn_scalar = jf(c, "query_pre_attn_scalar", static_cast<float>(hp.head_dim));
  }
  if (c.contains("rope_scaling") && c["rope_scaling"].is_object())
    return unsupported("config.json rope_scaling is not supported yet");
  DUET_RETURN_IF_ERROR(hp.validate());
  return hp;
}

Result<HParams> hparams_from_gguf(const GgufFile& g) {
  std::string a = g.architecture();
  auto arch = arch_from_name(a);
  if (!arch) return unsupported(g.path() + ": architecture '" + printable(a) + "' is not supported (llama, qwen2, qwen3, gemma3)");
  HParams hp;
  hp.arch = *arch;
  auto geti = [&](const std::string& k, int64_t def) -> Result<uint32_t> {
    DUET_ASSIGN_OR_RETURN(int64_t v, g.get_int(a + "." + k, def));
    if (v < 0 || v > UINT32_MAX) return invalid_argument(g.path() + ": " + a + "." + k + " = " + std::to_string(v) + " out of range");
    return static_cast<uint32_t>(v);
  };
  DUET_ASSIGN_OR_RETURN(hp.n_layers, geti("block_count", 0));
  DUET_ASSIGN_OR_RETURN(hp.d_model, geti("embedding_length", 0));
  DUET_ASSIGN_OR_RETURN(hp.d_ff, geti("feed_forward_length", 0));
  DUET_ASSIGN_OR_RETURN(hp.n_heads, geti("attention.head_count", 0));
  DUET_ASSIGN_OR_RETURN(hp.n_kv_heads, geti("attention.head_count_kv", hp.n_heads));
  DUET_ASSIGN_OR_RETURN(hp.head_dim, geti("attention.key_length", hp.n_heads ? hp.d_model / hp.n_heads : 0));
  DUET_ASSIGN_OR_RETURN(hp.context_length, geti("context_length", 4096));
  const GgufValue* toks = g.find("tokenizer.ggml.tokens");
  uint32_t vocab_default = toks ? static_cast<uint32_t>(toks->as_array().size()) : 0;
  if (const GgufTensorInfo* te = g.find_tensor("token_embd.weight"); te && te->shape.size() == 2)
    vocab_default = static_cast<uint32_t>(te->shape[1]);
  DUET_ASSIGN_OR_RETURN(hp.vocab_size, geti("vocab_size", vocab_default));
  DUET_ASSIGN_OR_RETURN(double theta, g.get_float(a + ".rope.freq_base", hp.arch == Arch::kGemma3 ? 1e6 : 10000.0));
  DUET_ASSIGN_OR_RETURN(double eps, g.get_float(a + ".attention.layer_norm_rms_epsilon", 1e-6));
  hp.rope_theta = static_cast<float>(theta);
  hp.rms_eps = static_cast<float>(eps);
  hp.tied_embeddings = g.find_tensor("output.weight") == nullptr;
  if (hp.arch == Arch::kGemma3) {
    DUET_ASSIGN_OR_RETURN(hp.sliding_window, geti("attention.sliding_window", 512));
    hp.sliding_window_pattern = 6;
    hp.rope_theta_local = 10000.0f;
    hp.query_pre_attn_scalar = static_cast<float>(hp.head_dim);
  }
  DUET_RETURN_IF_ERROR(hp.validate());
  return hp;
}

void hparams_to_gguf(const HParams& hp, GgufWriter& w) {
  const std::string a = arch_name(hp.arch);
  w.set("general.architecture", GgufValue::str(a));
  w.set(a + ".context_length", GgufValue::u32(hp.context_length));
  w.set(a + ".embedding_length", GgufValue::u32(hp.d_model));
  w.set(a + ".block_count", GgufValue::u32(hp.n_layers));
  w.set(a + ".feed_forward_length", GgufValue::u32(hp.d_ff));
  w.set(a + ".attention.head_count", GgufValue::u32(hp.n_heads));
  w.set(a + ".attention.head_count_kv", GgufValue::u32(hp.n_kv_heads));
  w.set(a + ".rope.freq_base", GgufValue::f32(hp.rope_theta));
  w.set(a + ".attention.layer_norm_rms_epsilon", GgufValue::f32(hp.rms_eps));
  if (hp.head_dim != hp.d_model / hp.n_heads || hp.arch == Arch::kQwen3 || hp.arch == Arch::kGemma3) {
    w.set(a + ".attention.key_length", GgufValue::u32(hp.head_dim));
    w.set(a + ".attention.value_length", GgufValue::u32(hp.head_dim));
  }
  if (hp.arch == Arch::kLlama) {
    w.set(a + ".vocab_size", GgufValue::u32(hp.vocab_size));
    w.set(a + ".rope.dimension_count", GgufValue::u32(hp.head_dim));
  }
  if (hp.arch == Arch::kGemma3) w.set(a + ".attention.sliding_window", GgufValue::u32(hp.sliding_window));
}

nlohmann::json hparams_to_hf_config(const HParams& hp) {
  static const char* kClass[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Gemma3ForCausalLM"};
  nlohmann::json c;
  c["architectures"] = {kClass[static_cast<int>(hp.arch)]};
  c["model_type"] = hp.arch == Arch::kGemma3 ? "gemma3_text" : arch_name(hp.arch);
  c["hidden_size"] = hp.d_model;
  c["intermediate_size"] = hp.d_ff;
  c["num_hidden_layers"] = hp.n_layers;
  c["num_attention_heads"] = hp.n_heads;
  c["num_key_value_heads"] = hp.n_kv_heads;
  c["head_dim"] = hp.head_dim;
  c["vocab_size"] = hp.vocab_size;
  c["max_position_embeddings"] = hp.context_length;
  c["rope_theta"] = hp.rope_theta;
  c["rms_norm_eps"] = hp.rms_eps;
  c["tie_word_embeddings"] = hp.tied_embeddings;
  c["hidden_act"] = hp.arch == Arch::kGemma3 ? "gelu_pytorch_tanh" : "silu";
  if (hp.arch == Arch::kQwen2) c["attention_bias"] = true;
  if (hp.arch == Arch::kGemma3) {
    c["rope_local_base_freq"] = hp.rope_theta_local;
    c["sliding_window"] = hp.sliding_window;
    c["sliding_window_pattern"] = hp.sliding_window_pattern;
    c["query_pre_attn_scalar"] = hp.query_pre_attn_scalar;
  }
  return c;
}

std::optional<HParams> hparams_preset(const std::string& shape) {
  HParams hp;
  if (shape == "qwen2-7b") {  // DeepSeek-R1-Distill-Qwen-7B / Qwen2.5-Math-7B geometry
    hp = {Arch::kQwen2, 28, 3584, 18944, 28, 4, 128, 152064, 131072, 10000.0f, 10000.0f, 1e-6f, false};
  } else if (shape == "qwen2-1.5b") {  // DeepSeek-R1-Distill-Qwen-1.5B
    hp = {Arch::kQwen2, 28, 1536, 8960, 12, 2, 128, 151936, 131072, 10000.0f, 10000.0f, 1e-6f, false};
  } else if (shape == "qwen2-0.5b") {  // Qwen2.5-0.5B
    hp = {Arch::kQwen2, 24, 896, 4864, 14, 2, 64, 151936, 32768, 1e6f, 10000.0f, 1e-6f, true};
  } else if (shape == "qwen3-8b") {
    hp = {Arch::kQwen3, 36, 4096, 12288, 32, 8, 128, 151936, 40960, 1e6f, 10000.0f, 1e-6f, false};
  } else if (shape == "qwen3-0.6b") {
    hp = {Arch::kQwen3, 28, 1024, 3072, 16, 8, 128, 151936, 40960, 1e6f, 10000.0f, 1e-6f, true};
  } else if (shape == "llama3-8b") {
    hp = {Arch::kLlama, 32, 4096, 14336, 32, 8, 128, 128256, 8192, 500000.0f, 10000.0f, 1e-5f, false};
  } else if (shape == "llama3-1b") {  // Llama 3.2 1B geometry (without its rope scaling)
    hp = {Arch::kLlama, 16, 2048, 8192, 32, 8, 64, 128256, 8192, 500000.0f, 10000.0f, 1e-5f, true};
  } else if (shape == "gemma3-270m") {
    hp = {Arch::kGemma3, 18, 640, 2048, 4, 1, 256, 262144, 32768, 1e6f, 10000.0f, 1e-6f, true, 512, 6, 256.0f};
  } else if (shape == "gemma3-1b") {
    hp = {Arch::kGemma3, 26, 1152, 6912, 4, 1, 256, 262144, 32768, 1e6f, 10000.0f, 1e-6f, true, 512, 6, 256.0f};
  } else {
    return std::nullopt;
  }
  return hp;
}

std::vector<std::string> hparams_preset_names() {
  return {"qwen2-7b", "qwen2-1.5b", "qwen2-0.5b", "qwen3-8b", "qwen3-0.6b", "llama3-8b", "llama3-1b", "gemma3-270m", "gemma3-1b"};
}

std::vector<TensorDecl> arch_tensors(const HParams& hp) {
  const uint64_t d = hp.d_model, q = uint64_t{hp.n_heads} * hp.head_dim, kv = uint64_t{hp.n_kv_heads} * hp.head_dim;
  std::vector<TensorDecl> t;
  t.push_back({"token_embd.weight", {d, hp.vocab_size}});
  for (uint32_t i = 0; i < hp.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    t.push_back({p + "attn_norm.weight", {d}});
    t.push_back({p + "attn_q.weight", {d, q}});
    t.push_back({p + "attn_k.weight", {d, kv}});
    t.push_back({p + "attn_v.weight", {d, kv}});
    if (hp.arch == Arch::kQwen2) {
      t.push_back({p + "attn_q.bias", {q}});
      t.push_back({p + "attn_k.bias", {kv}});
      t.push_back({p + "attn_v.bias", {kv}});
    }
    if (hp.arch == Arch::kQwen3 || hp.arch == Arch::kGemma3) {
      t.push_back({p + "attn_q_norm.weight", {hp.head_dim}});
      t.push_back({p + "attn_k_norm.weight", {hp.head_dim}});
    }
    t.push_back({p + "attn_output.weight", {q, d}});
    if (hp.arch == Arch::kGemma3) t.push_back({p + "post_attention_norm.weight", {d}});
    t.push_back({p + "ffn_norm.weight", {d}});
    t.push_back({p + "ffn_gate.weight", {d, hp.d_ff}});
    t.push_back({p + "ffn_up.weight", {d, hp.d_ff}});
    t.push_back({p + "ffn_down.weight", {hp.d_ff, d}});
    if (hp.arch == Arch::kGemma3) t.push_back({p + "post_ffw_norm.weight", {d}});
  }
  t.push_back({"output_norm.weight", {d}});
  if (!hp.tied_embeddings) t.push_back({"output.weight", {d, hp.vocab_size}});
  return t;
}

std::optional<std::string> gguf_name_from_hf(const std::string& hf_in, Arch arch, int* qk_permute_heads,
                                             const HParams& hp, float* norm_shift) {
  *qk_permute_heads = 0;
  *norm_shift = 0.0f;
  std::string hf = hf_in;
  for (const char* pre : {"model.language_model.", "language_model.model.", "language_model."}) {
    if (hf.rfind(pre, 0) == 0) {
      hf = "model." + hf.substr(std::strlen(pre));
      break;
    }
  }
  auto ends = [&](const std::string& s, const char* suf) {
    size_t n = std::strlen(suf);
    return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
  };
  std::string out;
  if (hf == "model.embed_tokens.weight") out = "token_embd.weight";
  else if (hf == "model.norm.weight") out = "output_norm.weight";
  else if (hf == "lm_head.weight") out = "output.weight";
  else if (hf.rfind("model.layers.", 0) == 0) {
    size_t dot = hf.find('.', 13);
    if (dot == std::string::npos) return std::nullopt;
    std::string idx = hf.substr(13, dot - 13);
    std::string rest = hf.substr(dot + 1);
    static const std::pair<const char*, const char*> kMap[] = {
        {"input_layernorm", "attn_norm"},        {"self_attn.q_proj", "attn_q"},
        {"self_attn.k_proj", "attn_k"},          {"self_attn.v_proj", "attn_v"},
        {"self_attn.o_proj", "attn_output"},     {"self_attn.q_norm", "attn_q_norm"},
        {"self_attn.k_norm", "attn_k_norm"},     {"mlp.gate_proj", "ffn_gate"},
        {"mlp.up_proj", "ffn_up"},               {"mlp.down_proj", "ffn_down"},
        {"pre_feedforward_layernorm", "ffn_norm"}, {"post_feedforward_layernorm", "post_ffw_norm"},
    };
    std::string base, suffix;
    size_t last = rest.rfind('.');
    if (last == std::string::npos) return std::nullopt;
    base = rest.substr(0, last);
    suffix = rest.substr(last);  // ".weight" / ".bias"
    std::string mapped;
    if (base == "post_attention_layernorm")
      mapped = arch == Arch::kGemma3 ? "post_attention_norm" : "ffn_norm";
    for (const auto& [from, to] : kMap)
      if (base == from) mapped = to;
    if (mapped.empty()) return std::nullopt;
    out = "blk." + idx + "." + mapped + suffix;
    if (arch == Arch::kLlama && suffix == ".weight") {
      if (mapped == "attn_q") *qk_permute_heads = static_cast<int>(hp.n_heads);
      if (mapped == "attn_k") *qk_permute_heads = static_cast<int>(hp.n_kv_heads);
    }
  } else {
    return std::nullopt;
  }
  if (arch == Arch::kGemma3 && ends(out, "norm.weight")) *norm_shift = 1.0f;
  return out;
}

std::optional<std::string> hf_name_from_gguf(const std::string& g, Arch arch) {
  if (g == "token_embd.weight") return std::string("model.embed_tokens.weight");
  if (g == "output_norm.weight") return std::string("model.norm.weight");
  if (g == "output.weight") return std::string("lm_head.weight");
  if (g.rfind("blk.", 0) != 0) return std::nullopt;
  size_t dot = g.find('.', 4);
  if (dot == std::string::npos) return std::nullopt;
  std::string idx = g.substr(4, dot - 4), rest = g.substr(dot + 1);
  size_t last = rest.rfind('.');
  if (last == std::string::npos) return std::nullopt;
  std::string base = rest.substr(0, last), suffix = rest.substr(last);
  static const std::pair<const char*, const char*> kMap[] = {
      {"attn_norm", "input_layernorm"},     {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},       {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},  {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},  {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},            {"ffn_down", "mlp.down_proj"},
      {"post_ffw_norm", "post_feedforward_layernorm"}, {"post_attention_norm", "post_attention_layernorm"},
  };
  std::string mapped;
  if (base == "ffn_norm") mapped = arch == Arch::kGemma3 ? "pre_feedforward_layernorm" : "post_attention_layernorm";
  for (const auto& [from, to] : kMap)
    if (base == from) mapped = to;
  if (mapped.empty()) return std::nullopt;
  return "model.layers." + idx + "." + mapped + suffix;
}

}  // namespace duet
