#!/usr/bin/env python3
"""Renders small Jinja templates with Python Jinja2 in transformers' chat
template environment (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, its tojson/raise_exception/strftime_now) and
writes jinja_cases.json: {context_json, cases: [{template, rendered | error}]}
(the context as JSON text, so that 123.0 stays a float for the C side).
    python3 make_jinja_cases.py > jinja_cases.json
The expected strings come from Jinja2 itself; test_template.c compares libkt's
engine against them. Mutating list methods are refused by the sandbox (and
allowed by libkt), so no case uses them."""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

MSGS = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi <b>&</b> 'q' \"dq\""},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "think\nmore"},
        {"role": "user", "content": "  spaced  \n"}]
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "enum": [1, 2]},
                                     "b": {"type": "number", "default": 1.5}},
    "required": ["a"]}}}]
CTX = {"messages": MSGS, "tools": TOOLS, "n": 7, "f": 2.5, "s": "Hello World", "u": "冷门 🚀 é",
       "l": [3, 1, 2], "words": ["b", "A", "c", "a"], "d": {"b": 1, "a": [1, {"x": None}]},
       "t": True, "z": 0, "e": "", "none": None, "big": 12345678901234,
       "fl": [0.1, 1e16, 1e-5, 123.0, -0.0, 1.5e300, 3.14159],
       "users": [{"name": "ann", "age": 31, "tags": ["x"]}, {"name": "Bob", "age": 25},
                 {"name": "cy", "age": 31, "tags": []}]}

T = [
    # ---- whitespace control, trim/lstrip
    "a\n  {% if true %}\n    b\n  {% endif %}\nc\n",
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "a\n  {%+ if true %}b{% endif %}\n",
    "{% if true +%}\nx{% endif %}",
    "x {# comment #}\ny\n  {# c2 #}\nz",
    "x {#- comment -#} y",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "  {{- 'a' -}}  \n  b",
    "{% raw %}{{ not parsed }}{% endraw %}\nafter",
    "line1\r\nline2\r\n{% if true %}\r\nx\r\n{% endif %}\r\n",
    "{% for i in l %}\n  {{ i }}\n{% endfor %}\n",
    "text\n\n",
    "{%- set x = 1 %}\n{{ x }}",
    "  {% set x = 2 %}  {{ x }}",
    "\t{% if true %}\ttab{% endif %}",
    "{% if true %}a{% else %}b{% endif %}  \n  {% for x in [1] %}{{x}}{% endfor %}",
    # ---- literals and printing
    "{{ 1 }} {{ 1.0 }} {{ 1.5e3 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }}",
    "{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}",
    "{{ 1_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 1e3 }} {{ 12.5e-3 }}",
    "{{ true }} {{ True }} {{ none }} {{ None }} {{ false }}",
    "{{ [1, 'a', none, true, 1.0] }} {{ (1,) }} {{ (1, 2) }} {{ () }} {{ {'a': 1, 2: 'b'} }}",
    "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }} {{ 'tab\\there' }} {{ 'nl\\n' }} {{ '\\u00e9\\x41' }}",
    "{{ ['it\\'s', \"q\\\"\", 'both\\'\"', 'nl\\n', '\\\\'] }}",
    "{{ 'a' 'b' \"c\" }}",
    "{{ fl }}",
    "{% for x in fl %}{{ x }}|{% endfor %}",
    "{{ big }} {{ big * 1000 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 'x' + 'y' }} {{ [1] + [2] }}",
    "{{ 1, 2 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] }}",
    "{{ n - 10 }} {{ -n }} {{ +n }} {{ -f }} {{ not n }} {{ not z }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}",
    "{{ 1 != 2 }} {{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in l }} {{ 'a' in d }} {{ 'x' in d }}",
    "{{ n and 'yes' }} {{ z and 'yes' }} {{ z or 'no' }} {{ e or none }} {{ n or 1 }}",
    "{{ 'yes' if t else 'no' }} {{ 'yes' if z else 'no' }} [{{ 'only' if z }}]",
    "{{ undefined_var }}|{{ undefined_var is defined }}|{{ none is none }}",
    "{{ d.a }} {{ d['a'][1].x }} {{ d.missing }} {{ l[0] }} {{ l[-1] }} {{ l[5] }} {{ s[0] }} {{ u[1] }}",
    "{{ s[1:5] }} {{ s[::-1] }} {{ s[-5:] }} {{ l[1:] }} {{ l[::2] }} {{ u[0:2] }} {{ u[::-1] }} {{ l[:-1] }}",
    "{{ s[10:2:-2] }} {{ l[-10:10] }} {{ s[:100] }} {{ (1, 2, 3)[1:] }}",
    "{{ d.items }}" if False else "{{ d.get('b') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}",
    "{{ messages[0].role }} {{ messages[1]['content'] }} {{ messages | length }}",
    # ---- if / for / loop
    "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}",
    "{% if z %}a{% elif e %}b{% else %}c{% endif %}",
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}",
    "{% for x in l %}{{ loop.cycle('odd', 'even') }}{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }}{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}",
    "{% for c in 'héllo' %}{{ c }}.{% endfor %}",
    "{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in l %}{% for y in l %}{{ loop.index }}{% endfor %}:{{ loop.index }} {% endfor %}",
    "{% set x = 0 %}{% for i in l %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}",
    "{% set ns = namespace(total=0, items=[]) %}{% for i in l %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}",
    "{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(2, 8, 2) %}{{ i }}{% endfor %}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}",
    "{% for i in messages[::-1] %}{{ i.role[0] }}{% endfor %}",
    "{% for m in messages %}{% if loop.first %}F{% endif %}{{ m.role }}{% if not loop.last %},{% endif %}{% endfor %}",
    "{% for x in none %}{% endfor %}",
    "{% for u in users|sort(attribute='age') %}{{ u.name }}{% endfor %}",
    "{% for x in l recursive %}{{ x }}{% endfor %}",
    "{% for item in [[1, [2, 3]], 4] recursive %}{% if item is iterable %}[{{ loop(item) }}]{% else %}{{ item }}@{{ loop.depth }}{% endif %}{% endfor %}",
    "{% for x in l %}{{ loop.changed(x > 1) }}{% endfor %}",
    # ---- set / macro / call / filter block / with
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
    "{% set x %}block {{ n }}{% endset %}[{{ x }}]",
    "{% set x | upper %}shout{% endset %}{{ x }}",
    "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('A') }} {{ greet('B', 'Hi') }} {{ greet(greeting='Yo', name='C') }}",
    "{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}",
    "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside {{ n }}{% endcall %}",
    "{% macro list(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) list(l) %}<{{ x }}>{% endcall %}",
    "{% macro rec(k) %}{% if k > 0 %}{{ k }}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}",
    "{% set g = 'global' %}{% macro show() %}{{ g }}{% endmacro %}{{ show() }}",
    "{% macro m() %}{% set inner = 1 %}{{ inner }}{% endmacro %}{{ m() }}{{ inner is defined }}",
    "{% filter upper %}hello {{ s }}{% endfilter %}",
    "{% with a = 1, b = n %}{{ a + b }}{% endwith %}{{ a is defined }}",
    "{% macro m(x) -%}\n  {{ x }}\n{%- endmacro %}\n[{{ m(1) }}]",
    # ---- tests
    "{{ n is number }}{{ f is float }}{{ n is integer }}{{ t is boolean }}{{ s is string }}{{ d is mapping }}{{ l is sequence }}{{ l is iterable }}{{ n is iterable }}",
    "{{ none is none }}{{ t is true }}{{ z is false }}{{ n is odd }}{{ n is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}",
    "{{ n is eq 7 }}{{ n is equalto(7) }}{{ n is ne 7 }}{{ n is lt 8 }}{{ n is gt 8 }}{{ n is le 7 }}{{ n is ge 8 }}",
    "{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'Abc' is lower }}{{ 2 is in l }}{{ s is callable }}{{ range is callable }}",
    "{{ undefined_var is undefined }}{{ d.a is not none }}{{ t is sameas true }}{{ 'x' is not string }}",
    "{{ undefined_var is iterable }}{{ undefined_var is sequence }}{{ d is sequence }}{{ t is number }}",
    "{{ l | select('odd') | list }}{{ l | reject('odd') | list }}{{ l | select('gt', 1) | list }}{{ l | select | list }}",
    "{{ users | selectattr('age', 'equalto', 31) | map(attribute='name') | join(',') }}",
    "{{ users | rejectattr('tags') | map(attribute='name') | list }}{{ users | selectattr('tags', 'defined') | list | length }}",
    # ---- filters
    "{{ s | upper }} {{ s | lower }} {{ 'hello wORLD' | capitalize }} {{ \"they're here-now (x\" | title }} {{ u | upper }}",
    "[{{ '  x  ' | trim }}] [{{ 'xxaxx' | trim('x') }}] [{{ s | replace('o', '0') }}] [{{ s | replace('o', '0', 1) }}]",
    "{{ l | length }} {{ s | length }} {{ u | length }} {{ d | length }} {{ l | count }} {{ undefined_var | length }}",
    "{{ l | first }} {{ l | last }} {{ s | first }} {{ [] | first }}|{{ l | join('-') }} {{ l | join }} {{ users | join(', ', attribute='name') }}",
    "{{ l | sort }} {{ l | sort(reverse=true) }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ words | unique | list }}",
    "{{ users | sort(attribute='name') | map(attribute='name') | list }} {{ users | map(attribute='tags', default='-') | list }}",
    "{{ l | reverse | list }} {{ s | reverse }} {{ l | list }} {{ 'ab' | list }} {{ d | list }}",
    "{{ l | sum }} {{ users | sum(attribute='age') }} {{ l | min }} {{ l | max }} {{ words | max }} {{ users | max(attribute='age') }}",
    "{{ -3 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 7 | round }} {{ 3.14159 | round(2, 'floor') }} {{ 2.1 | round(0, 'ceil') }}",
    "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ 3.9 | int }} {{ '0x1A' | int(0, 16) }} {{ '3.5' | float }} {{ 2 | float }} {{ 'y' | float }}",
    "{{ undefined_var | default('d') }} {{ none | default('d') }} {{ e | default('d', true) }} {{ e | d('x', boolean=true) }} {{ n | default(0) }}",
    "{{ d | items | list }} {{ d | dictsort }} {{ {'b': 1, 'A': 2, 'a': 3} | dictsort }} {{ {'b': 1, 'a': 3} | dictsort(by='value', reverse=true) }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}",
    "{{ '<a href=\"x\">&\\'</a>' | e }} {{ '<b>' | escape }} {{ '<b>' | safe }} {{ 5 | string }} {{ none | string }} {{ l | string }}",
    "{{ 'a b  c\\nd' | wordcount }} {{ s | center(21) }}| {{ '%s-%d' | format('x', 3) }} {{ '%(a)s' | format(a=1) }}",
    "{{ l | batch(2) | list }} {{ l | batch(2, 0) | list }} {{ [1,2,3,4,5] | slice(2) | list }}",
    "{{ users | map(attribute='name') | map('upper') | list }} {{ ['a', 'b'] | map('replace', 'a', 'x') | list }}",
    "{{ 'long sentence here' | truncate(9) }} {{ 'long sentence here' | truncate(9, true) }} {{ 'short' | truncate(9) }}",
    "{{ users[0] | attr('name') }} {{ s | attr('missing') }}",
    # ---- tojson
    "{{ d | tojson }}",
    "{{ messages | tojson }}",
    "{{ tools | tojson }}",
    "{{ tools | tojson(indent=2) }}",
    "{{ d | tojson(indent=4, sort_keys=true) }}",
    "{{ d | tojson(separators=(',', ':')) }}",
    "{{ u | tojson }} {{ u | tojson(ensure_ascii=true) }} {{ '\\x01\\x7f\\t\\\\\"' | tojson }}",
    "{{ fl | tojson }} {{ [none, true, false, 0, -1] | tojson }} {{ {} | tojson }} {{ [] | tojson(indent=2) }} {{ {1: 2, none: 3, true: 4} | tojson }}",
    "{{ 'x' | tojson(indent='\\t') }} {{ {'a': [1, {'b': {}}]} | tojson(indent='\\t') }}",
    # ---- str methods
    "[{{ '  a b  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  a '.lstrip() }}][{{ ' a  '.rstrip() }}][{{ '\\n\\na\\n'.lstrip('\\n') }}][{{ 'abcba'.rstrip('ab') }}]",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b c '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ' a b  c '.rsplit(None, 1) }} {{ ''.split() }} {{ ''.split(',') }}",
    "{{ s.startswith('Hell') }} {{ s.endswith('World') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith(('x', 'y')) }} {{ s.startswith('World', 6) }}",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ 'ab'.replace('', '-') }} {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aBc'.swapcase() }}",
    "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.index('W') }} {{ s.count('l') }} {{ u.find('🚀') }} {{ s.find('o', 5) }}",
    "{{ '-'.join(['a', 'b']) }} {{ ', '.join(words) }} {{ '{} and {}'.format('x', 'y') }} {{ '{0}{0}{name}'.format('a', name='n') }}",
    "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' \\t'.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }} {{ ''.isdigit() }}",
    "{{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }} {{ 'ab'.rjust(4) }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }}",
    "{{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.txt'.removesuffix('.txt') }} {{ 'a\\nb\\r\\nc'.splitlines() }}",
    "{{ ('<think>' ~ 'abc' ~ '</think>rest').split('</think>')[-1] }} {{ 'x</think>y'.split('</think>')[0].rstrip('\\n').split('<think>')[-1] }}",
    # ---- dict methods, namespace
    "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {% for k, v in d | items %}{{ k }}{% endfor %}",
    "{% set ns = namespace(a=1, b='x') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}{{ ns.missing is defined }}",
    "{% set ns = namespace(d) %}{{ ns.b }}",
    "{{ dict(a=1, b=2) }} {{ dict(a=1).a }}",
    # ---- string formatting
    "{{ '%s has %d items (%.2f%%)' % ('x', 3, 45.678) }} {{ '%5s|%-5s|%05d|%x|%X|%o|%e|%g' % ('a', 'b', 42, 255, 255, 8, 12345.678, 0.0001) }}",
    "{{ '%s' % none }} {{ '%r' % 'q' }} {{ '%s' % [1, 'a'] }} {{ '%(k)s=%(v)r' % {'k': 'a', 'v': 'b'} }} {{ '%c' % 65 }}",
    # ---- transformers additions
    "{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}",
    "{{ raise_exception('boom: ' ~ n) }}",
    # ---- error cases (Jinja raises; we must fail cleanly)
    "{{ undefined_var.attr }}",
    "{{ undefined_var + 1 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 / 0 }}",
    "{{ l < 'a' }}",
    "{{ none.x.y }}",
    "{{ undefined_var | tojson }}",
    "{% for a, b in l %}{% endfor %}",
    "{{ 'x'.split('') }}",
    "{{ [] | batch(0) | list }}",
    "{{ range(200000) | length }}",
    "{{ n is nonexistenttest }}",
    "{{ 'abc'.index('z') }}",
    "{% for %}",
    "{{ a b }}",
    "{% if true %}unclosed",
    "{% endif %}",
    "{{ foo( }}",
    "{% macro m( %}{% endmacro %}",
    "{{ '%d' % 'x' }}",
    "{{ '%s %s' % ('a',) }}",
    "{{ '%s' % ('a', 'b') }}",
    "{{ l[1:2:0] }}",
    # ---- scoping, late binding, undefined through filters
    "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}",
    "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}",
    "{% macro m() %}{{ loop is defined }}{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}",
    "{% for i in [1, 2] %}{% set y = i %}{% endfor %}{{ y is defined }}",
    "{% if true %}{% set y = 5 %}{% endif %}{{ y }}",
    "{% set enable_thinking = enable_thinking | default(true) %}{{ enable_thinking }}",
    "{% set bos_token = 'B' %}{{ bos_token }}{% macro m() %}{{ bos_token }}{% endmacro %}{{ m() }}",
    "[{{ undefined_var | trim }}][{{ undefined_var | upper }}][{{ undefined_var | join(',') }}][{{ undefined_var | list }}][{{ undefined_var | string }}]",
    "{{ undefined_var == none }} {{ undefined_var != 1 }} {{ 'a' in undefined_var }} {{ undefined_var ~ 'x' }} {{ not undefined_var }}",
    "{{ messages[0].get('content', '') }}|{{ messages[0].get('nope', 'dflt') }}|{{ messages[0].nope is defined }}",
    "{{ messages[0].role in ['user', 'system'] }} {{ 'developer' in ['user'] }}",
    "{% for i in range(n - 1, -1, -1) %}{{ i }}{% endfor %}",
    "{% for m in messages %}{{ loop.index0 }}:{{ messages[loop.index0 - 1].role }};{% endfor %}",
    "{{ messages[-1] }}",
    "{{ d }} {{ {'k': 'it\'s', 'u': u} }} {{ [none, undefined_var] }}",
    "{{ (messages | selectattr('role', 'equalto', 'user') | list | length) }} {{ messages | map(attribute='role') | unique | list }}",
    "{{ messages | selectattr('reasoning_content') | map(attribute='reasoning_content') | first }}",
    "{{ messages | selectattr('role', 'in', ['user', 'system']) | list | length }}",
    "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "{% for m in messages %}{% if m.role == 'user' %}{{ m.content | trim }}|{% endif %}{% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role[0] }}{% endfor %}",
    "{{ messages[1:] | length }} {{ messages[:1][0].role }} {{ (messages | last).content | trim }}",
    "{% for tool in tools %}{% set fn = tool.function if tool.function is defined else tool %}{{ fn.name }}({{ fn.parameters.properties | list | join(', ') }}){% endfor %}",
    "{% for k, v in tools[0].function.parameters.properties.items() %}{{ k }}:{{ v.type }}{{ '*' if k in tools[0].function.parameters.required }};{% endfor %}",
    "{{ tools[0].function.parameters.properties.a.enum | join(' | ') }} {{ tools[0].function.parameters.properties.b.default | tojson }}",
    "{%- for m in messages -%}\n  {%- if loop.first -%}\n    first\n  {%- endif %}\n  {{ m.role }}\n{% endfor %}",
    "{% for x in l %}\n    {{- x -}}\n{% endfor %}",
    "{%- if true %}\n  a\n{%- endif %}\nb",
    "{% macro m() -%}\n  body\n{%- endmacro -%}\n\n{{- m() }}",
    "{{ 'a' if n > 5 else 'b' if n > 2 else 'c' }} {{ 1 if none else 2 }}",
    "{{ n * 1.5 }} {{ 10 / 3 }} {{ 2 ** 0.5 }} {{ 1e100 }} {{ 123456789.0 * 10 }} {{ 0.000123 }} {{ 1/3 * 3 }}",
    "{{ s.split(' ')[1].lower() }} {{ s|lower|replace('o', '') }} {{ (s ~ '!') | length }}",
    "{{ '%s' % messages[0].role }} {{ '%5.1f|%-6d|%+d' % (f, n, n) }}",
    # ---- Python corner cases (split/rsplit, slices, %-format, floats, round)
    "{{ ' a b '.split(None, 0) }}|{{ 'a b  c '.split(None, 1) }}|{{ 'a b  '.rsplit(None, 1) }}|{{ ' a b'.rsplit(None, 1) }}",
    "{{ 'a\\tb\\nc'.split() }}|{{ 'x'.split(none) }}|{{ 'a,b'.split(sep=',') }}|{{ 'a,b,c'.split(',', maxsplit=1) }}",
    "{{ 'abc'[5:1] }}|{{ [1,2,3][::-1] }}|{{ 'abc'[-1::-2] }}|{{ 'abcdef'[1:-1:2] }}",
    "{{ '%-10s|' % 'ab' }}{{ '%.3s' % 'abcdef' }}{{ '%5.1s|' % 'xyz' }}",
    '{{ 1 == 1 == 1 }} {{ 1 < 2 > 0 }} {{ not 1 == 2 }} {{ -2 ** 2 }} {{ (-2) ** 2 }} {{ 2 * -1 }}',
    "{{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ 1.0 == 1 }} {{ 'a' == 'a' }}",
    '{{ 10 // 3.0 }} {{ -10 % 3.0 }} {{ 7.5 // 2 }} {{ 1e308 * 10 }} {{ -1e308 * 10 }}',
    '{{ 0.1 + 0.7 }} {{ 1.1 * 3 }} {{ 100.0 }} {{ 1e22 }} {{ 1.5e-7 }} {{ 123456789012345678.0 }}',
    "{{ x is not defined and y is undefined }} {{ none is not none }} {{ [] is iterable }} {{ '' is string }}",
    "{% for a, b in {'x': 1, 'y': 2}.items() %}{{ a }}{{ b }}{% endfor %}|{% for a in {'x': 1}|dictsort %}{{ a }}{% endfor %}",
    '{% set l = [3, 1] %}{% for x in l|sort %}{{ loop.index }}{{ x }}{% endfor %}{{ l }}',
    "{{ range(5)|list }} {{ range(5)[1:3] | list }} {{ range(0) | list }} {{ range(3) | join(',') }}",
    '{{ [1, [2, [3]]] | tojson }} {{ "é" | tojson(ensure_ascii=true) }} {{ "😀" | tojson(ensure_ascii=true) }}',
    "{{ {'b': 2, 'a': 1} | tojson(sort_keys=true, indent=1) }}",
    "{{ 'Hello' | center(11) }}|{{ 'Hi' | center(5) }}|{{ 'Hi' | center(4) }}|{{ 'abc'.center(6) }}|{{ 'ab'.center(5) }}",
    "{{ 'abc' | truncate(3) }}|{{ 'hello world foo' | truncate(11, false, '…') }}|{{ 'a b c d e f g h' | truncate(5, leeway=0) }}",
    "{{ [3, 'a'] | sort }}",
    "{{ 'x' ~ 1.0 ~ 2 }} {{ 3.0|int }} {{ '  12  '|int }} {{ '1e3'|int }} {{ '1_000'|int }} {{ true|int }} {{ none|int }}",
    '{{ 5|round(-1) }} {{ 15.5|round(-1) }} {{ 1234.5678|round(2) }} {{ 0.5|round }} {{ 1.5|round }} {{ -0.5|round }}',
    "{{ ''|first }}|{{ 'ab'|last }}|{{ {'a':1}|first }}|{{ [none]|first }}",
    "{{ [1,2,3]|map('string')|join }} {{ ['a','b']|map('upper')|list }} {{ [1, 2]|select('equalto', 2)|list }}",
    "{{ users|default([])|length }} {{ (none or [])|length }} {{ ''|default('x') }} {{ false|default('x') }}",
    "{% if [] %}t{% else %}f{% endif %}{% if {} %}t{% else %}f{% endif %}{% if 0.0 %}t{% else %}f{% endif %}{% if ' ' %}t{% endif %}",
    "{{ 'abc'|replace('', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'.replace('b', '') }}",
    '{{ "a\\nb"|indent(2) }}|{{ "\\na\\n"|indent(2, true, true) }}|{{ ""|indent }}',
    '{{ \'hello world\'|title }} {{ \'HELLO\'|capitalize }} {{ "o\'neil mc-d"|title }} {{ "o\'neil mc-d".title() }}',
    '{{ loop }}{{ caller is defined }}{{ varargs is defined }}',
    "{% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }} {{ m('x', 'y') }}",
    '{% macro m(a) %}{{ a }}{% endmacro %}{{ m() }}|{{ m(1, 2) }}',
    "{{ 'ß ΣΑΣ Привет'|lower }} {{ 'straße'|upper }} {{ 'ÿ'|upper }}",
    # ---- groupby
    "{% for g in [{'a': 'X', 'v': 1}, {'a': 'y', 'v': 2}, {'a': 'x', 'v': 3}]|groupby('a') %}{{ g.grouper }}:{{ g.list|map(attribute='v')|list }};{% endfor %}",
    "{% for k, items in [{'a': 'X', 'v': 1}, {'a': 'y', 'v': 2}, {'a': 'x', 'v': 3}]|groupby('a', case_sensitive=true) %}{{ k }}={{ items|length }};{% endfor %}",
    "{{ [{'a': 1}, {'b': 2}]|groupby('a', default=0)|list }}",
    "{{ [{'a': 1}, {'a': 1}]|groupby('a') }}",
    # ---- generators, dict views, corner cases
    "{% if [] | select %}T{% else %}F{% endif %}{% if [] | map('string') %}T{% endif %}{% if undefined_var | items %}T{% endif %}",
    "{% set g = [1, 2] | map('string') %}{{ g | list }}{{ g | list }}",
    "{{ {'a': 1}.items() }} {{ {'a': 1}.keys() }} {{ {'a': 1}.values() }} {{ {'a': 1}.items() is sequence }} {{ {'a': 1}.keys() | list }}",
    '{{ ([1] | select) is sequence }} {{ ([1] | select) is iterable }} {{ [1, 2] | reverse | list }} {{ ([1] | reverse) is sequence }}',
    '{{ 2.5 is even }} {{ 3.0 is odd }} {{ 4.5 is divisibleby 1.5 }} {{ -3 is odd }}',
    "{{ undefined_var | truncate(5) }}|{{ [1, 2] | truncate(5) }}|{{ 'ab' % [1] }}|{{ '%s' % [1, 2] }}",
    '{% if 1 if true else 0 %}x{% endif %}',
    '{{ undefined_var | int }}',
    '{{ l | select | length }}',
    "{{ l | map('string') | tojson }}",
    '{{ d.items() | tojson }}',
    '{{ 5 | indent }}',
    "{{ {(1, 2): 'a'}[1, 2] }}|{{ [1][1, 2] }}|{{ 1 != not[1, 2] }}",
]

cases = []
for src in T:
    c = {"template": src}
    try:
        c["rendered"] = env.from_string(src).render(**CTX)
    except Exception as ex:  # noqa: BLE001 - any Jinja failure is an expected error
        c["error"] = type(ex).__name__ + ": " + str(ex)[:200]
    cases.append(c)
json.dump({"context_json": json.dumps(CTX, ensure_ascii=False), "cases": cases}, sys.stdout, indent=1, ensure_ascii=False)
sys.stdout.write("\n")
