"""The jinja2 environment transformers renders chat templates with (apply_chat_template).

Mirrors transformers.utils.chat_template_utils._compile_jinja_template: an
ImmutableSandboxedEnvironment with trim_blocks/lstrip_blocks, the loopcontrols extension,
the {% generation %} extension (rendered as its body), a tojson filter that is json.dumps with
ensure_ascii=False (no HTML escaping, keys in insertion order), and the raise_exception and
strftime_now globals. strftime_now uses a fixed clock (NOW_EPOCH_S) so references are stable.
"""

import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW_EPOCH_S = 1700000000


class GenerationTracker(Extension):
    """transformers' AssistantTracker without the index tracking: the body renders as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.fromtimestamp(NOW_EPOCH_S).strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template, context):
    """Returns ("output", text) or ("error", "<ExceptionType>: message")."""
    try:
        return "output", env.from_string(template).render(**context)
    except Exception as e:  # noqa: BLE001 - any failure is an expected outcome to record
        return "error", f"{type(e).__name__}: {e}"
