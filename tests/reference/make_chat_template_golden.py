#!/usr/bin/env python3
"""Renders chat templates with the jinja2 package, as Hugging Face transformers runs them, into
tests/data/tokenizer/chat_template_golden.tsv, which tests/tokenizer/chat_template_test.cpp
compares with tinfer's Jinja interpreter (include/tinfer/jinja/jinja.hpp) byte for byte.

    python3 tests/reference/make_chat_template_golden.py          # rewrite the golden file
    python3 tests/reference/make_chat_template_golden.py --check  # CTest: is it current?

The templates are the model files' own (tests/data/tokenizer/chat_templates/: SmolLM2-135M-
Instruct's as its GGUF stores it, Gemma 3's from google/gemma-3-*-it, Llama 3.2's and Qwen2.5's
instruct tokenizer_config.json chat_template fields), rendered over a set of conversations,
plus small templates that exercise one construct each (FEATURES below).

The environment is transformers' apply_chat_template: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loop-control extension; globals raise_exception and
strftime_now (here at a fixed time, FIXED_NOW, which the C++ test gives tinfer's clock); its
tojson (json.dumps with ensure_ascii=False, keys in insertion order).

Line format (all fields hex of UTF-8 except the first two):
    name  add_generation_prompt  bos  eos  role:content,role:content...  rendered | !error
A rendered field starting with "!" is the message of an exception the template raised.
"""
import datetime
import json
import sys
from pathlib import Path

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja2 is missing (Debian: python3-jinja2; scripts/setup.sh installs it)")
    sys.exit(77)

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "data" / "tokenizer" / "chat_templates"
GOLDEN = ROOT / "data" / "tokenizer" / "chat_template_golden.tsv"
FIXED_NOW = 1764547200  # 2025-12-01 00:00:00 UTC

# (template file, bos_token, eos_token): the texts tinfer gives each (chat_template.hpp: BOS is
# empty where the tokenizer adds it).
MODEL_TEMPLATES = [
    ("smollm2", "<|im_start|>", "<|im_end|>"),
    ("gemma3", "", "<eos>"),
    ("llama3.2", "", "<|eot_id|>"),
    ("qwen2.5", "", "<|im_end|>"),
]


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(FIXED_NOW, datetime.timezone.utc).strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def conversations():
    system = {"role": "system", "content": "You are a pirate."}
    user = {"role": "user", "content": "What is PagedAttention?"}
    assistant = {"role": "assistant", "content": "A way to store the KV cache in blocks."}
    again = {"role": "user", "content": "And why?"}
    return [
        [user], [system, user], [user, assistant, again], [system, user, assistant],
        [system, user, assistant, again], [system],
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": "  padded \n\t"}],
        [{"role": "system", "content": " spaced system \n"}, {"role": "user", "content": "x"}],
        [{"role": "user", "content": "multi\nline\n\ncontent  with  spaces 日本 😀"}],
        [{"role": "user", "content": "\u3000\u00a0ideographic and no-break spaces\u2003\u0085"}],
        [{"role": "user", "content": "{{ not a template }} {% if %} <|im_end|> <end_of_turn>"}],
        [{"role": "user", "content": "quotes ' \" \\ and a tab\t"}],
        [user, assistant, again, assistant, {"role": "user", "content": "Third."}],
        [user, assistant],
        [system, {"role": "system", "content": "A second system message."}, user],
        [user, user],  # Gemma's template refuses roles that do not alternate
        [{"role": "tool", "content": "42"}, user],
    ]


# One construct each; rendered with the same globals as the chat templates.
FEATURES = [
    "{{ messages | length }} {{ messages[0].role | upper }} {{ 'MiXeD' | lower }}",
    "{% for m in messages %}{{ loop.index0 }}/{{ loop.index }}/{{ loop.length }}"
    "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}"
    "{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
    "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}"
    ">{{ loop.nextitem.role if loop.nextitem is defined else '-' }} {% endfor %}",
    "{% set ns = namespace(count=0, text='') %}{% for m in messages %}"
    "{% set ns.count = ns.count + 1 %}{% set ns.text = ns.text ~ m.role[0] %}{% endfor %}"
    "{{ ns.count }}:{{ ns.text }}",
    "{% set x = 1 %}{% for m in messages %}{% set x = x + 10 %}{{ x }}{% endfor %}|{{ x }}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }} {% else %}none"
    "{% endfor %}",
    "{% for m in [] %}x{% else %}empty{% endfor %}",
    "{% for m in messages %}{% if loop.index0 == 1 %}{% break %}{% endif %}{{ m.role }}"
    "{% endfor %}",
    "{% for m in messages %}{% if m.role == 'user' %}{% continue %}{% endif %}{{ m.role }},"
    "{% endfor %}",
    "{% for k, v in {'a': 1, 'b': [1, 2], 'c': none}.items() %}{{ k }}={{ v }};{% endfor %}",
    "{{ messages[1:] | length }} {{ messages[-1].role }} {{ messages[:1][0].content[:5] }}"
    " {{ 'abcdef'[::2] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }} {{ [1,2,3][1:] }}",
    "{{ '日本語😀x'[1:3] }} {{ '日本語' | length }} {{ '日本語'[-1] }}",
    "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}"
    " {{ 7 / 2 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 10 / 5 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ [1, 'x'] ~ {'k': 'v'} }} {{ 'a' + 'b' }} {{ [1] + [2] }}",
    "{{ 'ab' * 3 }} {{ 1 < 2 }} {{ 'a' < 'b' }} {{ 2 >= 2.0 }} {{ 1 == 1.0 }} {{ 'x' != 'x' }}",
    "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'role' in messages[0] }}"
    " {{ 'nope' not in messages[0] }} {{ 'x' in undefined_thing }}",
    "{{ x is defined }} {{ messages is defined }} {{ none is none }} {{ 1 is not none }}"
    " {{ 'a' is string }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }}"
    " {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }} {{ true is boolean }}"
    " {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 'a' is eq 'a' }}"
    " {{ false is false }} {{ true is true }} {{ 1 is true }} {{ x is undefined }}",
    "{{ undefined_thing }}|{{ undefined_thing | default('fallback') }}|"
    "{{ '' | default('empty', true) }}|{{ '' | d('kept') }}|{{ none | default('x') }}",
    "{{ '  both  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ ' a '.strip() }}|{{ ' a '.lstrip() }}|"
    "{{ ' a '.rstrip() }}|{{ 'Hello'.upper() }}|{{ 'hello world'.title() }}|"
    "{{ 'hello'.capitalize() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}",
    "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith('bc') }} {{ 'aaa'.replace('a', 'b', 2) }}"
    " {{ 'hello' | replace('l', 'L') }}",
    "{{ {'name': 'f', 'args': {'x': 1, 'y': [true, none, 1.5, 'é\"\\\\\n']}} | tojson }}",
    "{{ {'a': [1, {'b': 2}], 'c': {}} | tojson(indent=4) }}|{{ [] | tojson(indent=2) }}",
    "{{ 'x' | string }}{{ 12 | string }} {{ [3, 1, 2] | join('-') }} {{ [1, 2] | first }}"
    " {{ [1, 2] | last }} {{ 'abc' | list }} {{ [1, 2, 1] | unique | list }}"
    " {{ 'abc' | reverse }} {{ -3 | abs }} {{ '42' | int + 1 }} {{ '1.5' | float }}",
    "{{ messages | map(attribute='role') | join(',') }} "
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} "
    "{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | join(',') }} "
    "{{ [1, 2, 3, 4] | select('even') | list }} {{ ['a', 'b'] | reject('equalto', 'a') | list }}",
    "{{ messages.get('x') if messages is mapping else {'k': 1}.get('k') }} "
    "{{ {'k': 1}.get('z', 'dflt') }} {{ {'k': 1}.keys() | list }} {{ {'k': 1}.values() | list }}",
    "{% if messages[0].role == 'system' %}sys{% elif messages[0].role == 'user' %}user"
    "{% else %}other{% endif %} {{ 'yes' if add_generation_prompt else 'no' }}"
    " {{ 'a' if false }}|",
    "{{ (1 + 2) * 3 }} {{ true and 'x' }} {{ false or 0 or 'z' }} {{ not 0 }}"
    " {{ (messages | length) - 1 }} {{ not messages[0].role == 'user' }}",
    "{% set block %}captured {{ messages | length }}{% endset %}[{{ block }}]",
    "{# a comment #}a {#- stripped -#} b\n  {# lstrip #}\n  {%- if true %}\n    c\n  {% endif %}\n"
    "  {{ 'd' }}\n{% if true +%}\n  e\n  {%+ endif %}  f",
    "{{- bos_token -}}\n\n   {{ eos_token }}   \n{%- for m in messages %}\n  [{{ m.role }}]\n"
    "{%- endfor %}\n",
    "{{ \"esc: \\n\\t\\\\ \\' \\\" \\x41 \\u00e9 \\U0001F600 \\101 \\q\" }} {{ 'adj' 'acent' }}",
    "{{ strftime_now('%Y-%m-%d %d %b %Y %B %A') }}",
    "{% if messages | length > 1 %}{{ raise_exception('too many: ' ~ messages | length) }}"
    "{% endif %}ok",
    "{{ messages[0]['content'] | trim | length }} {{ messages[0].content.strip()[:3] }}",
    "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | join(',') }}",
    "{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{% endfor %}"
    "{{ loop.index }};{% endfor %}",
    "{{ none }} {{ true }} {{ False }} {{ [none, true, 'x', 1.0] }} {{ {'a': none} }}",
    "  {% if true %}\n    lstripped\n  {% endif %}\n{%- if true -%}  stripped  {%- endif -%}\n end",
]


def render(env, source, messages, add_generation_prompt, bos, eos):
    try:
        return env.from_string(source).render(
            messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos,
            eos_token=eos)
    except TemplateError as e:
        return "!" + str(e)


def hex_of(text):
    return text.encode().hex()


def lines():
    env = environment()
    out = []
    for name, bos, eos in MODEL_TEMPLATES:
        source = (TEMPLATES / f"{name}.jinja").read_text()
        for messages in conversations():
            for add_generation_prompt in (True, False):
                rendered = render(env, source, messages, add_generation_prompt, bos, eos)
                enc = ",".join(hex_of(m["role"]) + ":" + hex_of(m["content"]) for m in messages)
                out.append("\t".join([name, str(int(add_generation_prompt)), hex_of(bos),
                                      hex_of(eos), enc, hex_of(rendered)]))
    feature_messages = [conversations()[4], conversations()[0], conversations()[9]]
    for index, source in enumerate(FEATURES):
        for messages in feature_messages:
            rendered = render(env, source, messages, True, "<s>", "</s>")
            enc = ",".join(hex_of(m["role"]) + ":" + hex_of(m["content"]) for m in messages)
            out.append("\t".join(["feature:" + hex_of(source), "1", hex_of("<s>"), hex_of("</s>"),
                                  enc, hex_of(rendered)]))
    return out


def main():
    text = "\n".join(lines()) + "\n"
    if "--check" in sys.argv:
        if GOLDEN.read_text() != text:
            print(f"{GOLDEN} is stale: jinja2 {jinja2.__version__} renders differently; rerun "
                  "tests/reference/make_chat_template_golden.py")
            return 1
        print(f"{GOLDEN.name} matches jinja2 {jinja2.__version__}'s renders")
        return 0
    GOLDEN.write_text(text)
    print(f"wrote {GOLDEN} ({text.count(chr(10))} renders, jinja2 {jinja2.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
