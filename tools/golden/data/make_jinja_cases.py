#!/usr/bin/env python3
"""Writes tests/fixtures/data/jinja_cases.json: small templates rendered by the Jinja environment
transformers compiles chat templates with (its own _compile_jinja_template), so the C++
interpreter's constructs are each held against the reference, outside any chat template.

Every case is {"template", "context" (JSON text, read like a dataset line), "output"} or
{"template", "context", "error"} when the reference raises.

    python3 tools/golden/data/make_jinja_cases.py
"""
import json
import os

import jinja2
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

CONTEXT = ('{"items": ["x", "y", "z"], "s": "abcdef", "u": "  héllo wörld \\u3000", "n": 7, "zero": 0, '
           '"f": 2.5, "big": 123456789012345678901234567890, "d": {"b": 2, "a": 1, "nested": {"k": [1, 2.0, null]}}, '
           '"nothing": null, "yes": true, "msgs": [{"role": "user", "content": "q"}, '
           '{"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}], '
           '"nums": [3, 1, 2], "text": "line1\\nline2\\n", "floats": [1e15, 1e16, 1.5e-7, 0.1, -0.0, 100.0, 1e-4, 12345.678]}')

TEMPLATES = [
    # whitespace control, trim_blocks, lstrip_blocks
    "a\n  {% if true %}\n  b\n  {% endif %}\nc",
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "{% for i in items %}\n{{ i }}\n{% endfor %}",
    "  {%+ if true %}x{% endif %}",
    "{% if true +%}\nkept newline{% endif %}",
    "x {# comment #}\ny\n  {#- trimmed -#}  z",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "text\r\nwith crlf\r\n{{ 'x' }}",
    # expressions and precedence
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ (1 + 2) ~ 3 }} {{ missing ~ 'x' }}",
    "{{ 1 ~ 2 + 3 }}",
    "{{ n > 3 and n < 10 }} {{ 1 < n < 5 }} {{ not n == 7 }} {{ zero or 'fb' }} {{ s and 'last' }}",
    "{{ 'x' if yes else 'y' }}|{{ 'x' if nothing }}|{{ 'a' if zero else 'b' if n else 'c' }}",
    "{{ -n }} {{ -f }} {{ +n }} {{ n * 'ab' }} {{ items * 2 }} {{ items + ['w'] }}",
    "{{ 'b' in s }} {{ 'q' not in s }} {{ 'a' in d }} {{ 'x' in items }} {{ 5 in nums }}",
    # printing Python values
    "{{ items }} {{ d }} {{ nothing }} {{ yes }} {{ f }} {{ big }} {{ (1, 'a') }} {{ ('one',) }}",
    "{{ floats }}",
    "{{ \"it's\" }} {{ ['it\\'s', 'say \"hi\"', 'both \\' \"'] }} {{ ['tab\\tnl\\n'] }}",
    # string literals and escapes
    "{{ 'a\\nb' }}|{{ \"q\\\"uote\" }}|{{ 'tab\\tend' }}|{{ '\\u00e9\\x41' }}|{{ 'keep\\d' }}|{{ 'con' 'cat' }}",
    # subscripts, slices, attributes
    "{{ items[0] }}{{ items[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[-2:] }}{{ items[:-1] }}{{ s[::2] }}",
    "{{ d.a }} {{ d['b'] }} {{ d.nested.k[1] }} {{ items.0 }} {{ d.missing is defined }} {{ nothing.attr is defined }}",
    "{{ u[1:4] }}|{{ u|length }}|{{ u[-1] == '\\u3000' }}",
    # string methods
    "[{{ u.strip() }}][{{ u.lstrip() }}][{{ u.rstrip() }}][{{ '--x--'.strip('-') }}][{{ 'xxay'.lstrip('x') }}]",
    "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ text.splitlines() }}",
    "{{ s.startswith('ab') }} {{ s.endswith(('x', 'ef')) }} {{ s.upper() }} {{ 'ÀÉ'.lower() }} {{ 'hello world'.title() }}",
    "{{ s.replace('c', 'C') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ s.find('d') }} {{ s.count('a') }} {{ '-'.join(items) }}",
    "{{ 'hello'.capitalize() }} {{ '123'.isdigit() }} {{ ' '.isspace() }}",
    # filters
    "{{ d|tojson }} {{ d|tojson(indent=2) }} {{ d|tojson(sort_keys=true) }} {{ items|tojson(separators=(',', ':')) }}",
    "{{ {'u': 'é\"\\n\\u0001'}|tojson }} {{ floats|tojson }} {{ big|tojson }} {{ [yes, nothing]|tojson }}",
    "{{ d|tojson(indent=4) }}",
    "[{{ u|trim }}] {{ items|length }} {{ items|join(', ') }} {{ nums|join }} {{ missing|default('dflt') }} {{ ''|default('e', true) }}",
    "{{ items|first }} {{ items|last }} {{ s|upper }} {{ 'ABC'|lower }} {{ nums|sort }} {{ nums|sort(reverse=true) }} {{ s|list }}",
    "{{ nums|max }} {{ nums|min }} {{ nums|sum }} {{ [1, 1, 2]|unique|list }} {{ items|reverse|list }} {{ -3|abs }}",
    "{{ '3'|int + 1 }} {{ '2.5'|float }} {{ 'x'|int }} {{ 2.7|int }} {{ 2.567|round(2) }} {{ 2.5|round }}",
    "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ msgs|rejectattr('role', 'equalto', 'user')|list|length }}",
    "{{ nums|select('odd')|list }} {{ nums|reject('odd')|list }} {{ d|items|list }} {{ items|map('upper')|list }}",
    "{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ '<b>&'|e }}|{{ 'x'|safe }}|{{ 5|string }}",
    "{{ 'one two  three'|wordcount }} {{ msgs|map(attribute='missing', default='-')|list }}",
    # tests
    "{{ s is string }} {{ n is number }} {{ yes is number }} {{ n is integer }} {{ f is float }} {{ yes is boolean }}",
    "{{ d is mapping }} {{ items is sequence }} {{ s is sequence }} {{ d is iterable }} {{ n is iterable }} {{ missing is iterable }}",
    "{{ nothing is none }} {{ yes is true }} {{ zero is false }} {{ n is odd }} {{ nums is not string }} {{ 6 is divisibleby 3 }}",
    "{{ 'a' is in 'abc' }} {{ n is eq 7 }} {{ n is ne 7 }} {{ n is gt 3 }} {{ msgs[0] is sameas msgs[0] }} {{ 'abc' is lower }}",
    # loops
    "{% for i in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for i in items %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}",
    "{% for i in nums if i > 1 %}{{ i }}{{ loop.index }}{{ loop.last }} {% else %}none{% endfor %}",
    "{% for i in [] %}x{% else %}empty{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'ab' %}{{ c }}.{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for i in items %}{{ loop.cycle('odd', 'even') }} {% endfor %}",
    "{% for m in msgs %}{% for c in m.content %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
    # scoping
    "{% set x = 1 %}{% for i in items %}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(count=0, seen=[]) %}{% for i in items %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.count }}",
    "{% if true %}{% set y = 'inner' %}{% endif %}{{ y }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t }}",
    "{% set block %}  text {{ n }}  {% endset %}[{{ block }}]{% set trimmed | trim %}  x  {% endset %}[{{ trimmed }}]",
    "{% with a = 5, b = n %}{{ a + b }}{% endwith %}{{ a is defined }}",
    # macros, call, filter blocks
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet() }}",
    "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside {{ n }}{% endcall %}",
    "{% macro row(item) %}[{{ caller(item) }}]{% endmacro %}{% call(x) row('v') %}got {{ x }}{% endcall %}",
    "{% filter upper %}shout {{ s }}{% endfilter %}|{% filter trim|upper %}  both  {% endfilter %}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1)|trim }}{{ m('a') ~ 'b' }}",
    # dict and namespace globals
    "{% set dd = dict(a=1, b='x') %}{{ dd }} {{ dd.get('a') }} {{ dd.get('zz', 'no') }} {{ dd.keys()|list }} {{ dd.values()|list }}",
    "{{ namespace(x=1).x }} {{ range(3)|list }} {{ range(1, 7, 2)|list }}",
    # equality
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ msgs[0] == {'role': 'user', 'content': 'q'} }} {{ [1, 2] == [1, 2] }} {{ none == none }} {{ missing == missing }}",
    # errors
    "{{ missing.attr }}",
    "{{ raise_exception('custom failure') }}",
    "{{ 'a' + 1 }}",
    "{{ missing + 1 }}",
    "{{ nothing|tojson }}{{ missing|tojson }}",
    "{% for x in nothing %}{% endfor %}",
    "{{ items.append(1) }}",
    "{{ s|items|list }}",
    "{{ 1 / 0 }}",
]


def main():
    env_template = _compile_jinja_template
    context = json.loads(CONTEXT)
    cases = []
    for template in TEMPLATES:
        entry = {"template": template, "context": CONTEXT}
        try:
            entry["output"] = env_template(template).render(**context)
        except Exception as error:  # the reference refuses: C++ must too
            entry["error"] = type(error).__name__ + ": " + str(error)
        cases.append(entry)
    out_path = os.path.join(ROOT, "tests", "fixtures", "data", "jinja_cases.json")
    with open(out_path, "w", encoding="utf-8") as out:
        out.write('{"source": ' + json.dumps("jinja2 " + jinja2.__version__ + " via transformers") + ', "cases": [\n')
        out.write(",\n".join(json.dumps(case, ensure_ascii=False) for case in cases))
        out.write("\n]}\n")
    print(f"wrote {len(cases)} cases ({sum('error' in c for c in cases)} errors) to {out_path}")


if __name__ == "__main__":
    main()
