"""transformers' chat-template environment, shared by the case generators
(make_jinja_cases.py, make_template_cases.py): Jinja2 with trim_blocks,
lstrip_blocks and loopcontrols, sandboxed (ImmutableSandboxedEnvironment) or
not, and transformers' tojson filter and raise_exception global."""
import json

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def make_env(sandboxed=True):
    cls = ImmutableSandboxedEnvironment if sandboxed else jinja2.Environment
    env = cls(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env
