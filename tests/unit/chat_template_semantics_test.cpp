// Jinja semantics of the chat-template interpreter, stated directly (the jinja2 comparison lives
// in chat_template_test.cpp): Python int/float arithmetic and repr, string repr, loop variables,
// scoping, filters, tests, whitespace control, Undefined, macros, errors as Status, and
// concurrent rendering of one parsed template.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "malformed_input.h"
#include "tokenizer/chat_template.h"

namespace duet {
namespace {

using Json = nlohmann::ordered_json;

std::string render(const std::string& src, const Json& ctx = Json::object()) {
  auto r = render_chat_template(src, ctx);
  return r.is_ok() ? r.value() : "ERROR: " + r.status().message();
}

bool fails(const std::string& src, const Json& ctx = Json::object()) { return !render_chat_template(src, ctx).is_ok(); }

TEST(ChatTemplateSemantics, PythonArithmetic) {
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }}"), "3.5 2.0 3 -4 -2 2");
  EXPECT_EQ(render("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}"), "1024 0.5 64 3.0 0.5");
  EXPECT_EQ(render("{{ 1 + 2.0 }} {{ true + 1 }} {{ 3 * 1.5 }} {{ 1 - 1 }}"), "3.0 2 4.5 0");
  EXPECT_TRUE(fails("{{ 1 / 0 }}"));
  EXPECT_TRUE(fails("{{ 1 // 0 }}"));
  EXPECT_TRUE(fails("{{ 1 % 0 }}"));
  EXPECT_TRUE(fails("{{ 1 + 'a' }}"));
  EXPECT_TRUE(fails("{{ 9223372036854775807 + 1 }}"));  // duet integers are 64-bit: overflow is an error
}

TEST(ChatTemplateSemantics, FloatRepr) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 2.5e-3 }}"),
            "1.0 1e+16 1000000000000000.0 0.30000000000000004 1e-05 0.0001 -0.0 0.0025");
  EXPECT_EQ(render("{{ [1.0, 2.50] }} {{ {'x': 3.0}|tojson }} {{ 10 / 4 }}"), "[1.0, 2.5] {\"x\": 3.0} 2.5");
  EXPECT_EQ(render("{{ x }} {{ y }}", Json::parse(R"({"x": 1.0, "y": 1e300})")), "1.0 1e+300");
}

TEST(ChatTemplateSemantics, Repr) {
  EXPECT_EQ(render("{{ ['a', \"it's\", none, true, 1] }}"), "['a', \"it's\", None, True, 1]");
  EXPECT_EQ(render("{{ {'k': [1, (2,), (3, 4)]} }}"), "{'k': [1, (2,), (3, 4)]}");
  EXPECT_EQ(render("{{ ['a\\nb', 'é', '\\x00'] }}"), "['a\\nb', 'é', '\\x00']");
  EXPECT_EQ(render("{{ none }}|{{ true }}|{{ missing }}|"), "None|True||");
}

TEST(ChatTemplateSemantics, LoopVariables) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first|int }}"
                   "{{ loop.last|int }}{{ loop.length }}{{ loop.cycle('+', '-') }}{{ loop.previtem|default('^') }}"
                   "{{ loop.nextitem|default('$') }} {% endfor %}"),
            "103103+^b 212003-ac 321013+b$ ");
  EXPECT_EQ(render("{% for x in [] %}no{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}"),
            "1/2:2 2/2:4 ");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}"
                   "{{ x }}{% endfor %}"),
            "02");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
}

TEST(ChatTemplateSemantics, Scoping) {
  // A set inside a loop is local to the iteration; a namespace carries state out.
  EXPECT_EQ(render("{% set n = 0 %}{% for x in [1, 2] %}{% set n = n + x %}{{ n }}{% endfor %}{{ n }}"), "120");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% if true %}{% set a = 5 %}{% endif %}{{ a }}"), "5");
  EXPECT_TRUE(fails("{% set d = {} %}{% set d.x = 1 %}"));
}

TEST(ChatTemplateSemantics, WhitespaceControl) {
  // transformers' settings: trim_blocks and lstrip_blocks.
  EXPECT_EQ(render("{% if true %}\n  yes\n{% endif %}\n"), "  yes\n");
  EXPECT_EQ(render("a\n    {% if true %}\nb\n    {% endif %}\nc"), "a\nb\nc");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("{{ 'x' }}\n{{ 'y' }}"), "x\ny");
  EXPECT_EQ(render("a {# comment #} b"), "a  b");
  EXPECT_EQ(render("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
}

TEST(ChatTemplateSemantics, Filters) {
  EXPECT_EQ(render("{{ '  a b  '|trim }}|{{ 'abc'|length }}|{{ [1, 2]|count }}|{{ 'aBc'|upper }}|{{ 'aBc'|lower }}"),
            "a b|3|2|ABC|abc");
  EXPECT_EQ(render("{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'a-b'|replace('-', '+') }}"),
            "Hello World|Hello|a+b");
  EXPECT_EQ(render("{{ [1, 2, 3]|join(', ') }}|{{ [3, 1, 2]|sort|first }}|{{ [3, 1, 2]|last }}|{{ [1, 1, 2]|unique|list }}"),
            "1, 2, 3|1|2|[1, 2]");
  EXPECT_EQ(render("{{ missing|default('d') }}|{{ ''|d('e', true) }}|{{ '42'|int + 1 }}|{{ '2.5'|float }}|{{ 3|string }}"),
            "d|e|43|2.5|3");
  EXPECT_EQ(render("{{ users|selectattr('admin')|map(attribute='name')|join(',') }}",
                   Json::parse(R"({"users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}]})")),
            "a");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|dictsort }}|{{ 2.567|round(2) }}|{{ -3|abs }}|{{ 'a\nb'|indent(2) }}"),
            "[('a', 2), ('b', 1)]|2.57|3|a\n  b");
  EXPECT_EQ(render("{{ x|tojson }}", Json::parse(R"({"x": {"b": "é", "a": [1, 2.0, null]}})")),
            "{\"b\": \"é\", \"a\": [1, 2.0, null]}");
  EXPECT_EQ(render("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ '<&>'|tojson }}|{{ '<a>'|e }}|{{ 'one two  three'|wordcount }}"), "\"<&>\"|&lt;a&gt;|3");
}

TEST(ChatTemplateSemantics, TestsAndOperators) {
  EXPECT_EQ(render("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 1 is integer }}{{ 1.0 is float }}"
                   "{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 3 is odd }}{{ true is boolean }}",
                   Json::parse(R"({"x": 1})")),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 'b' in 'abc' }}{{ 1 not in [2] }}{{ 'k' in {'k': 1} }}{{ 1 < 2 < 3 }}{{ 'a' ~ 1 ~ none }}"),
            "TrueTrueTrueTruea1None");
  EXPECT_EQ(render("{{ 'y' if 0 else 'n' }}{{ [1, 2, 3][::-1] }}{{ 'abc'[1:] }}{{ 'héllo'[1] }}{{ 'ab' * 2 }}"),
            "n[3, 2, 1]bcéabab");
  EXPECT_EQ(render("{{ ' a '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'abc'.startswith('a') }}|{{ {'k': 1}.get('z', 0) }}"),
            "a|['a', 'b']|True|0");
}

TEST(ChatTemplateSemantics, Undefined) {
  EXPECT_EQ(render("[{{ nope }}]{{ nope is defined }}{{ nope|length }}{% for x in nope %}x{% endfor %}"), "[]False0");
  EXPECT_EQ(render("{{ d.missing is defined }}[{{ d.missing }}]{{ d['missing'] }}", Json::parse(R"({"d": {}})")),
            "False[]");
  EXPECT_TRUE(fails("{{ nope.attr }}"));
  EXPECT_TRUE(fails("{{ nope + 1 }}"));
  EXPECT_TRUE(fails("{{ nope() }}"));
  EXPECT_EQ(render("{{ none.x }}|"), "|");  // attribute of None is undefined, as in Jinja
}

TEST(ChatTemplateSemantics, Macros) {
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}"), "1B1243");
  EXPECT_EQ(render("{% macro w(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}{% call w('p') %}hi{% endcall %}"),
            "<p>hi</p>");
  EXPECT_EQ(render("{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "3210");
  EXPECT_TRUE(fails("{% macro m() %}{% endmacro %}{{ m(1) }}"));
}

// The fuzzer's seeds and crash regressions (tests/fuzz/corpus/fuzz_chat_template, .../regression)
// and the real templates: parse and render never crash, and every failure is one line.
TEST(ChatTemplateSemantics, FuzzCorpusNeverCrashes) {
  namespace fs = std::filesystem;
  const fs::path src(DUET_SOURCE_DIR);
  const fs::path dirs[] = {src / "tests/fuzz/corpus/fuzz_chat_template", src / "tests/fuzz/corpus/regression",
                           src / "tests/data/chat_template/templates"};
  const Json ctx = Json::parse(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content":
    "hi"}, {"role": "assistant", "content": "yo"}], "add_generation_prompt": true, "bos_token": "<s>"})");
  int n = 0, rendered = 0;
  for (const fs::path& d : dirs) {
    ASSERT_TRUE(fs::is_directory(d)) << d;
    for (const auto& e : fs::directory_iterator(d)) {
      if (!e.is_regular_file()) continue;
      const std::vector<uint8_t> bytes = testing_malformed::read_all(e.path().string());
      auto t = ChatTemplate::parse(std::string(bytes.begin(), bytes.end()));
      auto r = t.is_ok() ? t.value()->render(ctx) : Result<std::string>(t.status());
      if (!r.is_ok()) {
        EXPECT_FALSE(r.status().message().empty()) << e.path();
        EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << e.path() << ": " << r.status().message();
      } else {
        ++rendered;
      }
      ++n;
    }
  }
  EXPECT_GT(n, 20);
  EXPECT_GT(rendered, 10);  // the real templates and most seeds render
}

TEST(ChatTemplateSemantics, ErrorsAreStatuses) {
  auto r = render_chat_template("{{ raise_exception('Only user and assistant roles are supported!') }}", Json::object());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "raise_exception: Only user and assistant roles are supported!");
  auto syntax = ChatTemplate::parse("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(syntax.is_ok());
  EXPECT_NE(syntax.status().message().find("line 3"), std::string::npos) << syntax.status().message();
  EXPECT_EQ(ChatTemplate::parse("{% include 'x' %}").status().code(), StatusCode::kUnsupported);
  // The template's own text in a message (a token, raise_exception's argument) keeps it one line
  // of bounded length: control bytes escaped, long quotes cut (input found by fuzz_chat_template).
  auto token = ChatTemplate::parse("{% if x %}{% set y '\\n<</SYS>>\\n' %}{% endif %}");
  ASSERT_FALSE(token.is_ok());
  EXPECT_EQ(token.status().message().find('\n'), std::string::npos) << token.status().message();
  EXPECT_NE(token.status().message().find("\\x0a<</SYS>>\\x0a"), std::string::npos) << token.status().message();
  auto raised = render_chat_template("{{ raise_exception('two\\nlines\\x1b[31m') }}", Json::object());
  ASSERT_FALSE(raised.is_ok());
  EXPECT_EQ(raised.status().message(), "raise_exception: two\\x0alines\\x1b[31m");
  auto long_raise = render_chat_template("{{ raise_exception('x' * 5000) }}", Json::object());
  ASSERT_FALSE(long_raise.is_ok());
  EXPECT_LT(long_raise.status().message().size(), 1100u);
  EXPECT_NE(long_raise.status().message().find("(5000 bytes)"), std::string::npos);
  const char* broken[] = {"{{", "{%", "{#", "{% for %}", "{% endfor %}", "{{ ) }}", "{{ 'a }}", "{% macro %}",
                          "{{ [1, 2 }}", "{{ {'a' 1} }}", "{% set %}", "{{ x.0.y }}", "\xff\xfe", "{{ 1 if }}"};
  for (const char* src : broken) {
    EXPECT_NO_THROW({
      auto t = ChatTemplate::parse(src);
      if (t.is_ok()) (void)t.value()->render(Json::object());
    }) << src;
  }
  EXPECT_FALSE(ChatTemplate::parse("\xff\xfe").is_ok());
}

TEST(ChatTemplateSemantics, ContextKeepsKeyOrder) {
  Json ctx = Json::parse(R"({"tool": {"name": "f", "parameters": {"z": 1, "a": 2}, "description": "d"}})");
  EXPECT_EQ(render("{{ tool|tojson }}", ctx), R"({"name": "f", "parameters": {"z": 1, "a": 2}, "description": "d"})");
  EXPECT_EQ(render("{% for k in tool %}{{ k }} {% endfor %}", ctx), "name parameters description ");
}

TEST(ChatTemplateSemantics, ConcurrentRendersOfOneTemplate) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.role }}:{{ m.content|trim }}\n"
      "{% endfor %}{{ ns.n }}{{ messages|tojson }}");
  ASSERT_TRUE(t.is_ok());
  std::vector<std::string> outs(8);
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      Json msgs = Json::array();
      for (int i = 0; i <= k; ++i) msgs.push_back({{"role", "user"}, {"content", " m" + std::to_string(i) + " "}});
      for (int rep = 0; rep < 50; ++rep) {
        auto r = t.value()->render(Json{{"messages", msgs}});
        outs[k] = r.is_ok() ? r.value() : r.status().message();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) {
    Json msgs = Json::array();
    for (int i = 0; i <= k; ++i) msgs.push_back({{"role", "user"}, {"content", " m" + std::to_string(i) + " "}});
    EXPECT_EQ(outs[k], t.value()->render(Json{{"messages", msgs}}).value());
  }
}

TEST(ChatTemplateSemantics, StrftimeNowUsesTheGivenClock) {
  auto t = ChatTemplate::parse("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t.is_ok());
  ChatTemplateRenderOptions opts;
  opts.now_epoch_s = 86400 * 366;  // within 1971 in every time zone
  EXPECT_EQ(t.value()->render(Json::object(), opts).value(), "1971");
}

}  // namespace
}  // namespace duet
