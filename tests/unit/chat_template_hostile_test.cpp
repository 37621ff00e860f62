// Hostile chat templates: each must end with an error Status (never a crash, hang or runaway
// allocation), enforced by ChatTemplateLimits (steps, output bytes, live memory, range size,
// call and nesting depth). As a safety bound each case must also finish within 1 s and grow the
// process's peak RSS by less than 64 MiB. Also: legitimate large inputs still render.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace duet {
namespace {

using Json = nlohmann::ordered_json;

struct Hostile {
  const char* name;
  std::string source;
  StatusCode code;  // expected error class
};

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int k = 0; k < n; ++k) out += s;
  return out;
}

// Sanitizers keep freed memory in quarantine, so RSS says nothing about live memory there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMeasureRss = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kMeasureRss = false;
#else
constexpr bool kMeasureRss = true;
#endif
#else
constexpr bool kMeasureRss = true;
#endif

long peak_rss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

std::vector<Hostile> hostile_cases() {
  const StatusCode kLimit = StatusCode::kOutOfRange;
  const StatusCode kBad = StatusCode::kInvalidArgument;
  return {
      {"nested_huge_loops", "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", kLimit},
      {"triple_loop_no_output",
       "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}{% endfor %}{% endfor %}{% endfor %}",
       kLimit},
      {"huge_range", "{{ range(10**9)|list|length }}", kLimit},
      {"huge_range_step", "{% for i in range(0, 10**12, 7) %}{% endfor %}", kLimit},
      {"string_repeat_1e9", "{{ 'a' * 10**9 }}", kLimit},
      {"string_repeat_2p62", "{{ 'ab' * 2**62 }}", kLimit},
      {"string_doubling",
       "{% set ns = namespace(s='a') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
       kLimit},
      {"list_doubling",
       "{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
       kLimit},
      {"shared_tree_repr",
       "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}", kLimit},
      {"shared_tree_tojson",
       "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l|tojson }}",
       kLimit},
      {"shared_tree_compare",
       "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
       "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
       kLimit},
      {"deep_value_nesting",
       "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l|length }}", kLimit},
      {"namespace_self_cycle", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", kLimit},
      {"distinct_big_strings",
       "{% set big = 'x' * 8000000 %}{% set ns = namespace(l=[]) %}{% for i in range(20) %}"
       "{% set ns.l = ns.l + [big ~ i] %}{% endfor %}{{ ns.l|length }}",
       kLimit},
      {"macro_infinite_recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", kLimit},
      {"macro_mutual_recursion",
       "{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}{{ a(0) }}", kLimit},
      {"macro_exponential_calls",
       "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}", kLimit},
      {"deep_expression_recursion",
       "{% macro f(n) %}{{ f(n + 1)" + repeat(" + n", 500) + " }}{% endmacro %}{{ f(0) }}", kLimit},
      {"caller_recursion",
       "{% macro a() %}{{ caller() }}{% endmacro %}{% macro b() %}{% call a() %}{{ b() }}{% endcall %}{% endmacro %}{{ b() }}",
       kLimit},
      {"deep_parentheses", "{{ " + repeat("(", 20000) + "1" + repeat(")", 20000) + " }}", kLimit},
      {"deep_if_nesting", repeat("{% if true %}", 5000) + "x" + repeat("{% endif %}", 5000), kLimit},
      {"deep_list_literal", "{{ " + repeat("[", 20000) + repeat("]", 20000) + " }}", kLimit},
      {"long_operator_chain", "{{ 1" + repeat(" + 1", 100000) + " }}", kLimit},
      {"long_filter_chain", "{{ 'x'" + repeat("|trim", 100000) + " }}", kLimit},
      {"huge_output", "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", kLimit},
      {"center_huge", "{{ 'x'|center(10**9) }}", kLimit},
      {"format_width_huge", "{{ '%1000000000s' % 'x' }}", kLimit},
      {"join_huge_list", "{{ ' '.join(['a'] * 10**8) }}", kLimit},
      {"replace_blowup", "{{ ('a' * 1000000)|replace('a', 'b' * 40) }}", kLimit},
      {"indent_blowup", "{{ ('\\n' * 100000)|indent(10000, true, true) }}", kLimit},
      {"exponent_blowup", "{{ 10 ** 10 ** 10 }}", kLimit},
      {"int_overflow", "{{ 9999999999 * 9999999999 * 9999999999 }}", kLimit},
      {"undefined_call", "{{ no_such_function() }}", kBad},
      {"undefined_attribute", "{{ no_such_var.attribute }}", kBad},
      {"sandbox_dunder", "{{ messages.__class__.__mro__ }}", kBad},
      {"include_file", "{% include '/etc/passwd' %}", StatusCode::kUnsupported},
      {"import_file", "{% import 'macros.jinja' as m %}", StatusCode::kUnsupported},
      {"extends_file", "{% extends 'base.jinja' %}", StatusCode::kUnsupported},
      {"raise_in_loop", "{% for i in range(10) %}{{ raise_exception('no ' ~ i) }}{% endfor %}", kBad},
      {"template_too_big", "{# " + std::string(2u << 20, 'x') + " #}", kLimit},
  };
}

class ChatTemplateHostileTest : public ::testing::TestWithParam<Hostile> {};

TEST_P(ChatTemplateHostileTest, EndsWithAnErrorQuickly) {
  const Hostile& h = GetParam();
  Json ctx = {{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}, {"add_generation_prompt", true}};
  const long rss_before = peak_rss_kb();
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::string> r = render_chat_template(h.source, ctx);
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long rss_growth_kb = peak_rss_kb() - rss_before;
  ASSERT_FALSE(r.is_ok()) << h.name << " rendered " << r.value().size() << " bytes";
  EXPECT_EQ(r.status().code(), h.code) << h.name << ": " << r.status().message();
  EXPECT_LT(elapsed_s, 1.0) << h.name << ": " << r.status().message();
  if (kMeasureRss) {
    EXPECT_LT(rss_growth_kb, 64 * 1024) << h.name;
  }
  RecordProperty("elapsed_ms", static_cast<int>(elapsed_s * 1000));
}

INSTANTIATE_TEST_SUITE_P(Hostile, ChatTemplateHostileTest, ::testing::ValuesIn(hostile_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ChatTemplateHostile, AtLeastTwentyCases) { EXPECT_GE(hostile_cases().size(), 20u); }

TEST(ChatTemplateHostile, TightLimitsApply) {
  ChatTemplateLimits limits;
  limits.max_steps = 1000;
  Json ctx = Json::object();
  auto r = render_chat_template("{% for i in range(5000) %}{% endfor %}", ctx, limits);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  limits = {};
  limits.max_output_bytes = 10;
  r = render_chat_template("{{ 'x' * 11 }}", ctx, limits);
  EXPECT_FALSE(r.is_ok());
  r = render_chat_template("{{ 'x' * 10 }}", ctx, limits);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value(), "xxxxxxxxxx");
  limits = {};
  limits.max_call_depth = 3;
  r = render_chat_template("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(2) }}", ctx, limits);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value(), "012");
  r = render_chat_template("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(3) }}", ctx, limits);
  EXPECT_FALSE(r.is_ok());
}

// A long real conversation must stay well inside the default limits.
TEST(ChatTemplateHostile, LargeLegitimateConversationRenders) {
  const std::string qwen_like =
      "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
      "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  Json msgs = Json::array();
  const std::string text(2000, 'w');
  for (int k = 0; k < 2000; ++k)
    msgs.push_back({{"role", k % 2 ? "assistant" : "user"}, {"content", text + std::to_string(k)}});
  Json ctx = {{"messages", msgs}, {"add_generation_prompt", true}};
  const auto t0 = std::chrono::steady_clock::now();
  auto r = render_chat_template(qwen_like, ctx);
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GT(r.value().size(), 4000000u);
  EXPECT_LT(elapsed_s, 1.0);
}

}  // namespace
}  // namespace duet
