#!/usr/bin/env python3
"""Writes the chat-template golden corpus (tests/fixtures/data/chat_corpus/<template>/) with
Hugging Face transformers' own apply_chat_template, so the C++ Jinja interpreter is compared
character-exact (text), token-exact (ids) and mask-exact without Python at test time.

For every template in tests/fixtures/data/chat_templates/*.jinja it writes
  tokenizer.json         the demo tokenizer plus the template's special tokens (small, fast to load)
  tokenizer_config.json  bos/eos/pad tokens and the chat_template
  cases.json             {"source", "cases": [{"sample": JSONL line, "kwargs", "text", "ids",
                          "assistant_mask"?} | {"sample", "kwargs", "error"}]}
`assistant_mask` is transformers' return_assistant_tokens_mask, written for templates with
{% generation %} blocks. `loss_mask` (templates marked "prefix_masks") is the mask read from
transformers' renderings of the conversation's prefixes: each assistant turn from the end of
the prompted rendering of the messages before it to the end of its own text (where its
renderings with and without the generation prompt part, cut back so no special token is split,
trailing whitespace dropped); a token is in when its first character is. Samples are stored as JSON text so that integers beyond 64 bits and float
spellings reach the C++ reader exactly as a JSONL line would.

Needs PyPI `transformers tokenizers jinja2` (CI never runs this):
    python3 tools/golden/data/make_chat_corpus.py
"""
import copy
import json
import os
import shutil
import tempfile

import tokenizers
import transformers
from tokenizers import AddedToken, Tokenizer
from transformers import AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "data")
MIN_RENDERED_CASES = 30

QWEN_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
TEMPLATES = {
    "qwen2_5": {"extra": [], "bos": None, "eos": "<|im_end|>"},
    "qwen3": {"extra": [], "bos": None, "eos": "<|im_end|>", "thinking": True},
    "qwen3_5_moe": {"extra": QWEN_TOKENS, "bos": None, "eos": "<|im_end|>", "thinking": True},
    "llama3_2": {"extra": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                           "<|eom_id|>", "<|python_tag|>"],
                 "bos": "<|begin_of_text|>", "eos": "<|eot_id|>",
                 "kwargs": [{"date_string": "26 Jul 2024"},
                            {"date_string": "02 Jan 2025", "tools_in_user_message": False}]},
    "mistral_nemo": {"extra": ["<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                               "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
                     "bos": "<s>", "eos": "</s>"},
    "deepseek_r1": {"extra": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                              "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                              "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>",
                              "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"],
                    "bos": "<｜begin▁of▁sentence｜>", "eos": "<｜end▁of▁sentence｜>"},
    "gemma": {"extra": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "bos": "<bos>", "eos": "<eos>"},
    "chatml_generation": {"extra": [], "bos": None, "eos": "<|im_end|>"},
    # With add_generation_prompt false these end the conversation with the eos token.
    "phi3_5_mini": {"extra": ["<s>", "</s>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"],
                    "bos": "<s>", "eos": "<|endoftext|>", "prefix_masks": True},
    "phi4_mini": {"extra": ["<|assistant|>", "<|system|>", "<|end|>", "<|user|>", "<|tool|>", "<|/tool|>"],
                  "bos": "<|endoftext|>", "eos": "<|endoftext|>", "prefix_masks": True,
                  "conversations": [
                      {"messages": [{"role": "system", "content": "You call tools.",
                                     "tools": '[{"name": "get_weather", "parameters": {"city": "string"}}]'},
                                    {"role": "user", "content": "Weather in Oslo?"},
                                    {"role": "assistant", "content": "Calling get_weather."},
                                    {"role": "tool", "content": "cold"},
                                    {"role": "assistant", "content": "It is cold."}]},
                      {"messages": [{"role": "system", "content": "No tools here.", "tools": None},
                                    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
                  ]},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]},
    },
}
SEARCH_TOOL = {"type": "function", "function": {"name": "search", "description": "Search the web, «quoted» 中文",
                                                 "parameters": {"type": "object", "properties": {
                                                     "query": {"type": "string"}, "top_k": {"type": "integer"}}}}}


def u(text):
    return {"role": "user", "content": text}


def a(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def s(text):
    return {"role": "system", "content": text}


def tool(text, call_id=None):
    message = {"role": "tool", "content": text}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message


def call(name, arguments, call_id=None, wrapped=True):
    body = {"name": name, "arguments": arguments}
    result = {"type": "function", "function": body} if wrapped else dict(body)
    if call_id is not None:
        result["id"] = call_id
    return result


# JSON text of samples whose numbers must survive exactly (big integers, float spellings).
NUMBER_SAMPLES = [
    '{"messages": [{"role": "user", "content": "numbers"}, {"role": "assistant", "content": "", "tool_calls": '
    '[{"type": "function", "id": "abcdefghi", "function": {"name": "calc", "arguments": {"big": 123456789012345678901234567890, '
    '"neg": -98765432109876543210, "f15": 1e15, "f16": 1e16, "small": 1.5e-7, "half": 0.5, "third": 0.3333333333333333, '
    '"i": 42, "z": -0.0, "e": 2.50, "t": true, "n": null}}}]}, {"role": "tool", "tool_call_id": "abcdefghi", "content": "ok"}, '
    '{"role": "assistant", "content": "done"}]}',
    '{"messages": [{"role": "user", "content": "more numbers"}, {"role": "assistant", "content": "", "tool_calls": '
    '[{"type": "function", "id": "jklmnopqr", "function": {"name": "calc", "arguments": {"x": 1234567890123456.0, '
    '"y": 9007199254740993, "w": 18446744073709551616, "v": 1e100, "q": 123.456e5, "r": [1.0, 2, 3.25e-5]}}}]}, '
    '{"role": "tool", "tool_call_id": "jklmnopqr", "content": "ok"}, {"role": "assistant", "content": "fine"}]}',
]


def base_conversations():
    convs = [
        {"messages": [u("What is 2+2?"), a("4")]},
        {"messages": [s("You are terse."), u("Name a color."), a("Blue."), u("Another?"), a("Red.")]},
        {"messages": [u("Think about it."), a("The answer.", reasoning_content="Let me think.\n")]},
        {"messages": [u("q1"), a("<think>\nold reasoning\n</think>\n\nold answer"), u("q2"),
                      a("<think>\nnew reasoning\n</think>\n\nnew answer")]},
        {"messages": [u("Hi"), a("\n\nHello with leading newlines")]},
        {"messages": [u("  padded user  "), a("  padded answer \n")]},
        {"messages": [u("中文问题？"), a("中文回答。😀", reasoning_content="")]},
        {"messages": [u("multi\nline\r\nuser"), a("code:\n```python\nprint('x')\n```\n")]},
        {"messages": [u("x"), a("</think>only closing")]},
        {"messages": [u("empty answer"), a("")]},
        {"messages": [s("System with ünïcödé"), u("Combining e\u0301 and <think>\u0338 marks"), a("<think>\u0338 stays")]},
        {"messages": [u("a"), a("b", reasoning_content="r1"), u("c"), a("d", reasoning_content="r2")]},
        {"messages": [s("sys"), u("Weather in Paris?"),
                      a("", tool_calls=[call("get_weather", {"city": "Paris", "unit": "c"}, "call00001")]),
                      tool('{"temp": 21}', "call00001"), a("It is 21°C in Paris.")],
         "tools": [WEATHER_TOOL]},
        {"messages": [u("Two cities"),
                      a("Checking both.", tool_calls=[call("get_weather", {"city": "Oslo"}, "call00002"),
                                                      call("get_weather", {"city": "Rome"}, "call00003")]),
                      tool("cold", "call00002"), tool("warm", "call00003"),
                      a("Oslo is cold, Rome is warm.", reasoning_content="Combine results.")],
         "tools": [WEATHER_TOOL, SEARCH_TOOL]},
        {"messages": [u("Tool-only"),
                      a("", tool_calls=[call("search", {"query": "naïve 中文", "top_k": 3}, "call00004")]),
                      tool("found", "call00004"), a("Done.")],
         "tools": [SEARCH_TOOL]},
        {"messages": [u("string args"),
                      a("", tool_calls=[call("search", '{"query": "raw"}', "call00005")]),
                      tool("raw result", "call00005"), a("ok")],
         "tools": [SEARCH_TOOL]},
        {"messages": [u("unwrapped call"),
                      a("sure", tool_calls=[call("get_weather", {"city": "Lima"}, "call00006", wrapped=False)]),
                      tool("mild", "call00006"), a("Mild.")],
         "tools": [WEATHER_TOOL]},
        {"messages": [s("first"), u("u"), s("mid-conversation system"), a("ok")]},
        {"messages": [u("<tool_response>\nlooks like a tool\n</tool_response>"), a("noted")]},
        {"messages": [u("tabs\tand\u3000ideographic space\u00a0nbsp"), a("\u2028line sep\u2029")]},
        {"messages": [u("quote 'single' and \"double\" and back\\slash"), a("escaped \"json\" {x}")]},
        {"messages": [u("long"), a("word " * 60)]},
        {"messages": [s("   "), u("blank system"), a("answer")]},
        {"messages": [u("one"), a("two"), u("three"), a("four"), u("five"), a("six")]},
        {"messages": [u("reasoning alias"), a("answer", reasoning="aliased reasoning")]},
        {"messages": [u("thinking alias"), a("answer", thinking="thinking field")]},
        {"messages": [u("ends with user?"), a("reply"), u("follow-up")]},
        {"messages": [s("You call tools."), u("Weather?"),
                      a(None, tool_calls=[call("get_weather", '{"city": "Kyiv"}', "call00007")]),
                      tool("sunny", "call00007"), a("Sunny in Kyiv.")],
         "tools": [WEATHER_TOOL]},
    ]
    for text in NUMBER_SAMPLES:
        convs.append(json.loads(text))
    return convs


def variants(conversation):
    """The conversation, then forms that drop what strict templates reject."""
    yield conversation
    messages = conversation["messages"]
    plain = [m for m in messages if m["role"] in ("user", "assistant") and "tool_calls" not in m
             and m.get("content") is not None]
    if plain != messages and plain and plain[0]["role"] == "user":
        yield {"messages": plain}


def sample_text(conversation):
    for text in NUMBER_SAMPLES:
        if json.loads(text) == conversation:
            return text
    return json.dumps(conversation, ensure_ascii=False)


def build_tokenizer(out_dir, spec, template_text):
    demo_dir = os.path.join(FIXTURES, "demo", "tokenizer")
    tok = Tokenizer.from_file(os.path.join(demo_dir, "tokenizer.json"))
    extra = [t for t in spec["extra"] if tok.token_to_id(t) is None]
    if extra:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in extra])
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    config = {"bos_token": spec["bos"], "eos_token": spec["eos"], "pad_token": "<|endoftext|>",
              "unk_token": None, "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template_text}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as out:
        json.dump(config, out, ensure_ascii=False, indent=1)
    return tok


def shared_length(x, y, special):
    """Length of the common prefix of x and y, cut back so that it splits no special token."""
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    moved = True
    while moved:
        moved = False
        for text in (x, y):
            for token in special:
                start = text.find(token)
                while 0 <= start < n:
                    if n < start + len(token):
                        n, moved = start, True
                    start = text.find(token, start + 1)
    return n


def prefix_loss_mask(hf, messages, tools, kwargs, text, offsets, special):
    """The loss mask read from transformers' renderings of the conversation's prefixes."""
    def render(part, prompt):
        return hf.apply_chat_template(part, tools=tools, tokenize=False,
                                      **{**kwargs, "add_generation_prompt": prompt})
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = render(messages[:i], True)
        assert text.startswith(prompt), "prompted prefix is not a prefix of the conversation"
        end = shared_length(render(messages[:i + 1], False), render(messages[:i + 1], True), special)
        while end > len(prompt) and text[end - 1] in " \t\r\n":
            end -= 1
        spans.append((len(prompt), end))
    return [int(any(b <= start < e for b, e in spans)) for start, _ in offsets]


def kwarg_sets(spec):
    base = spec.get("kwargs", [{}])
    sets = []
    for extra in base:
        for generation in (False, True):
            sets.append({"add_generation_prompt": generation, **extra})
    if spec.get("thinking"):
        sets += [{"add_generation_prompt": True, "enable_thinking": False},
                 {"add_generation_prompt": False, "enable_thinking": True}]
    return sets


def main():
    template_dir = os.path.join(FIXTURES, "chat_templates")
    corpus_dir = os.path.join(FIXTURES, "chat_corpus")
    for name, spec in TEMPLATES.items():
        with open(os.path.join(template_dir, name + ".jinja"), encoding="utf-8") as f:
            template_text = f.read()
        out_dir = os.path.join(corpus_dir, name)
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        raw = build_tokenizer(out_dir, spec, template_text)
        hf = AutoTokenizer.from_pretrained(out_dir)
        has_generation = "{% generation %}" in template_text
        cases, errors, seen = [], [], set()
        kwargs_cycle = kwarg_sets(spec)
        index = 0
        for conversation in base_conversations() + spec.get("conversations", []):
            for variant in variants(conversation):
                key = json.dumps(variant, sort_keys=True)
                if key in seen:
                    continue
                seen.add(key)
                for kwargs in (kwargs_cycle[index % len(kwargs_cycle)],
                               kwargs_cycle[(index + 1) % len(kwargs_cycle)]):
                    index += 1
                    messages = copy.deepcopy(variant["messages"])
                    tools = variant.get("tools")
                    entry = {"sample": sample_text(variant), "kwargs": kwargs}
                    try:
                        text = hf.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)
                    except Exception as error:  # the template refuses this conversation
                        entry["error"] = str(error)
                        errors.append(entry)
                        continue
                    entry["text"] = text
                    encoding = raw.encode(text, add_special_tokens=False)
                    entry["ids"] = encoding.ids
                    if spec.get("prefix_masks"):
                        special = [t.content for t in raw.get_added_tokens_decoder().values()]
                        entry["loss_mask"] = prefix_loss_mask(hf, messages, tools, kwargs, text,
                                                              encoding.offsets, special)
                    if has_generation:
                        out = hf.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                                     return_assistant_tokens_mask=True, **kwargs)
                        assert out["input_ids"] == entry["ids"], name
                        entry["assistant_mask"] = out["assistant_masks"]
                    cases.append(entry)
        assert len(cases) >= MIN_RENDERED_CASES, (name, len(cases))
        source = "transformers " + transformers.__version__ + ", tokenizers " + tokenizers.__version__
        with open(os.path.join(out_dir, "cases.json"), "w", encoding="utf-8") as out:
            # One case per line keeps the files small and their diffs readable.
            out.write('{"source": ' + json.dumps(source) + ', "cases": [\n')
            out.write(",\n".join(json.dumps(case, ensure_ascii=False) for case in cases + errors[:10]))
            out.write("\n]}\n")
        print(f"{name}: {len(cases)} rendered, {min(len(errors), 10)} refused")


if __name__ == "__main__":
    main()
