// Chat templates rendered by duet vs. Python jinja2 (transformers' environment): every template
// in tests/data/chat_template/ on every conversation, and the expression/filter/whitespace
// semantics cases, must match byte for byte; where jinja2 raised, duet must fail too (with the
// same message when the template called raise_exception). References: scripts/ref/chat_template_ref.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace duet {
namespace {

using Json = nlohmann::ordered_json;

std::string data_dir() { return std::string(DUET_SOURCE_DIR) + "/tests/data/chat_template/"; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const Json& expected() {
  static const Json j = Json::parse(read_file(data_dir() + "expected.json"));
  return j;
}

// Compares one outcome; returns "" when it matches, else a description.
std::string check(const Result<std::string>& got, const Json& want) {
  if (want.contains("output")) {
    if (!got.is_ok()) return "duet failed: " + got.status().message();
    if (got.value() != want["output"].get<std::string>())
      return "output differs\n--- jinja2:\n" + want["output"].get<std::string>() + "\n--- duet:\n" + got.value();
    return "";
  }
  if (got.is_ok()) return "jinja2 raised (" + want.dump() + ") but duet rendered:\n" + got.value();
  if (want.contains("raised")) {
    const std::string msg = "raise_exception: " + want["raised"].get<std::string>();
    if (got.status().message() != msg) return "raise_exception message differs: " + got.status().message();
  }
  return "";
}

class ChatTemplateRefTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateRefTest, MatchesJinja2) {
  const Json& e = expected();
  const Json* tmpl = nullptr;
  for (const auto& t : e["templates"])
    if (t["name"] == GetParam()) tmpl = &t;
  ASSERT_NE(tmpl, nullptr) << GetParam() << " missing from expected.json";
  const std::string source = read_file(data_dir() + "templates/" + (*tmpl)["file"].get<std::string>());
  ASSERT_FALSE(source.empty());
  auto parsed = ChatTemplate::parse(source);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  ChatTemplateRenderOptions opts;
  opts.now_epoch_s = e["now_epoch_s"].get<int64_t>();

  int n_rendered = 0, n_raised = 0;
  const auto& cases = e["cases"];
  const auto& results = (*tmpl)["results"];
  ASSERT_EQ(cases.size(), results.size());
  ASSERT_GE(cases.size(), 25u);
  for (size_t k = 0; k < cases.size(); ++k) {
    const Json& c = cases[k];
    ASSERT_EQ(c["id"], results[k]["id"]);
    // The context transformers passes: messages, tools, documents, add_generation_prompt, the
    // tokenizer's special tokens that are set, then the extra keyword arguments.
    Json ctx = Json::object();
    ctx["messages"] = c["messages"];
    ctx["tools"] = c["tools"];
    ctx["documents"] = nullptr;
    ctx["add_generation_prompt"] = c["add_generation_prompt"];
    if (!(*tmpl)["bos_token"].is_null()) ctx["bos_token"] = (*tmpl)["bos_token"];
    if (!(*tmpl)["eos_token"].is_null()) ctx["eos_token"] = (*tmpl)["eos_token"];
    for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it) ctx[it.key()] = it.value();
    auto got = parsed.value()->render(ctx, opts);
    std::string diff = check(got, results[k]);
    EXPECT_EQ(diff, "") << GetParam() << " / " << c["id"].get<std::string>();
    (results[k].contains("output") ? n_rendered : n_raised)++;
  }
  RecordProperty("rendered", n_rendered);
  RecordProperty("raised", n_raised);
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateRefTest,
                         ::testing::Values("qwen3", "llama3", "deepseek_v3", "smollm2", "gemma3",
                                           "deepseek_r1_distill_qwen", "llama2", "mistral_v01", "mistral_v03",
                                           "llama3_1"),
                         [](const auto& info) { return info.param; });

TEST(ChatTemplateRef, EveryTemplateIsCovered) {
  size_t n = expected()["templates"].size();
  EXPECT_EQ(n, 10u) << "add new templates to the INSTANTIATE list above";
}

TEST(ChatTemplateRef, SemanticsMatchJinja2) {
  const Json& e = expected();
  ChatTemplateRenderOptions opts;
  opts.now_epoch_s = e["now_epoch_s"].get<int64_t>();
  int n = 0;
  for (const auto& s : e["semantics"]) {
    const std::string src = s["template"].get<std::string>();
    auto parsed = ChatTemplate::parse(src);
    const Json& ctx = e["semantics_contexts"][s["context"].get<size_t>()];
    Result<std::string> got = parsed.is_ok() ? parsed.value()->render(ctx, opts) : Result<std::string>(parsed.status());
    EXPECT_EQ(check(got, s), "") << "template: " << src;
    ++n;
  }
  EXPECT_GE(n, 250);
}

TEST(ChatTemplateRef, TokenizerConfigLoads) {
  const std::string path = std::string(DUET_SHARED_DIR) + "/tokenizers/deepseek_v3/tokenizer_config.json";
  std::string text = read_file(path);
  if (text.empty()) GTEST_FAIL() << "no " << path;
  auto cfg = parse_tokenizer_chat_config(text);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  EXPECT_EQ(cfg->chat_template, read_file(data_dir() + "templates/deepseek_v3.jinja"));
  ASSERT_TRUE(cfg->bos_token.has_value());
  EXPECT_EQ(*cfg->bos_token, "<｜begin▁of▁sentence｜>");
}

TEST(ChatTemplateRef, NamedTemplateList) {
  auto cfg = parse_tokenizer_chat_config(
      R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
          "eos_token": {"content": "</s>", "lstrip": false}})");
  ASSERT_TRUE(cfg.is_ok());
  EXPECT_EQ(cfg->chat_template, "D");
  EXPECT_EQ(cfg->eos_token.value_or(""), "</s>");
  EXPECT_FALSE(cfg->bos_token.has_value());
  auto tool = parse_tokenizer_chat_config(R"({"chat_template": [{"name": "tool_use", "template": "T"}]})", "tool_use");
  ASSERT_TRUE(tool.is_ok());
  EXPECT_EQ(tool->chat_template, "T");
  EXPECT_FALSE(parse_tokenizer_chat_config(R"({"chat_template": [{"name": "x", "template": "T"}]})").is_ok());
  EXPECT_FALSE(parse_tokenizer_chat_config(R"({"bos_token": "<s>"})").is_ok());
  EXPECT_FALSE(parse_tokenizer_chat_config("not json").is_ok());
}

TEST(ChatTemplateRef, BuildContextLikeTransformers) {
  ChatTemplateInputs in;
  in.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra["enable_thinking"] = false;
  Json ctx = build_chat_template_context(in);
  EXPECT_TRUE(ctx["tools"].is_null());
  EXPECT_TRUE(ctx.contains("documents"));
  EXPECT_EQ(ctx["enable_thinking"], false);
  auto out = render_chat_template(
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}"
      "{% if tools is none %}|no tools{% endif %}{% if enable_thinking is false %}|nothink{% endif %}",
      ctx);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(out.value(), "<s>user:hi|no tools|nothink");
}

}  // namespace
}  // namespace duet
