// tokenizer.json / tokenizer_config.json -> TokenizerSpec (see hf_tokenizer_json.h). Parses with
// nlohmann::json in non-throwing mode; value accessors are guarded by type checks so no
// exception leaves this file.
#include "tokenizer/hf_tokenizer_json.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/text.h"

namespace duet {
namespace {

using json = nlohmann::json;

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error("cannot read '" + path + "'");
  return ss.str();
}

bool get_bool(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

std::string get_string(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string type_of(const json& j) { return j.is_object() ? get_string(j, "type") : std::string(); }

// Regexes are compared with CR/LF written as escapes, whichever way the file spells them.
std::string canonical_regex(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '\r')
      out += "\\r";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kDeepseekV3Regexes[3] = {
    "\\p{N}{1,3}",
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",  // [一-龥぀-ゟ゠-ヿ]+
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

Status parse_normalizer(const json& n, TokenizerSpec* spec) {
  if (n.is_null()) return Status::ok();
  std::string t = type_of(n);
  if (t == "NFC") {
    spec->normalizer = Normalizer::kNfc;
    return Status::ok();
  }
  if (t == "Sequence") {
    auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array())
      return invalid_argument("tokenizer.json: Sequence normalizer without a list");
    for (const json& sub : *it) DUET_RETURN_IF_ERROR(parse_normalizer(sub, spec));
    return Status::ok();
  }
  return unsupported("tokenizer.json: normalizer '" + t + "' is not supported (only NFC)");
}

// Returns the Split regex of a pre-tokenizer entry, or "" when it is not an isolated Split.
std::string split_regex(const json& p) {
  if (type_of(p) != "Split") return "";
  if (get_string(p, "behavior") != "Isolated" || get_bool(p, "invert", false)) return "";
  auto pat = p.find("pattern");
  if (pat == p.end() || !pat->is_object()) return "";
  std::string re = get_string(*pat, "Regex");
  return canonical_regex(re);
}

Status parse_pre_tokenizer(const json& p, TokenizerSpec* spec) {
  auto fail = [&]() {
    return unsupported("tokenizer.json: pre_tokenizer " + p.dump().substr(0, 300) +
                       " is not one of the supported byte-level families (gpt-2, llama3, qwen2, "
                       "deepseek-v3, smollm)");
  };
  std::string t = type_of(p);
  if (t == "ByteLevel") {
    if (!get_bool(p, "use_regex", true)) return fail();
    spec->pre_type = "gpt-2";
    spec->add_prefix_space = get_bool(p, "add_prefix_space", false);
    return Status::ok();
  }
  if (t != "Sequence") return fail();
  auto it = p.find("pretokenizers");
  if (it == p.end() || !it->is_array() || it->empty()) return fail();
  const json& seq = *it;
  const json& last = seq.back();
  if (type_of(last) != "ByteLevel") return fail();
  const bool last_regex = get_bool(last, "use_regex", true);
  if (get_bool(last, "add_prefix_space", false)) return fail();
  if (seq.size() == 2 && type_of(seq[0]) == "Digits" &&
      get_bool(seq[0], "individual_digits", false) && last_regex) {
    spec->pre_type = "smollm";
    return Status::ok();
  }
  if (last_regex) return fail();
  if (seq.size() == 2) {
    std::string re = split_regex(seq[0]);
    if (re == kLlama3Regex)
      spec->pre_type = "llama3";
    else if (re == kQwen2Regex)
      spec->pre_type = "qwen2";
    else
      return fail();
    return Status::ok();
  }
  if (seq.size() == 4) {
    for (int k = 0; k < 3; ++k) {
      if (split_regex(seq[k]) != canonical_regex(kDeepseekV3Regexes[k])) return fail();
    }
    spec->pre_type = "deepseek-v3";
    return Status::ok();
  }
  return fail();
}

// Token content of a tokenizer_config.json bos/eos entry: a string or an AddedToken object.
std::string config_token(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return get_string(*it, "content");
  return "";
}

// SAX handler: builds a DOM for everything except model.vocab and model.merges, which hold
// hundreds of thousands of entries and go straight into vectors (a DOM of them costs more time
// than the rest of loading together).
class TokenizerJsonSax : public nlohmann::json_sax<json> {
 public:
  json root;
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  bool has_vocab = false, has_merges = false;
  std::string error;

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) {
      vocab.emplace_back(std::move(vocab_key_), v);
      return true;
    }
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      if (v > static_cast<number_unsigned_t>(INT64_MAX)) return fail("vocab id out of range");
      vocab.emplace_back(std::move(vocab_key_), static_cast<int64_t>(v));
      return true;
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) {
      if (depth_ == capture_depth_ + 2) {  // inside a [a, b] pair
        pair_.push_back(std::move(v));
        return true;
      }
      size_t sp = v.find(' ');
      if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos) {
        return fail("merge '" + v + "' is not two space-separated tokens");
      }
      merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      return true;
    }
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return fail("binary value"); }
  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) {
      if (mode_ == Mode::kMerges) return fail("model.merges holds an object");
      return fail("model.vocab holds a nested value");
    }
    if (is_model_child("vocab")) {
      mode_ = Mode::kVocab;
      capture_depth_ = depth_++;
      has_vocab = true;
      return true;
    }
    ++depth_;
    return open(json::object());
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab)
      vocab_key_ = std::move(k);
    else
      key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    --depth_;
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kVocab) return fail("model.vocab holds an array");
    if (mode_ == Mode::kMerges) {
      if (depth_ != capture_depth_ + 1) return fail("model.merges nests too deep");
      ++depth_;
      pair_.clear();
      return true;
    }
    if (is_model_child("merges")) {
      mode_ = Mode::kMerges;
      capture_depth_ = depth_++;
      has_merges = true;
      return true;
    }
    ++depth_;
    return open(json::array());
  }
  bool end_array() override {
    --depth_;
    if (mode_ == Mode::kMerges) {
      if (depth_ == capture_depth_) {
        mode_ = Mode::kDom;
        return true;
      }
      if (pair_.size() != 2) return fail("a merge pair does not have two tokens");
      merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::json::exception& ex) override {
    if (error.empty())
      error = "JSON syntax error at byte " + std::to_string(position) + ": " + ex.what();
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges };

  bool fail(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  // True when the container about to open is root.model.<name>.
  bool is_model_child(const char* name) const {
    return stack_.size() == 2 && names_[1] == "model" && stack_[1]->is_object() && key_ == name;
  }
  bool value(json v) {
    if (mode_ == Mode::kVocab) return fail("model.vocab value is not an integer");
    if (mode_ == Mode::kMerges) return fail("model.merges holds a non-string");
    if (stack_.empty()) {
      root = std::move(v);
      return true;
    }
    json* top = stack_.back();
    if (top->is_object())
      (*top)[key_] = std::move(v);
    else
      top->push_back(std::move(v));
    return true;
  }
  bool open(json v) {
    json* child;
    std::string name;
    if (stack_.empty()) {
      root = std::move(v);
      child = &root;
    } else if (stack_.back()->is_object()) {
      name = key_;
      child = &((*stack_.back())[key_] = std::move(v));
    } else {
      stack_.back()->push_back(std::move(v));
      child = &stack_.back()->back();  // stable: the parent grows only after this child closes
    }
    stack_.push_back(child);
    names_.push_back(std::move(name));
    return true;
  }
  bool close() {
    stack_.pop_back();
    names_.pop_back();
    return true;
  }

  Mode mode_ = Mode::kDom;
  size_t depth_ = 0, capture_depth_ = 0;
  std::vector<json*> stack_;
  std::vector<std::string> names_;
  std::string key_, vocab_key_;
  std::vector<std::string> pair_;
};

}  // namespace

void tokenizer_spec_add_default_eog_ids(TokenizerSpec* spec) {
  static const char* const kEogTexts[] = {
      "<|eot_id|>",
      "<|im_end|>",
      "<|end|>",
      "<end_of_turn>",
      "<|endoftext|>",
      "<|end_of_text|>",
      "<|eom_id|>",
      "<EOT>",
      "<\xEF\xBD\x9C"
      "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // <｜end▁of▁sentence｜>
      "<end_of_utterance>",
  };
  auto add = [&](int32_t id) {
    if (id < 0) return;
    if (std::find(spec->eog_ids.begin(), spec->eog_ids.end(), id) == spec->eog_ids.end())
      spec->eog_ids.push_back(id);
  };
  add(spec->eos_id);
  for (const char* t : kEogTexts) {
    for (size_t id = 0; id < spec->tokens.size(); ++id) {
      if (spec->tokens[id] == t) {
        add(static_cast<int32_t>(id));
        break;
      }
    }
  }
}

namespace {

// The loader's messages quote strings of the file (merges, token texts, type names): the public
// entry points pass them through printable(), so that a hostile file cannot split or flood the
// one-line message (a merge holding a newline, found by fuzz_tokenizer_json).

Result<TokenizerSpec> spec_from_text(const std::string& tokenizer_json, const std::string& config_json) {
  TokenizerJsonSax sax;
  bool parsed = false;
  try {
    parsed = json::sax_parse(tokenizer_json, &sax);
  } catch (const std::exception& e) {  // nlohmann reports through parse_error; this is a backstop
    sax.error = e.what();
  }
  if (!parsed)
    return invalid_argument("tokenizer.json: " +
                            (sax.error.empty() ? "not valid JSON" : sax.error));
  json& root = sax.root;
  if (!root.is_object()) return invalid_argument("tokenizer.json: not a JSON object");
  TokenizerSpec spec;
  spec.flavor = TokenizerFlavor::kHf;
  spec.model = TokenizerModel::kBpe;

  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object())
    return invalid_argument("tokenizer.json: missing \"model\"");
  const json& model = *mit;
  std::string mtype = get_string(model, "type");
  if (mtype != "BPE")
    return unsupported("tokenizer.json: model type '" + mtype + "' is not supported (only BPE)");
  if (get_bool(model, "byte_fallback", false)) {
    return unsupported(
        "tokenizer.json: BPE with byte_fallback (SentencePiece-style) is not supported from "
        "tokenizer.json");
  }
  if (!get_string(model, "continuing_subword_prefix").empty() ||
      !get_string(model, "end_of_word_suffix").empty()) {
    return unsupported("tokenizer.json: BPE subword prefixes/suffixes are not supported");
  }
  spec.ignore_merges = get_bool(model, "ignore_merges", false);

  if (!sax.has_vocab) return invalid_argument("tokenizer.json: model.vocab is not an object");
  constexpr int64_t kMaxVocab = 1 << 24;
  int64_t max_id = -1;
  for (const auto& [text, id] : sax.vocab) {
    if (id < 0 || id >= kMaxVocab) {
      return invalid_argument("tokenizer.json: vocab id " + std::to_string(id) + " of '" + text +
                              "' out of range [0, 2^24)");
    }
    max_id = std::max(max_id, id);
  }
  std::vector<AddedToken> added;
  auto ait = root.find("added_tokens");
  if (ait != root.end() && ait->is_array()) {
    for (const json& a : *ait) {
      if (!a.is_object()) return invalid_argument("tokenizer.json: added token is not an object");
      auto idit = a.find("id");
      if (idit == a.end() || !idit->is_number_integer())
        return invalid_argument("tokenizer.json: added token without integer id");
      AddedToken t;
      int64_t id = idit->get<int64_t>();
      if (id < 0 || id >= kMaxVocab)
        return invalid_argument("tokenizer.json: added token id " + std::to_string(id) +
                                " out of range");
      t.id = static_cast<int32_t>(id);
      t.content = get_string(a, "content");
      if (t.content.empty())
        return invalid_argument("tokenizer.json: added token " + std::to_string(id) +
                                " has empty content");
      t.special = get_bool(a, "special", false);
      t.lstrip = get_bool(a, "lstrip", false);
      t.rstrip = get_bool(a, "rstrip", false);
      t.normalized = get_bool(a, "normalized", !t.special);
      t.single_word = get_bool(a, "single_word", false);
      max_id = std::max(max_id, id);
      added.push_back(std::move(t));
    }
  }
  if (max_id < 0) return invalid_argument("tokenizer.json: empty vocabulary");
  spec.tokens.assign(static_cast<size_t>(max_id + 1), std::string());
  spec.token_types.assign(spec.tokens.size(), TokenType::kUnused);
  for (auto& [text, id] : sax.vocab) {
    spec.tokens[static_cast<size_t>(id)] = std::move(text);
    spec.token_types[static_cast<size_t>(id)] = TokenType::kNormal;
  }
  for (const AddedToken& a : added) {
    if (spec.token_types[a.id] == TokenType::kUnused) spec.tokens[a.id] = a.content;
    spec.token_types[a.id] = a.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  spec.added_tokens = std::move(added);
  spec.merges = std::move(sax.merges);
  auto nit = root.find("normalizer");
  if (nit != root.end()) DUET_RETURN_IF_ERROR(parse_normalizer(*nit, &spec));
  auto pit = root.find("pre_tokenizer");
  if (pit == root.end() || pit->is_null())
    return unsupported("tokenizer.json: no pre_tokenizer (byte-level BPE expected)");
  DUET_RETURN_IF_ERROR(parse_pre_tokenizer(*pit, &spec));
  auto dit = root.find("decoder");
  if (dit != root.end() && !dit->is_null() && type_of(*dit) != "ByteLevel") {
    return unsupported("tokenizer.json: decoder '" + type_of(*dit) +
                       "' is not supported (only ByteLevel)");
  }

  auto id_of = [&](const std::string& content) -> int32_t {
    if (content.empty()) return -1;
    for (const AddedToken& a : spec.added_tokens) {
      if (a.content == content) return a.id;
    }
    for (size_t id = 0; id < spec.tokens.size(); ++id) {
      if (spec.tokens[id] == content) return static_cast<int32_t>(id);
    }
    return -1;
  };

  // Post-processor: a TemplateProcessing "single" template says which special tokens wrap text.
  auto ppit = root.find("post_processor");
  if (ppit != root.end() && ppit->is_object()) {
    std::vector<const json*> procs;
    if (type_of(*ppit) == "Sequence" && ppit->contains("processors") &&
        (*ppit)["processors"].is_array()) {
      for (const json& p : (*ppit)["processors"]) procs.push_back(&p);
    } else {
      procs.push_back(&*ppit);
    }
    for (const json* p : procs) {
      if (type_of(*p) != "TemplateProcessing") continue;
      auto single = p->find("single");
      if (single == p->end() || !single->is_array()) continue;
      bool seen_text = false;
      for (const json& piece : *single) {
        if (!piece.is_object()) continue;
        if (piece.contains("Sequence")) {
          seen_text = true;
        } else if (piece.contains("SpecialToken") && piece["SpecialToken"].is_object()) {
          int32_t id = id_of(get_string(piece["SpecialToken"], "id"));
          if (id < 0) continue;
          if (!seen_text) {
            spec.bos_id = id;
            spec.add_bos = true;
          } else {
            spec.eos_id = id;
            spec.add_eos = true;
          }
        }
      }
    }
  }

  if (!config_json.empty()) {
    json cfg = json::parse(config_json, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object())
      return invalid_argument("tokenizer_config.json: not a JSON object");
    int32_t bos = id_of(config_token(cfg, "bos_token"));
    int32_t eos = id_of(config_token(cfg, "eos_token"));
    int32_t unk = id_of(config_token(cfg, "unk_token"));
    int32_t pad = id_of(config_token(cfg, "pad_token"));
    if (bos >= 0) spec.bos_id = bos;
    if (eos >= 0) spec.eos_id = eos;
    if (unk >= 0) spec.unk_id = unk;
    if (pad >= 0) spec.pad_id = pad;
    // transformers builds the post-processor from these flags when they are present.
    spec.add_bos = get_bool(cfg, "add_bos_token", spec.add_bos);
    spec.add_eos = get_bool(cfg, "add_eos_token", spec.add_eos);
    auto ct = cfg.find("chat_template");
    if (ct != cfg.end()) {
      if (ct->is_string()) {
        spec.chat_template = ct->get<std::string>();
      } else if (ct->is_array()) {
        // [{"name": ..., "template": ...}]: prefer "default".
        for (const json& e : *ct) {
          if (!e.is_object()) continue;
          std::string name = get_string(e, "name");
          if (spec.chat_template.empty() || name == "default")
            spec.chat_template = get_string(e, "template");
        }
      }
    }
  }
  if (spec.add_bos && spec.bos_id < 0) spec.add_bos = false;
  if (spec.add_eos && spec.eos_id < 0) spec.add_eos = false;
  tokenizer_spec_add_default_eog_ids(&spec);
  return spec;
}

}  // namespace

Result<TokenizerSpec> tokenizer_spec_from_hf_json_text(const std::string& tokenizer_json,
                                                       const std::string& config_json) {
  auto spec = spec_from_text(tokenizer_json, config_json);
  if (!spec.is_ok()) return Status(spec.status().code(), printable(spec.status().message(), kMaxQuotedText));
  return spec;
}

Result<TokenizerSpec> tokenizer_spec_from_hf_json(const std::string& tokenizer_json_path,
                                                  const std::string& config_path) {
  auto text = read_file(tokenizer_json_path);
  if (!text.is_ok()) return text.status();
  std::string cfg_path = config_path;
  if (cfg_path.empty()) {
    size_t slash = tokenizer_json_path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : tokenizer_json_path.substr(0, slash);
    std::string candidate = dir + "/tokenizer_config.json";
    if (std::ifstream(candidate).good()) cfg_path = candidate;
  }
  std::string cfg_text;
  if (!cfg_path.empty()) {
    auto c = read_file(cfg_path);
    if (!c.is_ok()) return c.status();
    cfg_text = std::move(c.value());
  }
  auto spec = tokenizer_spec_from_hf_json_text(text.value(), cfg_text);
  if (!spec.is_ok()) {
    return Status(spec.status().code(), tokenizer_json_path + ": " + spec.status().message());
  }
  return spec;
}

}  // namespace duet
