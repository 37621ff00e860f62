// GGUF metadata -> TokenizerSpec (see gguf_tokenizer.h). Mirrors llama.cpp's llama_vocab::load
// for the vocabulary types duet implements ("gpt2" BPE and "llama" SPM).
#include "formats/gguf_tokenizer.h"

#include <algorithm>
#include <string>

#include "base/text.h"
#include "tokenizer/hf_tokenizer_json.h"

namespace duet {
namespace {

Result<bool> get_bool(const GgufFile& f, const char* key, bool def) {
  const GgufValue* v = f.find(key);
  if (!v) return def;
  if (v->is_array() || v->is_string())
    return invalid_argument(std::string(key) + ": expected a bool");
  return v->as_int() != 0;
}

// Returns -2 when absent.
Result<int64_t> get_id(const GgufFile& f, const char* key) {
  const GgufValue* v = f.find(key);
  if (!v) return int64_t{-2};
  if (!v->is_int()) return invalid_argument(std::string(key) + ": expected an integer");
  return v->as_int();
}

bool in_list(const std::string& s, std::initializer_list<const char*> list) {
  for (const char* x : list) {
    if (s == x) return true;
  }
  return false;
}

}  // namespace

Result<TokenizerSpec> tokenizer_spec_from_gguf(const GgufFile& file) {
  TokenizerSpec spec;
  spec.flavor = TokenizerFlavor::kLlamaCpp;
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model.is_ok()) return model.status();
  auto pre = file.get_string("tokenizer.ggml.pre");
  if (!pre.is_ok()) return pre.status();

  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array() || tokens->as_array().elem_type != GgufType::kString) {
    return invalid_argument(file.path() + ": tokenizer.ggml.tokens missing or not a string array");
  }
  spec.tokens = tokens->as_array().strings;
  const size_t n = spec.tokens.size();
  if (n == 0) return invalid_argument(file.path() + ": tokenizer.ggml.tokens is empty");
  for (size_t i = 0; i < n; ++i) {
    if (spec.tokens[i].empty())
      spec.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
  }

  if (const GgufValue* sc = file.find("tokenizer.ggml.scores")) {
    const GgufArray& a = sc->as_array();
    if (!sc->is_array() || a.size() < n) {
      return invalid_argument(file.path() + ": tokenizer.ggml.scores has " +
                              std::to_string(a.size()) + " entries for " + std::to_string(n) +
                              " tokens");
    }
    spec.scores.resize(n);
    for (size_t i = 0; i < n; ++i) {
      spec.scores[i] =
          a.floats.empty() ? static_cast<float>(a.ints[i]) : static_cast<float>(a.floats[i]);
    }
  }
  if (const GgufValue* tt = file.find("tokenizer.ggml.token_type")) {
    const GgufArray& a = tt->as_array();
    if (!tt->is_array() || a.ints.size() < n) {
      return invalid_argument(file.path() + ": tokenizer.ggml.token_type has " +
                              std::to_string(a.size()) + " entries for " + std::to_string(n) +
                              " tokens");
    }
    spec.token_types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t t = a.ints[i];
      spec.token_types[i] = (t >= 1 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
    }
  }

  int64_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  if (model.value() == "llama") {
    spec.model = TokenizerModel::kSpm;
    bos = 1, eos = 2, unk = 0;
    add_bos = true;
    spec.add_space_prefix = true;
  } else if (model.value() == "gpt2") {
    spec.model = TokenizerModel::kBpe;
    bos = 11, eos = 11;
    const GgufValue* merges = file.find("tokenizer.ggml.merges");
    if (!merges || !merges->is_array() || merges->as_array().elem_type != GgufType::kString) {
      return invalid_argument(file.path() +
                              ": tokenizer.ggml.merges missing or not a string array");
    }
    const auto& ms = merges->as_array().strings;
    spec.merges.reserve(ms.size());
    for (const std::string& w : ms) {
      size_t sp = w.find(' ', 1);  // llama.cpp: the first space after the first byte
      if (sp == std::string::npos)
        spec.merges.emplace_back(std::string(), std::string());
      else
        spec.merges.emplace_back(w.substr(0, sp), w.substr(sp + 1));
    }
    spec.pre_type = pre.value().empty() ? "default" : pre.value();
    const std::string& p = spec.pre_type;
    if (in_list(p, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                    "midm-2.0", "lfm2", "jina-v5-nano"})) {
      spec.ignore_merges = true;
      add_bos = true;
    } else if (in_list(p, {"glm4", "glm5"})) {
      spec.ignore_merges = true;
      bos = -1;
    } else if (p == "chatglm-bpe") {
      bos = -1;
    }
  } else {
    return unsupported(file.path() + ": tokenizer model '" + printable(model.value()) +
                       "' is not supported (gpt2, llama)");
  }
  if (bos >= static_cast<int64_t>(n)) bos = -1;
  if (eos >= static_cast<int64_t>(n)) eos = -1;
  if (unk >= static_cast<int64_t>(n)) unk = -1;

  struct IdKey {
    const char* key;
    int64_t* id;
  };
  for (IdKey k :
       {IdKey{"tokenizer.ggml.bos_token_id", &bos}, IdKey{"tokenizer.ggml.eos_token_id", &eos},
        IdKey{"tokenizer.ggml.unknown_token_id", &unk},
        IdKey{"tokenizer.ggml.padding_token_id", &pad}}) {
    auto v = get_id(file, k.key);
    if (!v.is_ok()) return v.status();
    if (v.value() == -2) continue;
    if (v.value() < 0 || v.value() >= static_cast<int64_t>(n))
      continue;  // llama.cpp keeps the default
    *k.id = v.value();
  }
  auto ab = get_bool(file, "tokenizer.ggml.add_bos_token", add_bos);
  if (!ab.is_ok()) return ab.status();
  auto ae = get_bool(file, "tokenizer.ggml.add_eos_token", add_eos);
  if (!ae.is_ok()) return ae.status();
  auto asp = get_bool(file, "tokenizer.ggml.add_space_prefix", spec.add_space_prefix);
  if (!asp.is_ok()) return asp.status();
  spec.add_space_prefix = asp.value();
  spec.bos_id = static_cast<int32_t>(bos);
  spec.eos_id = static_cast<int32_t>(eos);
  spec.unk_id = static_cast<int32_t>(unk);
  spec.pad_id = static_cast<int32_t>(pad);
  spec.add_bos = ab.value();
  spec.add_eos = ae.value();

  // llama.cpp forces end-of-turn and fill-in-the-middle tokens it recognizes by text to control
  // type, which changes how they are split out of text and rendered.
  static const std::initializer_list<const char*> kForcedControl = {
      "<|eot_id|>",
      "<|im_end|>",
      "<|end|>",
      "<end_of_turn>",
      "<|endoftext|>",
      "<|end_of_text|>",
      "<EOT>",
      "_<EOT>",
      "[EOT]",
      "<\xEF\xBD\x9C"
      "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
      "<end_of_utterance>",
      "<|eom_id|>",
      "<|fim_prefix|>",
      "<fim-prefix>",
      "<fim_prefix>",
      "<\xEF\xBD\x9C"
      "fim\xE2\x96\x81"
      "begin\xEF\xBD\x9C>",
      "<PRE>",
      "\xE2\x96\x81<PRE>",
      "<|code_prefix|>",
      "<|prefix|>",
      "<|fim_suffix|>",
      "<fim-suffix>",
      "<fim_suffix>",
      "<\xEF\xBD\x9C"
      "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
      "<SUF>",
      "\xE2\x96\x81<SUF>",
      "<|code_suffix|>",
      "<|suffix|>",
      "<|fim_middle|>",
      "<fim-middle>",
      "<fim_middle>",
      "<\xEF\xBD\x9C"
      "fim\xE2\x96\x81"
      "end\xEF\xBD\x9C>",
      "<MID>",
      "\xE2\x96\x81<MID>",
      "<|code_middle|>",
      "<|middle|>",
      "<|fim_pad|>",
      "<fim-pad>",
      "<fim_pad>",
      "<PAD>",
      "[PAD]",
      "<|fim_repo|>",
      "<|repo_name|>",
      "<fim-repo>",
      "<REPO>",
      "<reponame>",
      "<|file_sep|>",
      "<|return|>",
      "<|call|>",
      "<|flush|>",
      "<|calls|>",
      "</s>",
      "[EOS]",
      "<eos>",
      "<turn|>",
      "<|tool_response>",
      "[e~[",
  };
  if (spec.token_types.empty()) spec.token_types.assign(n, TokenType::kNormal);
  for (size_t i = 0; i < n; ++i) {
    if (spec.token_types[i] != TokenType::kControl && in_list(spec.tokens[i], kForcedControl)) {
      spec.token_types[i] = TokenType::kControl;
    }
  }

  auto ct = file.get_string("tokenizer.chat_template");
  if (!ct.is_ok()) return ct.status();
  spec.chat_template = ct.value();
  tokenizer_spec_add_default_eog_ids(&spec);
  return spec;
}

}  // namespace duet
