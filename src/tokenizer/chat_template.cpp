// Chat templates (see chat_template.h): the module boundary of the Jinja interpreter. Every
// JinjaError (and allocation failure) thrown by the lexer, parser or evaluator is caught here
// and turned into a Status; nothing is thrown past this file.
#include "tokenizer/chat_template.h"

#include <new>

#include "base/text.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_parser.h"

namespace duet {

namespace {

// Error messages quote the template's own text (tokens, raise_exception's argument, values), which
// comes from the model file: control bytes are escaped and the quote cut at kMaxQuotedText bytes,
// so that a message stays one line of bounded length.

Status to_status(const jinja::JinjaError& e, const char* stage) {
  using jinja::ErrorKind;
  std::string where = e.line > 0 && e.message().find("(line ") == std::string::npos
                          ? " (line " + std::to_string(e.line) + ")"
                          : "";
  const std::string msg = printable(e.message(), kMaxQuotedText);
  switch (e.kind()) {
    case ErrorKind::kSyntax: return invalid_argument(std::string("chat template syntax error: ") + msg);
    case ErrorKind::kRaised: return invalid_argument("raise_exception: " + msg);
    case ErrorKind::kLimit: return out_of_range(std::string("chat template ") + stage + " limit: " + msg + where);
    case ErrorKind::kUnsupported: return unsupported("chat template: " + msg + where);
    case ErrorKind::kUndefined: return invalid_argument("chat template undefined value: " + msg + where);
    case ErrorKind::kSecurity: return invalid_argument("chat template sandbox violation: " + msg + where);
    case ErrorKind::kType: return invalid_argument("chat template error: " + msg + where);
  }
  return invalid_argument(msg);
}

}  // namespace

ChatTemplate::~ChatTemplate() = default;

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::parse(const std::string& source,
                                                                const ChatTemplateLimits& limits) {
  try {
    std::shared_ptr<ChatTemplate> t(new ChatTemplate());
    t->source_ = source;
    t->limits_ = limits;
    t->tmpl_ = jinja::parse_template(source, limits);
    return std::shared_ptr<const ChatTemplate>(std::move(t));
  } catch (const jinja::JinjaError& e) {
    return to_status(e, "parse");
  } catch (const std::bad_alloc&) {
    return out_of_range("chat template parse: out of memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("chat template parse: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         const ChatTemplateRenderOptions& options) const {
  try {
    jinja::Budget budget(limits_);
    jinja::BudgetScope scope(&budget);
    jinja::Value ctx = jinja::from_json(context, limits_.max_nesting_depth);
    if (!ctx.is_dict()) return invalid_argument("chat template context must be a JSON object");
    jinja::RenderOptions ro;
    ro.now_epoch_s = options.now_epoch_s;
    jinja::Interp interp(*tmpl_, &budget, ro);
    return interp.render(ctx);
  } catch (const jinja::JinjaError& e) {
    return to_status(e, "render");
  } catch (const std::bad_alloc&) {
    return out_of_range("chat template render: out of memory");
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("chat template context: ") + e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("chat template render: ") + e.what());
  }
}

Result<std::string> render_chat_template(const std::string& template_src, const nlohmann::ordered_json& context,
                                         const ChatTemplateLimits& limits) {
  auto t = ChatTemplate::parse(template_src, limits);
  if (!t.is_ok()) return t.status();
  return t.value()->render(context);
}

nlohmann::ordered_json build_chat_template_context(const ChatTemplateInputs& in) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = in.messages;
  ctx["tools"] = in.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = in.add_generation_prompt;
  ctx["bos_token"] = in.bos_token;
  ctx["eos_token"] = in.eos_token;
  if (in.extra.is_object())
    for (auto it = in.extra.begin(); it != in.extra.end(); ++it) ctx[it.key()] = it.value();
  return ctx;
}

Result<TokenizerChatConfig> parse_tokenizer_chat_config(const std::string& json_text, const std::string& name) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("tokenizer_config.json is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return invalid_argument("tokenizer_config.json: expected an object at the top level");
  TokenizerChatConfig cfg;
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return not_found("tokenizer_config.json has no chat_template");
  if (it->is_string()) {
    cfg.chat_template = it->get<std::string>();
  } else if (it->is_array()) {
    const std::string want = name.empty() ? "default" : name;
    bool found = false;
    std::string names;
    for (const auto& e : *it) {
      if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
          !e["template"].is_string())
        return invalid_argument("tokenizer_config.json: chat_template list entries need string name and template");
      names += (names.empty() ? "" : ", ") + e["name"].get<std::string>();
      if (e["name"] == want) {
        cfg.chat_template = e["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) return not_found("chat template '" + want + "' not found; available: " + names);
  } else {
    return invalid_argument("tokenizer_config.json: chat_template must be a string or a list");
  }
  auto token = [&](const char* key) -> std::optional<std::string> {
    auto t = j.find(key);
    if (t == j.end() || t->is_null()) return std::nullopt;
    if (t->is_string()) return t->get<std::string>();
    if (t->is_object() && t->contains("content") && (*t)["content"].is_string()) return (*t)["content"].get<std::string>();
    return std::nullopt;
  };
  cfg.bos_token = token("bos_token");
  cfg.eos_token = token("eos_token");
  return cfg;
}

}  // namespace duet
