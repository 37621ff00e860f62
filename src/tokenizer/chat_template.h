// Chat templates: renders a model's Jinja chat template (tokenizer_config.json or GGUF
// tokenizer.chat_template) byte-identical to transformers' apply_chat_template (jinja2 sandbox,
// trim_blocks, lstrip_blocks, loopcontrols, tojson, raise_exception, strftime_now). Sandboxed (no
// file/network/env access) and bounded by ChatTemplateLimits. A parsed ChatTemplate is immutable:
// render it from any number of threads at once. Does not tokenize (tokenizer.h does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tokenizer/jinja_value.h"

namespace duet {

namespace jinja {
struct Template;
}

using ChatTemplateLimits = jinja::Limits;

struct ChatTemplateRenderOptions {
  int64_t now_epoch_s = -1;  // time seen by strftime_now(); < 0 uses the clock
};

class ChatTemplate {
 public:
  // Errors: kInvalidArgument for syntax errors, kUnsupported for include/import/extends and
  // unsupported statements, kOutOfRange for a template beyond the limits.
  static Result<std::shared_ptr<const ChatTemplate>> parse(const std::string& source,
                                                           const ChatTemplateLimits& limits = {});
  ~ChatTemplate();

  // `context` is the object of top-level variables (messages, tools, add_generation_prompt,
  // bos_token, ...). Key order is kept, as Python dicts keep it (tojson prints in that order);
  // a plain nlohmann::json converts implicitly but has its object keys sorted.
  // Errors: kInvalidArgument for template errors, with "raise_exception: <message>" when the
  // template raised; kOutOfRange when a limit was hit; kUnsupported for unsupported features.
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const ChatTemplateRenderOptions& options = {}) const;

  const std::string& source() const { return source_; }
  const ChatTemplateLimits& limits() const { return limits_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  ChatTemplateLimits limits_;
  std::unique_ptr<jinja::Template> tmpl_;
};

// Parse + render in one call.
Result<std::string> render_chat_template(const std::string& template_src, const nlohmann::ordered_json& context,
                                         const ChatTemplateLimits& limits = {});

// What a chat request contributes to the template context.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null when the request has none (transformers passes None)
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // e.g. enable_thinking
};

// The context transformers builds: messages, tools, documents (None), add_generation_prompt,
// bos_token, eos_token, then the extra keyword arguments (which may override any of them).
nlohmann::ordered_json build_chat_template_context(const ChatTemplateInputs& inputs);

// The chat template and special tokens of a Hugging Face tokenizer_config.json.
struct TokenizerChatConfig {
  std::string chat_template;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};
// `name` picks one of several named templates ("default" when empty). Errors name what is missing.
Result<TokenizerChatConfig> parse_tokenizer_chat_config(const std::string& json_text, const std::string& name = "");

}  // namespace duet
