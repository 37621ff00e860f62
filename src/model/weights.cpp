// Weight binding (see weights.h). Both formats go through one lookup by GGUF tensor name, so the
// checks (shape against arch_tensors(), type support, FP8 scale counts) are written once.
#include "model/weights.h"

#include <cstring>
#include <functional>
#include <map>

#include "base/check.h"
#include "base/text.h"
#include "kernels/cpu/quant_dot.h"
#include "tensor/quantize.h"

namespace duet {
namespace {

struct Found {
  std::string src_name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;  // GGML order
  const uint8_t* data = nullptr;
  uint64_t n_bytes = 0;
  float shift = 0;  // added to 1-D tensors (HF Gemma norms)
  const SafetensorsTensor* st = nullptr;
};

using Lookup = std::function<const Found*(const std::string&)>;

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

class Binder {
 public:
  Binder(Lookup lookup, ModelWeights* mw, const SafetensorsModel* st) : lookup_(std::move(lookup)), mw_(mw), st_(st) {}

  Status matrix(const std::string& name, uint64_t n_cols, uint64_t n_rows, WeightMatrix* out) {
    const Found* f = lookup_(name);
    if (!f) return not_found("model has no tensor '" + name + "'");
    const std::vector<uint64_t> want = {n_cols, n_rows};
    if (f->shape != want)
      return invalid_argument("tensor '" + printable(f->src_name) + "' has shape " + shape_str(f->shape) + ", expected " + shape_str(want) +
                              " (GGML order)");
    if (!has_vec_dot(f->dtype))
      return unsupported("tensor '" + printable(f->src_name) + "' has type " + std::string(dtype_name(f->dtype)) +
                         ", which duet cannot multiply");
    auto rb = row_bytes(f->dtype, n_cols);
    if (!rb) return invalid_argument("tensor '" + printable(f->src_name) + "': row of " + std::to_string(n_cols) +
                                     " is not a multiple of the " + std::string(dtype_name(f->dtype)) + " block size");
    uint64_t total;
    if (!checked_mul(*rb, n_rows, &total) || total != f->n_bytes)
      return invalid_argument("tensor '" + printable(f->src_name) + "' holds " + std::to_string(f->n_bytes) + " bytes, expected " +
                              std::to_string(*rb) + " x " + std::to_string(n_rows));
    out->dtype = f->dtype;
    out->data = f->data;
    out->n_rows = static_cast<int64_t>(n_rows);
    out->n_cols = static_cast<int64_t>(n_cols);
    out->row_bytes = *rb;
    if (f->dtype == DType::kF8_E4M3) return fp8_scales(*f, out);
    return Status::ok();
  }

  Status vector(const std::string& name, uint64_t n, std::vector<float>* out, bool optional = false) {
    const Found* f = lookup_(name);
    if (!f) {
      if (optional) return Status::ok();
      return not_found("model has no tensor '" + name + "'");
    }
    if (f->shape != std::vector<uint64_t>{n})
      return invalid_argument("tensor '" + printable(f->src_name) + "' has shape " + shape_str(f->shape) + ", expected [" +
                              std::to_string(n) + "]");
    auto rb = row_bytes(f->dtype, n);
    if (!can_dequantize(f->dtype) || !rb || *rb != f->n_bytes || f->dtype == DType::kF8_E4M3)
      return unsupported("tensor '" + printable(f->src_name) + "' has type " + std::string(dtype_name(f->dtype)) +
                         ", expected a float type of " + std::to_string(n) + " elements");
    out->resize(n);
    dequantize_row(f->dtype, f->data, out->data(), static_cast<int64_t>(n));
    if (f->shift != 0.0f)
      for (float& v : *out) v += f->shift;
    return Status::ok();
  }

 private:
  Status fp8_scales(const Found& f, WeightMatrix* w) {
    if (!st_ || !f.st) return invalid_argument("FP8 tensor '" + f.src_name + "' outside a safetensors checkpoint");
    const Fp8Info& info = st_->fp8();
    const std::string stem = f.st->name.substr(0, f.st->name.size() - std::strlen("weight"));
    const bool block = info.layout == Fp8ScaleLayout::kBlock;
    const SafetensorsTensor* s = st_->find(stem + (block ? "weight_scale_inv" : "weight_scale"));
    if (!s) return invalid_argument("FP8 tensor '" + f.src_name + "' has no " + (block ? "weight_scale_inv" : "weight_scale"));
    if (!can_dequantize(s->dtype) || s->dtype == DType::kF8_E4M3 || !row_bytes(s->dtype, s->n_elements) ||
        *row_bytes(s->dtype, s->n_elements) != s->n_bytes)
      return invalid_argument("'" + printable(s->name) + "' has type " + std::string(dtype_name(s->dtype)) + ", expected a float type");
    const int64_t rows = w->n_rows, cols = w->n_cols;
    if (block) {
      w->fp8_block_rows = info.block_rows;
      w->fp8_block_cols = info.block_cols;
      w->fp8_scale_cols = (cols + info.block_cols - 1) / info.block_cols;
      const uint64_t want = static_cast<uint64_t>((rows + info.block_rows - 1) / info.block_rows) * w->fp8_scale_cols;
      if (s->n_elements != want)
        return invalid_argument("'" + printable(s->name) + "' has " + std::to_string(s->n_elements) + " scales, expected " + std::to_string(want));
    } else if (s->n_elements == 1) {
      w->fp8_block_rows = rows;
      w->fp8_block_cols = cols;
      w->fp8_scale_cols = 1;
    } else if (s->n_elements == static_cast<uint64_t>(rows)) {
      w->fp8_block_rows = 1;
      w->fp8_block_cols = cols;
      w->fp8_scale_cols = 1;
    } else {
      return invalid_argument("'" + printable(s->name) + "' has " + std::to_string(s->n_elements) + " scales, expected 1 or " +
                              std::to_string(rows));
    }
    auto scales = std::make_shared<std::vector<float>>(s->n_elements);
    dequantize_row(s->dtype, s->data, scales->data(), static_cast<int64_t>(s->n_elements));
    w->fp8_scales = scales->data();
    mw_->owned.push_back(std::move(scales));
    return Status::ok();
  }

  Lookup lookup_;
  ModelWeights* mw_;
  const SafetensorsModel* st_;
};

// Sliding-window layers: gemma3's pattern (every sliding_window_pattern-th layer is global), or
// the config's explicit layer_types when an HF checkpoint has them.
Status set_sliding_layers(ModelWeights* mw, const nlohmann::json* hf_config) {
  const HParams& hp = mw->hp;
  mw->sliding.assign(hp.n_layers, 0);
  if (hp.arch != Arch::kGemma3) return Status::ok();
  const nlohmann::json* c = hf_config;
  if (c && c->contains("text_config") && (*c)["text_config"].is_object()) c = &(*c)["text_config"];
  if (c && c->contains("layer_types") && (*c)["layer_types"].is_array()) {
    const auto& lt = (*c)["layer_types"];
    if (lt.size() != hp.n_layers)
      return invalid_argument("config.json layer_types has " + std::to_string(lt.size()) + " entries, expected " +
                              std::to_string(hp.n_layers));
    for (uint32_t i = 0; i < hp.n_layers; ++i) {
      if (!lt[i].is_string()) return invalid_argument("config.json layer_types[" + std::to_string(i) + "] is not a string");
      mw->sliding[i] = lt[i].get<std::string>() == "sliding_attention";
    }
    return Status::ok();
  }
  for (uint32_t i = 0; i < hp.n_layers; ++i)
    mw->sliding[i] = hp.sliding_window_pattern > 0 && (i + 1) % hp.sliding_window_pattern != 0;
  return Status::ok();
}

// transformers >= 4.57 may write rope_parameters instead of rope_theta (per layer type for
// gemma3); only the default (unscaled) RoPE is supported.
Status apply_rope_parameters(const nlohmann::json& config, HParams* hp) {
  const nlohmann::json* c = &config;
  if (c->contains("text_config") && (*c)["text_config"].is_object()) c = &(*c)["text_config"];
  if (!c->contains("rope_parameters") || !(*c)["rope_parameters"].is_object()) return Status::ok();
  const auto& rp = (*c)["rope_parameters"];
  auto read = [](const nlohmann::json& p, float* theta) -> Status {
    if (p.contains("rope_type") && p["rope_type"].is_string() && p["rope_type"].get<std::string>() != "default")
      return unsupported("config.json rope_parameters rope_type '" + p["rope_type"].get<std::string>() +
                         "' is not supported yet");
    if (p.contains("rope_theta") && p["rope_theta"].is_number()) *theta = p["rope_theta"].get<float>();
    return Status::ok();
  };
  if (rp.contains("full_attention") && rp["full_attention"].is_object()) {
    DUET_RETURN_IF_ERROR(read(rp["full_attention"], &hp->rope_theta));
    if (rp.contains("sliding_attention") && rp["sliding_attention"].is_object())
      DUET_RETURN_IF_ERROR(read(rp["sliding_attention"], &hp->rope_theta_local));
    return Status::ok();
  }
  return read(rp, &hp->rope_theta);
}

Status bind_all(Binder& b, ModelWeights* mw, bool has_output) {
  const HParams& hp = mw->hp;
  const uint64_t d = hp.d_model, qd = uint64_t{hp.n_heads} * hp.head_dim, kvd = uint64_t{hp.n_kv_heads} * hp.head_dim;
  const uint64_t ff = hp.d_ff, hd = hp.head_dim;
  DUET_RETURN_IF_ERROR(b.matrix("token_embd.weight", d, hp.vocab_size, &mw->tok_embd));
  if (!can_dequantize(mw->tok_embd.dtype))
    return unsupported("token_embd.weight type " + std::string(dtype_name(mw->tok_embd.dtype)) + " cannot be read");
  if (has_output) {
    DUET_RETURN_IF_ERROR(b.matrix("output.weight", d, hp.vocab_size, &mw->output));
  } else {
    mw->output = mw->tok_embd;
  }
  DUET_RETURN_IF_ERROR(b.vector("output_norm.weight", d, &mw->output_norm));
  mw->layers.resize(hp.n_layers);
  for (uint32_t i = 0; i < hp.n_layers; ++i) {
    LayerWeights& l = mw->layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    DUET_RETURN_IF_ERROR(b.vector(p + "attn_norm.weight", d, &l.attn_norm));
    DUET_RETURN_IF_ERROR(b.matrix(p + "attn_q.weight", d, qd, &l.wq));
    DUET_RETURN_IF_ERROR(b.matrix(p + "attn_k.weight", d, kvd, &l.wk));
    DUET_RETURN_IF_ERROR(b.matrix(p + "attn_v.weight", d, kvd, &l.wv));
    DUET_RETURN_IF_ERROR(b.matrix(p + "attn_output.weight", qd, d, &l.wo));
    if (hp.arch == Arch::kQwen2) {
      DUET_RETURN_IF_ERROR(b.vector(p + "attn_q.bias", qd, &l.bq));
      DUET_RETURN_IF_ERROR(b.vector(p + "attn_k.bias", kvd, &l.bk));
      DUET_RETURN_IF_ERROR(b.vector(p + "attn_v.bias", kvd, &l.bv));
    }
    if (hp.arch == Arch::kQwen3 || hp.arch == Arch::kGemma3) {
      DUET_RETURN_IF_ERROR(b.vector(p + "attn_q_norm.weight", hd, &l.q_norm));
      DUET_RETURN_IF_ERROR(b.vector(p + "attn_k_norm.weight", hd, &l.k_norm));
    }
    if (hp.arch == Arch::kGemma3) {
      DUET_RETURN_IF_ERROR(b.vector(p + "post_attention_norm.weight", d, &l.post_attn_norm));
      DUET_RETURN_IF_ERROR(b.vector(p + "post_ffw_norm.weight", d, &l.post_ffn_norm));
    }
    DUET_RETURN_IF_ERROR(b.vector(p + "ffn_norm.weight", d, &l.ffn_norm));
    DUET_RETURN_IF_ERROR(b.matrix(p + "ffn_gate.weight", d, ff, &l.w_gate));
    DUET_RETURN_IF_ERROR(b.matrix(p + "ffn_up.weight", d, ff, &l.w_up));
    DUET_RETURN_IF_ERROR(b.matrix(p + "ffn_down.weight", ff, d, &l.w_down));
  }
  return Status::ok();
}

}  // namespace

Result<ModelWeights> bind_gguf_weights(std::shared_ptr<GgufFile> file) {
  ModelWeights mw;
  DUET_ASSIGN_OR_RETURN(mw.hp, hparams_from_gguf(*file));
  mw.gguf = file;
  mw.source = "gguf";
  // The GGUF converter permuted llama q/k rows for GGML's adjacent-pair RoPE; other
  // architectures keep HF's layout and use NEOX (half-split) RoPE.
  mw.rope_style = mw.hp.arch == Arch::kLlama ? RopeStyle::kNormal : RopeStyle::kNeox;
  std::map<std::string, Found> found;
  for (const GgufTensorInfo& t : file->tensors())
    found[t.name] = Found{t.name, t.dtype, t.shape, t.data, t.n_bytes, 0.0f, nullptr};
  Binder b([&](const std::string& n) -> const Found* {
    auto it = found.find(n);
    return it == found.end() ? nullptr : &it->second;
  }, &mw, nullptr);
  DUET_RETURN_IF_ERROR(bind_all(b, &mw, !mw.hp.tied_embeddings));
  DUET_RETURN_IF_ERROR(b.vector("rope_freqs.weight", mw.hp.head_dim / 2, &mw.rope_freqs, /*optional=*/true));
  DUET_RETURN_IF_ERROR(set_sliding_layers(&mw, nullptr));
  return mw;
}

Result<ModelWeights> bind_safetensors_weights(std::shared_ptr<SafetensorsModel> model) {
  ModelWeights mw;
  DUET_ASSIGN_OR_RETURN(mw.hp, hparams_from_hf_config(model->config()));
  DUET_RETURN_IF_ERROR(apply_rope_parameters(model->config(), &mw.hp));
  DUET_RETURN_IF_ERROR(set_sliding_layers(&mw, &model->config()));
  mw.safetensors = model;
  mw.source = "safetensors";
  // HF q/k rows are in rotate-half order: NEOX RoPE for every architecture, no permutation.
  mw.rope_style = RopeStyle::kNeox;
  std::map<std::string, Found> found;
  for (const SafetensorsTensor& t : model->tensors()) {
    int permute = 0;
    float shift = 0;
    auto name = gguf_name_from_hf(t.name, mw.hp.arch, &permute, mw.hp, &shift);
    if (!name) continue;  // rotary caches, vision towers, FP8 scales: not decoder weights
    Found f;
    f.src_name = t.name;
    f.dtype = t.dtype;
    f.shape.assign(t.shape.rbegin(), t.shape.rend());
    f.data = t.data;
    f.n_bytes = t.n_bytes;
    f.shift = shift;
    f.st = &t;
    if (!found.emplace(*name, f).second)
      return invalid_argument("tensors '" + found[*name].src_name + "' and '" + t.name + "' both map to " + *name);
  }
  const bool has_output = !mw.hp.tied_embeddings;
  Binder b([&](const std::string& n) -> const Found* {
    auto it = found.find(n);
    return it == found.end() ? nullptr : &it->second;
  }, &mw, model.get());
  DUET_RETURN_IF_ERROR(bind_all(b, &mw, has_output));
  return mw;
}

Result<ModelWeights> load_model_weights(const std::string& path) {
  bool gguf = false;
  if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
    char magic[4] = {};
    gguf = std::fread(magic, 1, 4, f) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
    std::fclose(f);
  }
  if (gguf) {
    DUET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::open(path));
    return bind_gguf_weights(std::shared_ptr<GgufFile>(std::move(g)));
  }
  DUET_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsModel> m, SafetensorsModel::open(path));
  return bind_safetensors_weights(std::shared_ptr<SafetensorsModel>(std::move(m)));
}

}  // namespace duet
