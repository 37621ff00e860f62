// summarize_model for GGUF and safetensors (see model_summary.h).
#include "formats/model_summary.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/log.h"
#include "base/text.h"
#include "formats/gguf.h"
#include "formats/quant_mix.h"
#include "formats/safetensors.h"

namespace duet {
namespace {

Result<ModelSummary> summarize_gguf(const std::string& path) {
  DUET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::open(path));
  ModelSummary s;
  s.path = path;
  s.format = "gguf";
  s.file_bytes = g->file_size();
  s.architecture = g->architecture();
  DUET_ASSIGN_OR_RETURN(s.name, g->get_string("general.name", ""));
  const std::string a = s.architecture;
  DUET_ASSIGN_OR_RETURN(int64_t ctx, g->get_int(a + ".context_length", 0));
  DUET_ASSIGN_OR_RETURN(int64_t nl, g->get_int(a + ".block_count", 0));
  DUET_ASSIGN_OR_RETURN(int64_t dm, g->get_int(a + ".embedding_length", 0));
  s.context_length = static_cast<uint64_t>(ctx);
  s.n_layers = static_cast<uint64_t>(nl);
  s.d_model = static_cast<uint64_t>(dm);
  const GgufValue* toks = g->find("tokenizer.ggml.tokens");
  const GgufArray* tok_arr = toks && toks->is_array() ? &toks->as_array() : nullptr;
  if (tok_arr) s.vocab_size = tok_arr->size();
  else {
    DUET_ASSIGN_OR_RETURN(int64_t vs, g->get_int(a + ".vocab_size", 0));
    s.vocab_size = static_cast<uint64_t>(vs);
  }
  if (const GgufValue* ft = g->find("general.file_type")) s.file_type = file_type_name(static_cast<uint32_t>(ft->as_int()));
  else s.file_type = "unspecified";
  for (const char* role : {"bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask"}) {
    std::string key = std::string("tokenizer.ggml.") + role + "_token_id";
    const GgufValue* v = g->find(key);
    if (!v || !v->is_int()) continue;
    int64_t id = v->as_int();
    std::string text;
    if (tok_arr && tok_arr->elem_type == GgufType::kString && id >= 0 &&
        static_cast<uint64_t>(id) < tok_arr->strings.size())
      text = tok_arr->strings[id];
    s.special_tokens.emplace_back(role, std::to_string(id) + " '" + text + "'");
  }
  s.has_chat_template = g->find("tokenizer.chat_template") != nullptr;
  for (const auto& t : g->tensors()) {
    s.n_params += t.n_elements;
    auto& st = s.by_type[std::string(dtype_name(t.dtype))];
    ++st.n_tensors;
    st.n_bytes += t.n_bytes;
    st.n_elements += t.n_elements;
    s.tensors.push_back({t.name, std::string(dtype_name(t.dtype)), t.shape, t.n_bytes});
  }
  s.extra = "GGUF v" + std::to_string(g->version()) + ", " + std::to_string(g->metadata().size()) +
            " metadata keys, alignment " + std::to_string(g->alignment());
  return s;
}

nlohmann::json read_json_or_empty(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  return j.is_discarded() || !j.is_object() ? nlohmann::json::object() : j;
}

uint64_t json_u64(const nlohmann::json& j, const char* key) {
  if (j.contains(key) && j[key].is_number_unsigned()) return j[key].get<uint64_t>();
  return 0;
}

Result<ModelSummary> summarize_safetensors(const std::string& path) {
  DUET_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsModel> m, SafetensorsModel::open(path));
  ModelSummary s;
  s.path = path;
  s.format = "safetensors";
  const nlohmann::json& cfg = m->config();
  // Gemma 3 configs nest the language model's settings under text_config.
  const nlohmann::json& tc = cfg.contains("text_config") && cfg["text_config"].is_object() ? cfg["text_config"] : cfg;
  if (cfg.contains("model_type") && cfg["model_type"].is_string()) s.architecture = cfg["model_type"].get<std::string>();
  s.context_length = json_u64(tc, "max_position_embeddings");
  s.vocab_size = json_u64(tc, "vocab_size");
  s.n_layers = json_u64(tc, "num_hidden_layers");
  s.d_model = json_u64(tc, "hidden_size");
  for (const auto& p : m->shard_paths()) {
    struct stat st;
    if (stat(p.c_str(), &st) == 0) s.file_bytes += static_cast<uint64_t>(st.st_size);
  }
  std::map<std::string, uint64_t> weight_bytes;
  for (const auto& t : m->tensors()) {
    const bool is_scale = ends_with(t.name, "_scale") || ends_with(t.name, "_scale_inv");
    if (!is_scale) s.n_params += t.n_elements;
    auto& st = s.by_type[std::string(dtype_name(t.dtype))];
    ++st.n_tensors;
    st.n_bytes += t.n_bytes;
    st.n_elements += t.n_elements;
    if (!is_scale && t.shape.size() >= 2) weight_bytes[std::string(dtype_name(t.dtype))] += t.n_bytes;
    std::vector<uint64_t> shape(t.shape.rbegin(), t.shape.rend());  // report GGML order like GGUF
    s.tensors.push_back({t.name, std::string(dtype_name(t.dtype)), shape, t.n_bytes});
  }
  const Fp8Info& fp8 = m->fp8();
  s.fp8_layout = fp8_layout_name(fp8.layout);
  std::string dominant;
  uint64_t best = 0;
  for (auto& [k, v] : weight_bytes)
    if (v > best) best = v, dominant = k;
  s.file_type = dominant.empty() ? "unknown" : dominant;
  if (fp8.layout != Fp8ScaleLayout::kNone) {
    s.file_type = "FP8 E4M3, " + std::string(fp8_layout_name(fp8.layout)) + " scales";
    if (fp8.layout == Fp8ScaleLayout::kBlock)
      s.file_type += " " + std::to_string(fp8.block_rows) + "x" + std::to_string(fp8.block_cols);
    if (!fp8.quant_method.empty()) s.file_type += " (" + fp8.quant_method + ")";
    if (fp8.layout != Fp8ScaleLayout::kBlock)
      s.file_type += fp8.static_input_scale ? ", static input scales" : ", dynamic activations";
  }
  nlohmann::json tk = read_json_or_empty(m->dir() + "/tokenizer_config.json");
  s.has_chat_template = tk.contains("chat_template");
  for (const char* role : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
    if (!tk.contains(role)) continue;
    const auto& v = tk[role];
    std::string text = v.is_string() ? v.get<std::string>()
                       : (v.is_object() && v.contains("content") && v["content"].is_string())
                           ? v["content"].get<std::string>() : "";
    if (!text.empty()) s.special_tokens.emplace_back(std::string(role).substr(0, std::string(role).size() - 6), "'" + text + "'");
  }
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    if (cfg.contains(key) && !cfg[key].is_null())
      s.special_tokens.emplace_back(std::string(key), cfg[key].dump());
  }
  s.extra = std::to_string(m->shard_paths().size()) + " shard(s), " + std::to_string(m->tensors().size()) + " tensors";
  return s;
}

}  // namespace

Result<ModelSummary> summarize_model(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return not_found(path + ": no such file or directory");
  if (S_ISREG(st.st_mode)) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    char magic[4] = {};
    size_t n = f ? std::fread(magic, 1, 4, f) : 0;
    if (f) std::fclose(f);
    if (n == 4 && std::string(magic, 4) == "GGUF") return summarize_gguf(path);
    if (ends_with(path, ".gguf")) return summarize_gguf(path);  // reports the bad magic
  }
  return summarize_safetensors(path);
}

nlohmann::ordered_json summary_to_json(const ModelSummary& s, bool with_tensors) {
  nlohmann::ordered_json j;
  j["path"] = s.path;
  j["format"] = s.format;
  j["architecture"] = s.architecture;
  j["name"] = s.name;
  j["n_params"] = s.n_params;
  j["file_bytes"] = s.file_bytes;
  j["file_type"] = s.file_type;
  j["context_length"] = s.context_length;
  j["vocab_size"] = s.vocab_size;
  j["n_layers"] = s.n_layers;
  j["d_model"] = s.d_model;
  nlohmann::ordered_json types = nlohmann::ordered_json::object();
  for (auto& [k, v] : s.by_type)
    types[k] = {{"n_tensors", v.n_tensors}, {"n_bytes", v.n_bytes}, {"n_elements", v.n_elements}};
  j["types"] = types;
  nlohmann::ordered_json sp = nlohmann::ordered_json::object();
  for (auto& [k, v] : s.special_tokens) sp[k] = v;
  j["special_tokens"] = sp;
  j["has_chat_template"] = s.has_chat_template;
  if (s.format == "safetensors") j["fp8_layout"] = s.fp8_layout;
  j["notes"] = s.extra;
  if (with_tensors) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const auto& t : s.tensors) arr.push_back({{"name", t.name}, {"type", t.type}, {"shape", t.shape}, {"n_bytes", t.n_bytes}});
    j["tensors"] = arr;
  }
  return j;
}

std::string summary_to_text(const ModelSummary& s, bool with_tensors) {
  std::ostringstream o;
  char buf[256];
  auto row = [&](const char* k, const std::string& v) {
    std::snprintf(buf, sizeof buf, "%-16s %s\n", k, v.c_str());
    o << buf;
  };
  row("path", s.path);
  row("format", s.format + " (" + s.extra + ")");
  row("architecture", s.architecture.empty() ? "?" : s.architecture);
  if (!s.name.empty()) row("name", s.name);
  std::snprintf(buf, sizeof buf, "%.3f B (%llu)", s.n_params / 1e9, (unsigned long long)s.n_params);
  row("parameters", buf);
  row("file size", format_bytes(s.file_bytes));
  row("file type", s.file_type);
  row("context length", std::to_string(s.context_length));
  row("vocab size", std::to_string(s.vocab_size));
  row("layers", std::to_string(s.n_layers));
  row("d_model", std::to_string(s.d_model));
  if (s.format == "safetensors") row("fp8 scales", s.fp8_layout);
  row("chat template", s.has_chat_template ? "yes" : "no");
  for (auto& [k, v] : s.special_tokens) row(("  " + k).c_str(), v);
  o << "\ntype       tensors        elements           bytes\n";
  for (auto& [k, v] : s.by_type) {
    std::snprintf(buf, sizeof buf, "%-8s %9llu %15llu %15llu\n", k.c_str(), (unsigned long long)v.n_tensors,
                  (unsigned long long)v.n_elements, (unsigned long long)v.n_bytes);
    o << buf;
  }
  if (with_tensors) {
    o << "\n";
    for (const auto& t : s.tensors) {
      std::string shape;
      for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? " x " : "") + std::to_string(t.shape[i]);
      std::snprintf(buf, sizeof buf, "%-48s %-8s %-24s %12llu\n", t.name.c_str(), t.type.c_str(), shape.c_str(),
                    (unsigned long long)t.n_bytes);
      o << buf;
    }
  }
  return o.str();
}

}  // namespace duet
