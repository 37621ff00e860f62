// HF tokenizer.json -> GGUF tokenizer metadata (see hf_tokenizer_gguf.h).
#include "formats/hf_tokenizer_gguf.h"

#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

namespace duet {
namespace {

// GGUF token types (llama.cpp's llama_token_type).
constexpr int64_t kTokNormal = 1, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5;

Result<nlohmann::json> load_json(const std::string& path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (required) return not_found(path + ": cannot open");
    return nlohmann::json::object();
  }
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(path + ": not a JSON object");
  return j;
}

std::string token_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

Status hf_tokenizer_to_gguf(const std::string& dir, const std::string& pre, uint32_t vocab_size, GgufWriter& w) {
  DUET_ASSIGN_OR_RETURN(nlohmann::json tj, load_json(dir + "/tokenizer.json", true));
  DUET_ASSIGN_OR_RETURN(nlohmann::json cfg, load_json(dir + "/tokenizer_config.json", false));
  if (!tj.contains("model") || !tj["model"].is_object()) return invalid_argument(dir + "/tokenizer.json: no \"model\"");
  const nlohmann::json& m = tj["model"];
  if (!m.contains("type") || m["type"] != "BPE" || !m.contains("vocab") || !m["vocab"].is_object())
    return unsupported(dir + "/tokenizer.json: only byte-level BPE tokenizers can be converted; use --tokenizer-from FILE.gguf");
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  auto put = [&](int64_t id, const std::string& text, int64_t type) -> Status {
    if (id < 0 || id >= (1 << 24)) return invalid_argument("token id " + std::to_string(id) + " out of range");
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, 0);
    }
    tokens[id] = text;
    types[id] = type;
    return Status::ok();
  };
  for (auto& [text, id] : m["vocab"].items()) {
    if (!id.is_number_integer()) return invalid_argument("tokenizer.json: vocab id of '" + text + "' is not an integer");
    DUET_RETURN_IF_ERROR(put(id.get<int64_t>(), text, kTokNormal));
  }
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const auto& at : tj["added_tokens"]) {
      if (!at.is_object() || !at.contains("id") || !at["id"].is_number_integer() || !at.contains("content")) continue;
      bool special = at.contains("special") && at["special"].is_boolean() && at["special"].get<bool>();
      DUET_RETURN_IF_ERROR(put(at["id"].get<int64_t>(), token_text(at), special ? kTokControl : kTokUserDefined));
    }
  }
  if (tokens.size() > vocab_size)
    return invalid_argument("tokenizer has " + std::to_string(tokens.size()) + " tokens but the model has " +
                            std::to_string(vocab_size) + " embedding rows");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == 0) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = kTokUnused;
    }
  while (tokens.size() < vocab_size) {
    tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
    types.push_back(kTokUnused);
  }
  GgufArray merges;
  merges.elem_type = GgufType::kString;
  if (m.contains("merges") && m["merges"].is_array()) {
    for (const auto& mg : m["merges"]) {
      if (mg.is_string()) merges.strings.push_back(mg.get<std::string>());
      else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string())
        merges.strings.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
    }
  }
  GgufArray toks;
  toks.elem_type = GgufType::kString;
  toks.strings = std::move(tokens);
  GgufArray tt;
  tt.elem_type = GgufType::kInt32;
  tt.ints = std::move(types);
  w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
  w.set("tokenizer.ggml.pre", GgufValue::str(pre));
  auto find_id = [&](const std::string& text) -> int64_t {
    for (size_t i = 0; i < toks.strings.size(); ++i)
      if (toks.strings[i] == text) return static_cast<int64_t>(i);
    return -1;
  };
  w.set("tokenizer.ggml.tokens", GgufValue::array(std::move(toks)));
  w.set("tokenizer.ggml.token_type", GgufValue::array(std::move(tt)));
  w.set("tokenizer.ggml.merges", GgufValue::array(std::move(merges)));
  for (const char* role : {"bos", "eos", "pad", "unk"}) {
    std::string key = std::string(role) + "_token";
    if (!cfg.contains(key)) continue;
    std::string text = token_text(cfg[key]);
    int64_t id = text.empty() ? -1 : find_id(text);
    if (id >= 0) w.set(std::string("tokenizer.ggml.") + role + "_token_id", GgufValue::u32(static_cast<uint32_t>(id)));
  }
  for (const char* flag : {"add_bos_token", "add_eos_token"}) {
    if (cfg.contains(flag) && cfg[flag].is_boolean())
      w.set(std::string("tokenizer.ggml.") + flag, GgufValue::boolean(cfg[flag].get<bool>()));
  }
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
    w.set("tokenizer.chat_template", GgufValue::str(cfg["chat_template"].get<std::string>()));
  return Status::ok();
}

Status copy_gguf_tokenizer(const GgufFile& src, GgufWriter& w) {
  int n = 0;
  for (const auto& [k, v] : src.metadata())
    if (k.rfind("tokenizer.", 0) == 0) {
      w.set(k, v);
      ++n;
    }
  if (n == 0) return not_found(src.path() + ": has no tokenizer.* metadata");
  return Status::ok();
}

}  // namespace duet
