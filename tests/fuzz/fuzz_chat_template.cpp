// libFuzzer target for the chat template engine (tokenizer/chat_template.h): a model file's chat
// template is untrusted code. ChatTemplate::parse and render must return a Status for any source:
// no crash, hang or unbounded allocation (the Limits are the bound), and a failure is one
// non-empty line. The input is the template source; it is rendered against one fixed
// conversation with a system prompt, a tool call, a tool result and a tool list, so that the
// usual branches of real templates run. Seeds: tests/data/chat_template/templates (the real
// templates) and tests/fuzz/corpus/fuzz_chat_template; run with scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "tokenizer/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json c = [] {
    duet::ChatTemplateInputs in;
    in.messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris? <b>&amp;</b>"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
        {"name": "weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "content": "{\"temp\": 21}", "name": "weather"},
      {"role": "assistant", "content": "<think>sunny</think>21 degrees."},
      {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]}
    ])");
    in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "weather",
      "description": "Forecast", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    in.extra["enable_thinking"] = false;
    return duet::build_chat_template_context(in);
  }();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  duet::ChatTemplateLimits limits;  // the defaults, but a quicker wall-clock backstop
  limits.max_time_ms = 200;
  auto t = duet::ChatTemplate::parse(source, limits);
  if (!t.is_ok()) {
    duet::fuzz::check_one_line(t.status());
    return 0;
  }
  duet::ChatTemplateRenderOptions opt;
  opt.now_epoch_s = 1700000000;  // strftime_now() deterministic
  auto r = t.value()->render(context(), opt);
  if (!r.is_ok()) {
    duet::fuzz::check_one_line(r.status());
    return 0;
  }
  if (r.value().size() > limits.max_output_bytes) __builtin_trap();  // the output bound holds
  return 0;
}
