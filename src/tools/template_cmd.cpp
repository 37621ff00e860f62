// `duet template (-m MODEL | --template-file F | --tokenizer-config tokenizer_config.json)
//  --messages FILE.json [--tools FILE.json] [--no-gen-prompt] [--var key=jsonvalue]...
//  [--bos STR] [--eos STR] [--template-name NAME] [--now EPOCH_S]`
// The template comes from a GGUF's tokenizer.chat_template (bos/eos strings from
// tokenizer.ggml.tokens), a model directory's or file's tokenizer_config.json, or a raw template
// file; --template-file with -m renders that file with the model's bos/eos (for GGUFs, such as
// base models, that carry no template). --messages is a JSON array of messages, or an OpenAI-style request object with
// "messages" (and optionally "tools"); "-" reads stdin. Prints the prompt with no added newline.
#include "tools/template_cmd.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "tokenizer/chat_template.h"

namespace duet {
namespace {

using Json = nlohmann::ordered_json;

int fail_with(const std::string& msg) {
  std::fprintf(stderr, "duet template: %s\n", msg.c_str());
  return 1;
}

Result<std::string> read_text(const std::string& path) {
  if (path == "-") return std::string((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<Json> read_json(const std::string& path) {
  auto text = read_text(path);
  if (!text.is_ok()) return text.status();
  try {
    return Json::parse(text.value());
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("'" + path + "' is not valid JSON: " + e.what());
  }
}

struct Source {
  std::string chat_template;
  std::optional<std::string> bos, eos;
};

Result<Source> from_gguf(const std::string& path, bool need_template) {
  auto f = GgufFile::open(path);
  if (!f.is_ok()) return f.status();
  const GgufFile& g = *f.value();
  Source s;
  const GgufValue* t = g.find("tokenizer.chat_template");
  if (t && !t->is_string()) return invalid_argument("tokenizer.chat_template is not a string");
  if (t) {
    s.chat_template = t->as_string();
  } else if (need_template) {
    return not_found("'" + path + "' has no tokenizer.chat_template (pass one with --template-file)");
  }
  const GgufValue* toks = g.find("tokenizer.ggml.tokens");
  auto token = [&](const char* key) -> Result<std::optional<std::string>> {
    auto id = g.get_int(key, -1);
    if (!id.is_ok()) return id.status();
    if (id.value() < 0) return std::optional<std::string>();
    if (!toks || !toks->is_array() || toks->as_array().elem_type != GgufType::kString)
      return invalid_argument("tokenizer.ggml.tokens missing or not a string array");
    const auto& strings = toks->as_array().strings;
    if (static_cast<uint64_t>(id.value()) >= strings.size())
      return invalid_argument(std::string(key) + " = " + std::to_string(id.value()) + " is out of range (" +
                              std::to_string(strings.size()) + " tokens)");
    return std::optional<std::string>(strings[static_cast<size_t>(id.value())]);
  };
  auto bos = token("tokenizer.ggml.bos_token_id");
  if (!bos.is_ok()) return bos.status();
  auto eos = token("tokenizer.ggml.eos_token_id");
  if (!eos.is_ok()) return eos.status();
  s.bos = bos.value();
  s.eos = eos.value();
  return s;
}

Result<Source> from_tokenizer_config(const std::string& path, const std::string& name) {
  auto text = read_text(path);
  if (!text.is_ok()) return text.status();
  auto cfg = parse_tokenizer_chat_config(text.value(), name);
  if (!cfg.is_ok()) return cfg.status();
  return Source{cfg->chat_template, cfg->bos_token, cfg->eos_token};
}

}  // namespace

int run_template(int argc, char** argv) {
  CLI::App app{"Render a chat template for a conversation (as transformers' apply_chat_template)", "duet template"};
  std::string model, template_file, tokenizer_config, messages_path, tools_path, template_name;
  std::string bos_override, eos_override;
  std::vector<std::string> vars;
  bool no_gen_prompt = false;
  int64_t now = -1;
  auto* src = app.add_option_group("source", "where the template comes from");
  src->add_option("-m,--model", model, "GGUF model file, or a directory with tokenizer_config.json");
  src->add_option("--template-file", template_file, "a raw Jinja template file");
  src->add_option("--tokenizer-config", tokenizer_config, "a Hugging Face tokenizer_config.json");
  src->require_option(1, 2);
  app.add_option("--messages", messages_path, "JSON messages array, or a request object with messages/tools ('-' = stdin)")
      ->required();
  app.add_option("--tools", tools_path, "JSON array of tool definitions");
  app.add_flag("--no-gen-prompt", no_gen_prompt, "add_generation_prompt=false");
  app.add_option("--var", vars, "extra template variable key=jsonvalue (e.g. enable_thinking=false)");
  app.add_option("--bos", bos_override, "bos_token string (overrides the model's)");
  app.add_option("--eos", eos_override, "eos_token string (overrides the model's)");
  app.add_option("--template-name", template_name, "named template of a tokenizer_config.json list (default: default)");
  app.add_option("--now", now, "seconds since the epoch that strftime_now() sees (default: the clock)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (!tokenizer_config.empty() && (!model.empty() || !template_file.empty())) {
    std::fprintf(stderr, "duet template: --tokenizer-config cannot be combined with -m or --template-file\n");
    return 2;
  }
  Result<Source> source = invalid_argument("no template source");
  if (!template_file.empty()) {
    auto t = read_text(template_file);
    if (!t.is_ok()) return fail_with(t.status().message());
    source = Source{t.value(), std::nullopt, std::nullopt};
    if (!model.empty()) {
      // Tokens from the model; its own template (if any) is ignored.
      std::error_code ec;
      Result<Source> m = std::filesystem::is_directory(model, ec)
                             ? from_tokenizer_config(model + "/tokenizer_config.json", template_name)
                             : from_gguf(model, /*need_template=*/false);
      if (!m.is_ok()) return fail_with(m.status().message());
      source->bos = m->bos;
      source->eos = m->eos;
    }
  } else if (!tokenizer_config.empty()) {
    source = from_tokenizer_config(tokenizer_config, template_name);
  } else {
    std::error_code ec;
    if (std::filesystem::is_directory(model, ec)) {
      source = from_tokenizer_config(model + "/tokenizer_config.json", template_name);
    } else {
      source = from_gguf(model, /*need_template=*/true);
    }
  }
  if (!source.is_ok()) return fail_with(source.status().message());
  if (!bos_override.empty()) source->bos = bos_override;
  if (!eos_override.empty()) source->eos = eos_override;

  auto msgs = read_json(messages_path);
  if (!msgs.is_ok()) return fail_with(msgs.status().message());
  Json messages = msgs.value();
  Json tools = nullptr;
  if (messages.is_object()) {
    if (messages.contains("tools")) tools = messages["tools"];
    Json inner = messages.value("messages", Json());
    messages = inner;
  }
  if (!messages.is_array()) return fail_with("--messages must be a JSON array of messages (or an object with \"messages\")");
  if (!tools_path.empty()) {
    auto t = read_json(tools_path);
    if (!t.is_ok()) return fail_with(t.status().message());
    tools = t.value();
  }

  Json ctx = Json::object();
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = !no_gen_prompt;
  if (source->bos) ctx["bos_token"] = *source->bos;
  if (source->eos) ctx["eos_token"] = *source->eos;
  for (const std::string& kv : vars) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return fail_with("--var expects key=jsonvalue, got '" + kv + "'");
    const std::string key = kv.substr(0, eq), text = kv.substr(eq + 1);
    try {
      ctx[key] = Json::parse(text);
    } catch (const nlohmann::json::exception&) {
      ctx[key] = text;  // not JSON: the plain string
    }
  }

  auto tmpl = ChatTemplate::parse(source->chat_template);
  if (!tmpl.is_ok()) return fail_with(tmpl.status().message());
  ChatTemplateRenderOptions opts;
  opts.now_epoch_s = now;
  auto out = tmpl.value()->render(ctx, opts);
  if (!out.is_ok()) return fail_with(out.status().message());
  std::fwrite(out.value().data(), 1, out.value().size(), stdout);
  return 0;
}

}  // namespace duet
