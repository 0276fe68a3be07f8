#!/usr/bin/env python3
"""Writes tests/fixtures/data/jinja_builtin_cases.json: jinja2's built-in filters, tests, globals
and statements, each rendered by the environment transformers compiles chat templates with
(jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols, plus
transformers' tojson, raise_exception, strftime_now, dict and namespace), so the C++ interpreter
is held against jinja2 itself for every one of them.

The fixture also records jinja2's own lists (jinja2.filters.FILTERS, jinja2.tests.TESTS and the
default globals), so the C++ test can check that each is either built and covered by a case here,
or refused as docs/data.md lists.

Every case is {"covers", "template", "context" (JSON text), "output"} or {..., "error"} when
jinja2 raises.

    python3 tools/golden/data/make_jinja_builtin_cases.py
"""
import json
import os

import jinja2
import jinja2.defaults
import jinja2.filters
import jinja2.tests
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

CONTEXT = json.dumps({
    "users": [{"name": "bob", "age": 31, "city": "Oslo", "tags": ["a", "b"]},
              {"name": "Alice", "age": 27, "city": "Rome", "tags": []},
              {"name": "carol", "age": 31, "city": "oslo", "tags": ["c"]},
              {"name": "dave", "city": "Rome", "tags": ["d"]}],
    "d": {"b": 2, "A": 3, "a": 1, "c": 0},
    "words": "the quick brown fox jumps over the lazy dog",
    "long": "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor",
    "html": "<p class=\"x\">Tom &amp; <b>Jerry</b> &lt;3 &#65;&#x42; &quot;q&quot;</p><!-- c -->  end",
    "tree": [{"name": "a", "children": [{"name": "a1", "children": []},
                                        {"name": "a2", "children": [{"name": "a2x", "children": []}]}]},
             {"name": "b", "children": []}],
    "nums": [3, 1, 4, 1, 5, 9, 2, 6],
    "n": 7, "f": 2.5, "s": "héllo", "nothing": None, "yes": True,
    "url": "a b&c=d/é?x", "qd": {"q": "a b", "lang": "fr/é", "n": 3},
}, ensure_ascii=False)

# (covers, template). `covers` names what the case exercises: filter:NAME, test:NAME,
# global:NAME or statement:NAME.
CASES = [
    # ---- filters jinja2 has and the interpreter had before
    ("filter:abs", "{{ -3|abs }} {{ -2.5|abs }} {{ 4|abs }}"),
    ("filter:capitalize", "{{ 'hELLO wORLD'|capitalize }} {{ 'ǆX'|capitalize }} {{ 'ǆx ǆ'.title() }} {{ 'ǆX'.capitalize() }}"),
    ("filter:count", "{{ nums|count }} {{ 'abc'|count }} {{ d|count }}"),
    ("filter:default filter:d", "{{ missing|default('x') }} {{ ''|d('e', true) }} {{ nothing|default('n') }} {{ 0|d('z', boolean=true) }}"),
    ("filter:escape filter:e", "{{ '<a href=\"x\">&\\'</a>'|escape }} {{ '<'|e }}"),
    ("filter:first filter:last", "{{ nums|first }} {{ nums|last }} {{ 'xyz'|first }} {{ 'xyz'|last }}"),
    ("filter:float filter:int", "{{ '3.5'|float }} {{ 'x'|float(1.5) }} {{ '42'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ '0b101'|int(0, 0) }} {{ '1_000'|int }}"),
    ("filter:indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb\\n\\nc'|indent(2, first=true, blank=true) }}|{{ 'a\\nb'|indent('> ') }}"),
    ("filter:items", "{% for k, v in d|items %}{{ k }}={{ v }} {% endfor %}"),
    ("filter:join", "{{ nums|join('-') }} {{ users|join(', ', attribute='name') }} {{ [1, 'a', none]|join }}"),
    ("filter:length", "{{ users|length }} {{ s|length }}"),
    ("filter:list", "{{ 'ab'|list }} {{ d|list }} {{ (1, 2)|list }}"),
    ("filter:lower filter:upper", "{{ 'MiXeD'|lower }} {{ 'MiXeD'|upper }}"),
    ("filter:map", "{{ users|map(attribute='name')|list }} {{ users|map(attribute='age', default=0)|list }} {{ ['a', 'b']|map('upper')|list }} {{ nums|map('string')|join }}"),
    ("filter:max filter:min", "{{ nums|max }} {{ nums|min }} {{ ['b', 'A', 'c']|max }} {{ ['b', 'A', 'c']|min(case_sensitive=true) }} {{ users|selectattr('age')|max(attribute='age')|attr('name') }} {{ [{'v': 2}, {'v': 5}]|min(attribute='v') }}"),
    ("filter:reject filter:select", "{{ nums|select('odd')|list }} {{ nums|reject('odd')|list }} {{ nums|select('gt', 3)|list }} {{ [0, 1, '', 'a', none]|select|list }}"),
    ("filter:rejectattr filter:selectattr", "{{ users|selectattr('age')|map(attribute='name')|list }} {{ users|rejectattr('city', 'eq', 'Rome')|map(attribute='name')|list }}"),
    ("filter:replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}"),
    ("filter:reverse", "{{ 'abc'|reverse }} {{ nums|reverse|list }}"),
    ("filter:round", "{{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 7|round }}"),
    ("filter:safe filter:string", "{{ '<b>'|safe }} {{ 5|string }} {{ nothing|string }} {{ [1]|string }}"),
    ("filter:sort", "{{ nums|sort|list }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ users|selectattr('age')|sort(attribute='age,name')|map(attribute='name')|list }} {{ users|sort(attribute='name', reverse=true)|map(attribute='name')|join(',') }}"),
    ("filter:sum", "{{ nums|sum }} {{ nums|sum(start=10) }} {{ [1.5, 2]|sum }} {{ users|selectattr('age')|sum(attribute='age') }}"),
    ("filter:title", "{{ 'hello wORLD-x y'|title }}|{{ \"o'neil x1y a_b (paren) [br] {c} <d>e  --f\"|title }}|{{ 'éCOLE ǆx'|title }}"),
    ("filter:tojson", "{{ d|tojson }} {{ users[0]|tojson(indent=2) }}"),
    ("filter:trim", "[{{ '  x  '|trim }}] [{{ '--x--'|trim('-') }}]"),
    ("filter:unique", "{{ nums|unique|list }} {{ ['a', 'A', 'b']|unique|list }} {{ ['a', 'A', 'b']|unique(case_sensitive=true)|list }} {{ users|unique(attribute='city')|map(attribute='name')|list }}"),
    ("filter:wordcount", "{{ words|wordcount }} {{ 'a-b c'|wordcount }}"),
    # ---- filters new to the interpreter
    ("filter:attr", "{{ users[0]|attr('name') }}|{{ d|attr('keys') is callable }}|{{ s|attr('upper')() }}"),
    ("filter:batch", "{% for row in nums|batch(3) %}{{ row }}{% endfor %} {% for row in nums|batch(3, 'x') %}{{ row|join }} {% endfor %}"),
    ("filter:center", "[{{ 'ab'|center(7) }}] [{{ 'ab'|center(6) }}] [{{ 'abc'|center(6) }}] [{{ 'abcdef'|center(3) }}] [{{ 'x'|center }}]"),
    ("filter:dictsort", "{{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(false, 'value') }} {{ d|dictsort(reverse=true) }}"),
    ("filter:filesizeformat", "{{ 0|filesizeformat }} {{ 1|filesizeformat }} {{ 999|filesizeformat }} {{ 1000|filesizeformat }} {{ 1500000|filesizeformat }} {{ 1024|filesizeformat(true) }} {{ 123456789|filesizeformat(binary=true) }} {{ 1e30|filesizeformat }} {{ 1.5|filesizeformat }}"),
    ("filter:forceescape", "{{ '<x>'|forceescape }} {{ '<x>'|safe|forceescape }}"),
    ("filter:format", "{{ '%s is %d years'|format('bob', 31) }} {{ '%5.2f|%-4s|%04d|%x|%X|%o|%e|%g|%r|%%|%c'|format(3.14159, 'ab', 7, 255, 255, 8, 12345.678, 0.0001, 'q', 65) }} {{ '%(a)s-%(b)03d'|format(a='x', b=5) }} {{ '%+d % d %i %5s|%-5d|'|format(3, 4, 5.9, 'r', 6) }}"),
    ("filter:groupby", "{% for g in users|groupby('city') %}{{ g.grouper }}:{{ g.list|map(attribute='name')|join(',') }};{% endfor %} {% for city, items in users|groupby('city', case_sensitive=true) %}{{ city }}={{ items|length }};{% endfor %} {% for g in users|groupby('age', default=0) %}{{ g.grouper }};{% endfor %}"),
    ("filter:pprint", "{{ d|pprint }} {{ users[0]|pprint }} {{ [1, 'a', none, true, 2.5]|pprint }} {{ 'x'|pprint }}"),
    ("filter:random", "{{ [7]|random }} {{ 'z'|random }}"),
    ("filter:slice", "{% for col in nums|slice(3) %}{{ col }}{% endfor %} {% for col in nums|slice(3, 0) %}{{ col|join }} {% endfor %} {{ [1, 2]|slice(4)|list }}"),
    ("filter:striptags", "{{ html|striptags }}|{{ '  a\\n\\tb  '|striptags }}|{{ '&lt;&gt;&amp;&copy;&#8364;&nbsp;x'|striptags }}"),
    ("filter:truncate", "{{ long|truncate(20) }}|{{ long|truncate(20, true) }}|{{ long|truncate(20, false, '…', 0) }}|{{ 'short'|truncate(10) }}|{{ long|truncate(78) }}|{{ long|truncate(20, end='') }}"),
    ("filter:urlencode", "{{ url|urlencode }} {{ qd|urlencode }} {{ [('a', 1), ('b c', 'd/e')]|urlencode }} {{ 5|urlencode }}"),
    ("filter:urlize", "{{ 'see http://example.com/x?y=1, or www.foo.org. mail me@ex.com (https://a.b/c) x.com' |urlize }}|{{ 'go https://averyveryverylongdomain.example.com/path now'|urlize(20) }}|{{ 'http://a.b'|urlize(nofollow=true, target='_blank') }}"),
    ("filter:wordwrap", "{{ long|wordwrap(20) }}|{{ 'a-long-hyphenated-word and more text'|wordwrap(10) }}|{{ 'supercalifragilistic word'|wordwrap(8) }}|{{ 'supercalifragilistic word'|wordwrap(8, false) }}|{{ 'x y\\nz w'|wordwrap(3, wrapstring='/') }}"),
    ("filter:xmlattr", "<a{{ {'href': 'x&y', 'title': '<q>', 'none': none, 'n': 3}|xmlattr }}> <b{{ {'c': 1}|xmlattr(false) }}>"),
    ("filter:safe filter:escape markup", "{{ ('<b>'|safe) + '<' }} {{ '<' + ('<b>'|safe) }} {{ '<'|e|e }} {{ ['x'|e, 'y'|safe] }} {{ ('<b>'|safe) ~ '<' }} {{ ('%s<'|safe) % '<' }} {{ ('<'|safe)|upper }}"),
    ("filter:pprint", "{{ {'key': 'v' * 30, 'list': range(20)|list, 'nested': {'b': [1, 2, 3] * 8, 'a': (1, 'x')}}|pprint }}|{{ [users[0], users[1], users[2]]|pprint }}|{{ ((1,),)|pprint }}"),
    ("filter:format", "{{ '%s'|format(none) }} {{ '%.3s|%-6.2f|%+.1e|%G'|format('abcdef', 2.5, -1234.5, 1e-10) }}"),
    ("filter:format", "{{ '%d'|format('x') }}"),
    ("filter:format", "{{ '%s %s'|format(1) }}"),
    ("filter:wordwrap", "{{ 'one two three four five six seven eight nine ten eleven'|wordwrap(9) }}|{{ 'well--known and x--y'|wordwrap(6) }}|{{ '   lead and trail   '|wordwrap(5) }}|{{ 'a\n\nb'|wordwrap(4) }}"),
    ("filter:truncate", "{{ 'a b c d e f g h i j k'|truncate(9, leeway=0) }}|{{ 'abcdefghijkl'|truncate(5, leeway=0) }}"),
    ("filter:truncate", "{{ 'x'|truncate(2, end='...') }}"),
    ("filter:urlize", "{{ 'a (www.x.com) <https://y.org> and http://[::1]:80/p plus http://1.2.3.4/ and foo@bar.baz, mailto:q@r.st'|urlize(rel='me') }}"),
    ("filter:center filter:format markup", "{{ ('%s'|safe)|format('<') }} {{ ('a<'|e)|center(9) }} {{ 'x'|e|string }} {{ ('%s'|safe) % ('<',) }}"),
    ("filter:pprint", "{{ long|pprint }}|{{ [long ~ ' ' ~ long]|pprint }}|{{ {'k': long ~ long}|pprint }}|{{ ('line one\\n' * 9)|pprint }}"),
    ("filter:indent", "{{ '\\na\\r\\nb'|indent(first=true) }}|{{ ''|indent(2, true) }}|{{ 'x\\n'|indent(1, blank=true) }}"),
    ("filter:safe markup", "{{ ('<b>'|safe).replace('b', '<i>') }} {{ ('a|b'|safe).split('|') }} {{ (','|safe).join(['<', 'x'|safe]) }} {{ ('<p>x</p>'|safe)[1:3] }} {{ ('<'|safe) * 2 }} {{ ('<x> y z'|safe)|truncate(3, leeway=0, end='<') }} {{ ('<a>'|safe)|center(7) }} {{ ('<a>'|safe).upper() }}"),
    ("statement:autoescape markup", "{% set b = '<b>'|safe %}{% autoescape true %}{{ '<' ~ ('<b>'|safe) }} {{ '<' ~ b }} {{ '<' ~ '>' }} {{ 1 ~ '&' }} {{ b }}{% endautoescape %}|{% autoescape false %}{{ '<' }}{% endautoescape %}"),
    # ---- tests
    ("test:boolean test:false test:true", "{{ yes is boolean }} {{ 1 is boolean }} {{ false is false }} {{ 0 is false }} {{ yes is true }}"),
    ("test:callable", "{{ range is callable }} {{ s.upper is callable }} {{ s is callable }}"),
    ("test:defined test:undefined test:none", "{{ missing is defined }} {{ missing is undefined }} {{ nothing is none }} {{ n is defined }}"),
    ("test:divisibleby test:even test:odd", "{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ n is even }} {{ n is odd }}"),
    ("test:eq test:equalto test:== test:ne test:!=", "{{ n is eq 7 }} {{ n is equalto 8 }} {{ n is ne 7 }} {{ nums|select('==', 1)|list }} {{ nums|select('!=', 1)|list }}"),
    ("test:lt test:lessthan test:< test:le test:<= test:gt test:greaterthan test:> test:ge test:>=",
     "{{ 1 is lt 2 }}{{ 1 is lessthan 1 }}{{ 2 is le 2 }}{{ 3 is gt 2 }}{{ 3 is greaterthan 3 }}{{ 3 is ge 3 }} {{ nums|select('<', 3)|list }}{{ nums|select('<=', 3)|list }}{{ nums|select('>', 5)|list }}{{ nums|select('>=', 5)|list }}"),
    ("test:escaped", "{{ 'x' is escaped }} {{ 'x'|e is escaped }} {{ 'x'|safe is escaped }} {{ 'x'|forceescape is escaped }}"),
    ("test:filter test:test", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ 'nope' is test }} {{ 'dictsort' is filter }}"),
    ("test:float test:integer test:number", "{{ f is float }} {{ n is float }} {{ n is integer }} {{ yes is integer }} {{ f is number }} {{ s is number }}"),
    ("test:in", "{{ 1 is in nums }} {{ 'él' is in s }} {{ 'a' is in d }}"),
    ("test:iterable test:sequence test:mapping test:string", "{{ nums is iterable }} {{ n is iterable }} {{ d is sequence }} {{ d is mapping }} {{ s is string }} {{ nums is mapping }}"),
    ("test:lower test:upper", "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ 1 is upper }}"),
    ("test:sameas", "{{ nothing is sameas none }} {{ yes is sameas true }} {{ 1 is sameas true }}"),
    # ---- globals
    ("global:range", "{{ range(5)|list }} {{ range(2, 9, 3)|list }} {{ range(5, 0, -2)|list }}"),
    ("global:dict global:namespace", "{{ dict(a=1, b=2) }} {% set ns = namespace(x=0) %}{% for i in nums %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"),
    ("global:cycler", "{% set c = cycler('odd', 'even') %}{% for i in range(3) %}{{ c.next() }} {% endfor %}{{ c.current }} {{ c.reset() }}{{ c.next() }}"),
    ("global:joiner", "{% set pipe = joiner(' | ') %}{% for i in range(3) %}{{ pipe() }}{{ i }}{% endfor %} {% set comma = joiner() %}{{ comma() }}a{{ comma() }}b"),
    ("global:lipsum", "{{ lipsum(2, false, 5, 6)|wordcount }} {{ lipsum(3, true, 5, 6).count('<p>') }} {{ lipsum(1, false, 5, 6).endswith('.') }} {{ lipsum(2, false, 30, 31).split('\\n\\n')|length }} {{ lipsum(1, false, 9, 10)[0] is upper }}"),
    ("global:strftime_now", "{{ strftime_now('%Y-%m')|length }} {{ strftime_now('%%') }}"),
    ("global:raise_exception", "{{ raise_exception('stop here') }}"),
    # ---- statements
    ("statement:raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}|{% raw -%}   trimmed {{ x }}   {%- endraw %}|"),
    ("statement:raw", "{% raw %}never closed"),
    ("statement:raw", "a\n  {% raw %}\n  {{ x }}\n  {% endraw %}\nb"),
    ("statement:for-recursive", "{% for item in tree recursive %}[{{ item.name }}@{{ loop.depth }}/{{ loop.depth0 }}{% if item.children %}:{{ loop(item.children) }}{% endif %}]{% endfor %}"),
    ("statement:for-recursive", "<ul>{% for item in tree recursive %}<li>{{ loop.index }}.{{ item.name }}{% if item.children %}<ul>{{ loop(item.children) }}</ul>{% endif %}</li>{% endfor %}</ul>"),
    ("statement:for", "{% for u in users %}{% if loop.changed(u.city) %}{{ u.city }}:{% endif %}{{ u.name }} {% endfor %}"),
    ("statement:for", "{% for a, b in [(1, 2), (3, 4)] if a > 1 %}{{ a }}{{ b }}{{ loop.length }}{% else %}none{% endfor %}"),
    ("statement:block", "{% block greeting %}Hi {{ n }}{% endblock %}|{% for i in range(2) %}{% block inner scoped %}<{{ i }}>{% endblock %}{% endfor %}|{{ self.greeting() }}"),
    ("statement:macro", "{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }} {{ m(1, 3, 4, 5) }} {{ m(1, c=9) }} {{ m.name }} {{ m.arguments }}"),
    ("statement:macro", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
    ("statement:macro", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}"),
    ("statement:call", "{% macro list_users(users) %}{% for u in users %}<{{ caller(u) }}>{% endfor %}{% endmacro %}{% call(u) list_users(users) %}{{ u.name }}{% endcall %}"),
    ("statement:filter", "{% filter center(9) %}mid{% endfilter %}|{% filter replace('a', 'o')|upper %}banana{% endfilter %}"),
    ("statement:set", "{% set a, b = 1, 2 %}{% set c %}x{{ a }}{% endset %}{% set d2 | upper %}y{{ b }}{% endset %}{{ a }}{{ b }}{{ c }}{{ d2 }}"),
    ("statement:with", "{% with x = 1, y = n %}{{ x + y }}{% endwith %}{% with %}{% set z = 3 %}{{ z }}{% endwith %}{{ z is defined }}"),
    ("statement:if", "{% if n > 10 %}big{% elif n > 5 %}mid{% else %}small{% endif %}"),
    ("statement:autoescape", "{% autoescape true %}{{ '<b>' }} {{ '<i>'|safe }}{% endautoescape %} {{ '<u>' }}"),
    ("statement:break statement:continue", "{% for i in nums %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 9 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
    # ---- corners of the above
    ('global:range statement:block statement:for', "{% for i in range(2) %}{% block b %}[{{ i }}]{% endblock %}{% endfor %}"),
    ('statement:block statement:set', "{% set top = 5 %}{% block b %}{{ top }}{% endblock %}"),
    ('statement:macro', "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}"),
    ('filter:dictsort filter:length statement:macro', "{% macro m() %}{{ varargs|length }}:{{ kwargs|dictsort }}{% endmacro %}{{ m(1, 2, z=3, a=1) }}"),
    ('statement:call statement:macro', "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(a, b) m() %}{{ a + b }}{% endcall %}"),
    ('statement:for', "{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }}{% endfor %}"),
    ('statement:for', "{% for a, b in [(1, 2), (1, 3), (1, 3)] %}{{ loop.changed(a, b) }}{% endfor %}"),
    ('statement:for statement:if', "{% for item in tree recursive %}{{ loop.depth }}{{ loop.index }}{{ loop.first }}{% if item.children %}({{ loop(item.children) }}){% endif %}{% endfor %}"),
    ('filter:upper statement:for statement:if', "{% for item in tree recursive %}{% if item.children %}{{ loop(item.children)|upper }}{% else %}{{ item.name }}{% endif %};{% endfor %}"),
    ('global:cycler statement:set', "{% set c = cycler(1, 2) %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}"),
    ('filter:groupby filter:list filter:map', "{{ users|groupby('tags.0', default='none')|map(attribute='grouper')|list }}"),
    ('filter:groupby filter:length filter:list', "{{ users|groupby('city')|list|length }} {{ (users|groupby('city'))[0] }}"),
    ('filter:dictsort', "{{ users|dictsort }}"),
    ('filter:dictsort', "{{ d|dictsort(by='x') }}"),
    ('filter:sort', "{{ [3, 'a']|sort }}"),
    ('filter:batch filter:list', "{{ 'abc'|batch(2)|list }} {{ []|batch(3)|list }}"),
    ('filter:truncate', "{{ 'hello world foo'|truncate(11) }}|{{ 'hello world foo'|truncate(11, leeway=5) }}|{{ 'hello world foo'|truncate(12, leeway=0) }}"),
    ('filter:format', "{{ '%-5s|%5s|%.1f|%5.1f%%'|format('ab', 'cd', 2.25, 99.95) }}"),
    ('filter:format', "{{ '%(x)s %(x)r'|format(x='q') }}"),
    ('expression', "{{ 'a %s b' % 'x' }} {{ '%d-%d' % (1, 2) }} {{ '%(a)s' % {'a': 5} }} {{ '%s' % [1, 2] }}"),
    ('filter:filesizeformat', "{{ 12345678|filesizeformat }} {{ -5|filesizeformat }} {{ '3000'|filesizeformat }}"),
    ('filter:wordwrap', "{{ 'Hello World'|wordwrap(5, false) }}|{{ 'aaa bbb ccc'|wordwrap(3) }}|{{ 'a  b'|wordwrap(1) }}"),
    ('filter:xmlattr', "{{ {'a': 1}|xmlattr(autospace=false) }}|{{ {}|xmlattr }}|{{ {'a b': 1}|xmlattr }}"),
    ('filter:urlencode', "{{ 'é ü/?#[]@!$&\\'()*+,;='|urlencode }}|{{ {'k': ['a', 'b']}|urlencode }}"),
    ('filter:urlize', "{{ 'www.example.com'|urlize }}|{{ 'example.com'|urlize }}|{{ 'example.org'|urlize }}|{{ 'ftp://x.y'|urlize(extra_schemes=['ftp://']) }}"),
    ('filter:list filter:map filter:slice global:range', "{{ [1, 2, 3]|slice(2, 'x')|list }} {{ range(7)|slice(3)|map('join', ',')|list }}"),
    ('filter:attr global:namespace', "{{ [2, 1]|attr('count')(1) }} {{ 'x'|attr('__class__') }} {{ namespace(a=1)|attr('a') }}"),
    ('filter:center', "{{ 'a'|center(-1) }}|{{ '中文'|center(6) }}"),
    ('filter:pprint', "{{ ' a '|pprint }} {{ none|pprint }} {{ 1e20|pprint }} {{ (1,)|pprint }} {{ {}|pprint }}"),
    ('filter:e filter:join', "{{ [1, 2, 3]|join(', ')|e }}"),
    ('expression', "{{ 'x' is filter }} {{ none is test }}"),
    ('filter:striptags', "{{ 'HELLO'|striptags }}|{{ '<a href=\"x\">y</a>   <br/>z'|striptags }}|{{ 'a < b'|striptags }}"),
    ('filter:wordcount global:lipsum', "{{ lipsum(1, false, 3, 4)|wordcount }}"),
    ('statement:raw', "{% raw %}a{% endraw %}{% raw %}{% raw %}{% endraw %}"),
    ('statement:raw', "  {% raw -%}  x  {%- endraw %}  |"),
    ('filter:sum', "{{ [1, 2, 3]|sum(attribute=0) }}"),
    ('filter:map filter:sum', "{{ users|map(attribute='tags')|map('length')|sum }}"),
    ('filter:join filter:map filter:selectattr', "{{ users|selectattr('tags')|map(attribute='name')|join }}"),
    ('filter:list filter:map filter:sort', "{{ users|sort(attribute='city', case_sensitive=true)|map(attribute='name')|list }} {{ users|sort(attribute='city')|map(attribute='name')|list }}"),
    ('filter:list filter:map filter:max filter:unique', "{{ users|unique(attribute='city', case_sensitive=true)|map(attribute='name')|list }} {{ ['b', 'B', 'a']|max }} {{ ['b', 'B', 'a']|max(case_sensitive=true) }}"),
    ('statement:macro', "{% macro m(x) %}{{ x }}{% endmacro %}{{ m.catch_varargs }} {{ m.catch_kwargs }} {{ m is callable }} {{ m is mapping }}"),
    ('filter:title global:joiner', "{{ joiner()() }}|{{ 'a b'|title }}|{{ 'ǆ'|title }}"),
    ('filter:e statement:autoescape', "{% autoescape false %}{{ '<'|e }}{% endautoescape %}{% autoescape n > 1 %}{{ '<' }}{% endautoescape %}"),
    ('filter:replace filter:reverse filter:safe', "{{ 'abc' | replace('', '-') }} {{ 'ab'|reverse }} {{ ('<a'|safe)|reverse }}"),
    ('filter:round', "{{ 3|round(-1) }} {{ 35.5|round(-1) }} {{ 2.5|round(0, 'floor') }} {{ 1.23456|round(3, 'ceil') }}"),
    ('filter:int', "{{ 'a'|int }} {{ ' 12 '|int }} {{ '-0x10'|int(0, 16) }} {{ '1e3'|int }} {{ '010'|int(0, 0) }} {{ '12'|int(base=8) }} {{ true|int }} {{ none|int }}"),
    ('filter:float', "{{ '1.5e3'|float }} {{ 'inf'|float }} {{ ' 2 '|float }} {{ '1_0.5'|float }}"),
    # ---- str.format (the sandbox's formatter) and the other str / list / dict methods
    ("method:format", "{{ '{} and {}'.format(1, 'a') }}|{{ '{0}{1}{0}'.format('x', 2) }}|{{ '{name}={v!r}'.format(name='k', v='s') }}|{{ '{:>6}|{:<4}|{:^7}|{:*^9}'.format('ab', 1, 'mid', 'c') }}"),
    ("method:format", "{{ '{:.2f} {:e} {:g} {:%} {:,} {:_} {:08.3f} {:+d} {:x} {:#x} {:b} {:o} {:c} {:#b} {:_x} {:,.2f}'.format(3.14159, 1234.5, 0.00001, 0.25, 1234567, 1234567, -3.14159, 5, 255, 255, 5, 8, 65, 5, 65535, 1234567.891) }}"),
    ("method:format", "{{ '{0[a]} {0[b][1]} {1.x} {2[0]}'.format({'a': 1, 'b': [5, 6]}, namespace(x=3), 'xyz') }}|{{ '{{}} {}'.format(1) }}|{{ '{:{w}}|'.format('a', w=4) }}|{{ '{0.__class__}'.format(1) }}"),
    ("method:format", "{{ '{} {}'.format(2.5, 1e20) }} {{ '{:.3}'.format(2.0) }} {{ '{:10.2}|'.format(1234.5) }} {{ '{!s:>5}'.format(none) }} {{ '{}'.format(1, 2) }} {{ '{:.3}'.format(123.0) }} {{ '{:.1%}'.format(0.1234) }} {{ '{:=+8.2f}'.format(3.5) }} {{ '{:.3s}'.format('abcdef') }} {{ '{}'.format([1, 'a']) }} {{ '{:05}'.format(-42) }} {{ '{:G}'.format(1e-10) }}"),
    ("method:format", "{{ '{} {}'.format(1) }}"),
    ("method:format", "{{ '{:d}'.format('x') }}"),
    ("method:format", "{{ '{0} {}'.format(1, 2) }}"),
    ("method:format_map", "{{ '{x}-{y}'.format_map({'x': 1, 'y': 'z'}) }}"),
    ("method:format markup", "{{ ('<b>{}</b>'|safe).format('<i>') }} {{ ('{}'|safe).format('x'|safe) }}"),
    ("method:str", "{{ 'ab'.ljust(5, '.') }}|{{ 'ab'.rjust(5) }}|{{ '-42'.zfill(6) }}|{{ '7'.zfill(3) }}|{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}|{{ 'abc'.partition('x') }}|{{ 'Hello ÉTÉ'.swapcase() }}|{{ 'prefix-body'.removeprefix('prefix-') }}|{{ 'body.txt'.removesuffix('.txt') }}"),
    ("method:str", "{{ 'ABC'.isupper() }} {{ 'AbC'.isupper() }} {{ '1A'.isupper() }} {{ '12'.isupper() }} {{ 'abc'.islower() }} {{ '١٢'.isdecimal() }} {{ 'x1'.isdecimal() }}"),
    ("method:str", "[{{ 'ab'.center(7) }}] [{{ 'ab'.center(6, '*') }}] [{{ 'a\\tbc\\td'.expandtabs() }}] [{{ 'a\\tb'.expandtabs(4) }}] {{ 'abc'.isascii() }} {{ 'é'.isascii() }} {{ '½3'.isnumeric() }} {{ 'Hello World'.istitle() }} {{ 'Hello world'.istitle() }}"),
    ("method:str markup", "{{ ('<'|safe).center(3, '&') }}"),
    ("method:str markup", "{{ ('a<b'|safe).partition('<') }} {{ ('a<b'|safe).split('<') }} {{ ('<x'|safe).removeprefix('<') }} {{ ('x'|safe).ljust(3, '-') }}"),
    ("method:str", "{{ 'Straße ÉTÉ x'.casefold() }}"),
    ("method:list method:dict", "{% set l = nums.copy() %}{{ l }} {{ l is sameas nums }} {% set c = d.copy() %}{{ c }} {{ (1, 2).count(2) }} {{ (1, 2).index(2) }}"),
    ("expression", "{{ 1e999 }} {{ -1e999 }} {{ 1e-999 }} {{ users|map(attribute='99999999999999999999')|list }}"),
    ("filter:striptags", "{{ '&ampx &notin; &NotEqualTilde; &#x80; &#0; &#xD800; &#1;x &#128512; &#99999999999; &foo; &amp &lt3 &#; &#x; &AMP; &copy &copyx &Aacute &frac12; & &;'|striptags }}"),
    ("method:format", "{{ '{99999999999999999999999}'.format(1) }}"),
    ("method:format", "{{ '{:99999999999999999999}'.format(1) }}"),
    ("filter:format", "{{ '%99999999999999999999d'|format(1) }}"),
    ("filter:round", "{{ 2.675|round(2) }} {{ 0.125|round(2) }} {{ 0.375|round(2) }} {{ 1.0005|round(3) }} {{ -0.5|round }} {{ 1.5|round }} {{ 1e300|round(2) }} {{ 123.456|round(-1) }} {{ 0.1|round(20) }} {{ 5e-324|round(400) }}"),
    ("filter:format", "[{{ '%*d|%-*s|%.*f|%*s'|format(5, 42, 4, 'ab', 2, 3.14159, -4, 'x') }}] [{{ '%#o %#o %#x %#X %#6o|%-#6o|'|format(8, -8, 255, 255, 8, 8) }}]"),
    ("statement:autoescape filter:join statement:macro", "{% macro m(x) %}<{{ x }}>{% endmacro %}{% autoescape true %}{{ ['<', 'x'|safe]|join('&') }} {{ ['<', '>']|join('&') }} {{ (['a', 'b']|join(sep))|e }} {{ m('&') }} {{ m('&') ~ '<' }}{% endautoescape %} {{ m('&') }}"),
    # ---- more corners
    ('filter:unique', "{{ [{'a': 1}, {'a': 1}]|unique|list }}"),
    ('filter:batch', '{{ [1, 2, 3]|batch(0)|list }} {{ [1, 2, 3]|batch(-1, 0)|list }} {{ [1, 2, 3]|batch(2, 0)|list }}'),
    ('test:even test:odd', '{{ 2.0 is even }} {{ 3.0 is odd }} {{ 2.5 is even }} {{ true is odd }} {{ -3 is odd }} {{ -3.0 is odd }} {{ -4 is even }}'),
    ('filter:sum', "{{ ['a', 'b']|sum }}"),
    ('filter:min filter:max', "[{{ []|min }}] [{{ []|max }}] {{ {'b': 1, 'a': 2}|min }} {{ 'hello'|max }}"),
    ('filter:wordcount', "{{ 'héllo wörld 42 x_y ٣'|wordcount }}"),
    ('filter:join', "{{ [[1, 2], (3,)]|join('|') }} {{ {'a': 1, 'b': 2}|join(',') }}"),
    ('filter:truncate', "{{ 'abcdefghij klmnopq'|truncate(10) }}|{{ 'abcdefghij klmnopq'|truncate(10, true, '', 0) }}"),
    ('filter:dictsort', "{{ {'b': 1, 'a': 'x'}|dictsort(by='value') }}"),
    ('filter:first filter:last', "[{{ []|first }}] [{{ []|last }}] {{ {'k': 1}|first }}"),
    ('filter:sort', "{{ [1, 'a']|sort }}"),
    ('filter:abs', '{{ true|abs }} {{ -0.0|abs }}'),
    ('filter:random', "{{ {'k': 1}|random }}"),
    ('filter:int', "{{ '  -7  '|int }} {{ '+3'|int }} {{ '3.99'|int }} {{ '-3.99'|int }} {{ 'nan'|int(5) }} {{ '1e400'|int(6) }}"),
    ('filter:list', '{{ 5|list }}'),
    ('filter:reverse', '{{ 5|reverse }}'),
    ('filter:length', '{{ 5|length }}'),
    ('test:sequence test:iterable', "{{ none is sequence }} {{ 'x' is iterable }} {{ (1,) is sequence }}"),
    ('filter:items', '{{ [1]|items|list }}'),
    ('filter:string', "{{ 1.0|string }} {{ (1,)|string }} {{ {'a': none}|string }}"),
    ("filter:upper filter:lower filter:title filter:capitalize", "{{ 'straße ﬁx ŉ'|upper }} {{ 'İSTANBUL ΑΣ ΑΣΑ Σ ΌΣΟΣ.'|lower }} {{ 'ßa ﬁx 中a x中'|title }} {{ 'ßa'|capitalize }} {{ 'ΑΣ'.lower() }} {{ 'ßa ﬁx 中a x中'.title() }} {{ 'ǅ'.upper() }}"),
    # ---- what jinja2 (and transformers' sandbox) refuse, refused here too
    ("refused:include", "{% include 'other.jinja' %}"),
    ("refused:import", "{% import 'macros.jinja' as m %}{{ m.x() }}"),
    ("refused:from", "{% from 'macros.jinja' import x %}{{ x() }}"),
    ("refused:extends", "{% extends 'base.jinja' %}"),
    ("refused:do", "{% do nums.append(1) %}"),
    ("refused:trans", "{% trans %}hello{% endtrans %}"),
    ("refused:sandbox", "{{ nums.append(1) }}"),
    ("refused:sandbox", "{{ d.update({'x': 1}) }}"),
    ("refused:sandbox", "{{ s.__class__ }}"),
    ("refused:sandbox", "{{ range(100001)|length }}"),
    ("refused:unknown-filter", "{{ s|frobnicate }}"),
]


def main():
    context = json.loads(CONTEXT)
    cases = []
    for covers, template in CASES:
        entry = {"covers": covers, "template": template, "context": CONTEXT}
        try:
            entry["output"] = _compile_jinja_template(template).render(**context)
        except Exception as error:  # jinja2 refuses: the C++ interpreter must too
            entry["error"] = type(error).__name__ + ": " + str(error)
        cases.append(entry)
    fixture = {
        "source": "jinja2 " + jinja2.__version__ + " via transformers' chat-template environment",
        "filters": sorted(jinja2.filters.FILTERS),
        "tests": sorted(jinja2.tests.TESTS),
        "globals": sorted(jinja2.defaults.DEFAULT_NAMESPACE) + ["raise_exception", "strftime_now"],
    }
    out_path = os.path.join(ROOT, "tests", "fixtures", "data", "jinja_builtin_cases.json")
    with open(out_path, "w", encoding="utf-8") as out:
        out.write("{" + ", ".join(json.dumps(k) + ": " + json.dumps(v, ensure_ascii=False)
                                  for k, v in fixture.items()) + ', "cases": [\n')
        out.write(",\n".join(json.dumps(case, ensure_ascii=False) for case in cases))
        out.write("\n]}\n")
    print(f"wrote {len(cases)} cases ({sum('error' in c for c in cases)} errors) to {out_path}")


if __name__ == "__main__":
    main()
