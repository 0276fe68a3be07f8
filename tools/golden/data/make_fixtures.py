#!/usr/bin/env python3
"""Writes the data-layer golden fixtures (tests/fixtures/data/*.json) from Hugging Face reference
implementations, so the C++ tests compare token-exact and character-exact without Python.

Needs PyPI `tokenizers` and `transformers` (CI never runs this):
    pip install tokenizers transformers
    python3 tools/golden/data/make_fixtures.py [--tokenizer tests/fixtures/tokenizers/qwen3]
"""
import argparse
import json
import os
import subprocess
import sys

from tokenizers import Tokenizer
from transformers import AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def tokenizer_corpus():
    corpus = [
        "Hello world",
        "Hello, world! How's it going? I'm fine, they'll see, we've won, you're right, she'd go.",
        "IT'S DONE. We'RE here. He'Ll",
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "int main() {\n\treturn 0;\n}\r\n",
        "for (auto& [k, v] : map) { std::cout << k << \"=\" << v << '\\n'; }",
        "   leading spaces and trailing spaces   ",
        "a   b\t\tc\n\n\nd \n e",
        "line one\r\nline two\r\n\r\nline four",
        "\r\r\n\n\r",
        "1234567890123456789012345678901234567890",
        "pi = 3.14159265358979, e=2.71828; 1,000,000 and 10^9",
        "中文分词测试：这是一个句子。我们来看看效果如何！",
        "日本語のテキストとカタカナ、ひらがな。",
        "한국어 문장도 포함합니다.",
        "Emoji: 😀😃😄 👨‍👩‍👧‍👦 🇺🇸 ❤️ 👍🏽",
        "Ünïcödé àçcénts: café naïve résumé Œuvre ß",
        "Combining: e\u0301 a\u0308 o\u0302 (decomposed forms get NFC'd)",
        "Hangul jamo: \u1100\u1161\u11a8",
        "Arabic: مرحبا بالعالم; Hebrew: שלום; Hindi: नमस्ते दुनिया",
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>",
        "text<|endoftext|>more text<|im_end|><|im_start|>",
        "<think>\nreasoning here\n</think>\n\nanswer",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>",
        "almost special <|im_start and <|im_end| and <|endoftext|x",
        "<<|im_start|>>",
        "Mixed\u00a0nbsp\u2003em space\u3000ideographic space\u0085nel\u2028ls\u2029ps",
        "tabs\t\t\tand\u000bvertical\u000cformfeed",
        "!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( )))",
        "'s 's 'S 'Re 're 'VE",
        "don't won't can't shouldn't",
        "http://example.com/path?query=1&x=y#frag user@example.org",
        "     ",
        "\n",
        " ",
        "a",
        "x" * 300,
        " " * 100 + "end",
        "\n" * 50,
        "\u200b zero width space \ufeff bom",
        "Math: ∑_{i=1}^{n} i² = n(n+1)/2, ∀x∈ℝ, √2 ≈ 1.414",
        "Control \u0001\u0002\u0007 chars and DEL\u007f",
        "Private use \ue000 and supplementary \U0001f9e0\U00020000",
        "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ １２３",
        "ﬁ ligature and ﬀ, Å (angstrom sign) vs Å",
    ]
    long_mixed = "".join(corpus[:20]) * 3
    corpus.append(long_mixed)
    return corpus


def conversations():
    weather_tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name"},
                               "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    }
    return [
        {"messages": [{"role": "user", "content": "What is 2+2?"},
                      {"role": "assistant", "content": "4"}]},
        {"messages": [{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "Name a color."},
                      {"role": "assistant", "content": "Blue."},
                      {"role": "user", "content": "Another?"},
                      {"role": "assistant", "content": "Red."}]},
        {"messages": [{"role": "user", "content": "Think about it."},
                      {"role": "assistant", "content": "The answer.", "reasoning_content": "Let me think.\n"}]},
        {"messages": [{"role": "user", "content": "q1"},
                      {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nold answer"},
                      {"role": "user", "content": "q2"},
                      {"role": "assistant", "content": "<think>\nnew reasoning\n</think>\n\nnew answer"}]},
        {"messages": [{"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "\n\nHello with leading newlines"}]},
        {"messages": [{"role": "system", "content": "sys"},
                      {"role": "user", "content": "Weather in Paris?"},
                      {"role": "assistant", "content": "",
                       "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                         "arguments": {"city": "Paris", "unit": "c"}}}]},
                      {"role": "tool", "content": "{\"temp\": 21}"},
                      {"role": "assistant", "content": "It is 21°C in Paris."}],
         "tools": [weather_tool]},
        {"messages": [{"role": "user", "content": "Two cities"},
                      {"role": "assistant", "content": "Checking both.",
                       "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                                      {"function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
                      {"role": "tool", "content": "cold"},
                      {"role": "tool", "content": "warm"},
                      {"role": "assistant", "content": "Oslo is cold, Rome is warm.",
                       "reasoning_content": "Combine results."}],
         "tools": [weather_tool]},
        {"messages": [{"role": "user", "content": "Tool-only"},
                      {"role": "assistant", "content": "",
                       "tool_calls": [{"name": "lookup", "arguments": {"q": "naïve 中文", "n": [1, 2.5, True, None]}}]},
                      {"role": "tool", "content": "found"},
                      {"role": "assistant", "content": "Done."}]},
        {"messages": [{"role": "system", "content": "first"},
                      {"role": "user", "content": "u"},
                      {"role": "system", "content": "mid-conversation system"},
                      {"role": "assistant", "content": "ok"}]},
        {"messages": [{"role": "user", "content": "<tool_response>\nlooks like a tool\n</tool_response>"},
                      {"role": "assistant", "content": "noted"}]},
        {"messages": [{"role": "user", "content": "中文问题？"},
                      {"role": "assistant", "content": "中文回答。😀", "reasoning_content": ""}]},
        {"messages": [{"role": "user", "content": "a"},
                      {"role": "assistant", "content": "b", "reasoning_content": "r1"},
                      {"role": "user", "content": "c"},
                      {"role": "assistant", "content": "d", "reasoning_content": "r2"},
                      {"role": "assistant", "content": "e"}]},
        {"messages": [{"role": "user", "content": "multi\nline\r\nuser"},
                      {"role": "assistant", "content": "code:\n```python\nprint('x')\n```\n"}]},
        {"messages": [{"role": "user", "content": "x"},
                      {"role": "assistant", "content": "</think>only closing"}]},
        {"messages": [{"role": "system", "content": "with tools, no system text?"},
                      {"role": "user", "content": "y"},
                      {"role": "assistant", "content": "z"}],
         "tools": [{"type": "function", "function": {"name": "noop", "parameters": {}}}]},
    ]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer",
                        default=os.path.join(ROOT, "tests", "fixtures", "tokenizers", "qwen3"))
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "data"))
    args = parser.parse_args()
    tokenizer_dir = args.tokenizer
    os.makedirs(args.out, exist_ok=True)

    hf = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    cases = [{"text": text, "ids": hf.encode(text, add_special_tokens=False).ids}
             for text in tokenizer_corpus()]
    with open(os.path.join(args.out, "qwen3_tokenizer_cases.json"), "w", encoding="utf-8") as out:
        json.dump({"source": "tokenizers " + __import__("tokenizers").__version__, "cases": cases},
                  out, ensure_ascii=False, indent=1)

    auto = AutoTokenizer.from_pretrained(tokenizer_dir)
    # "loss_mask" of each case is the mask of the hand-written Qwen3 renderer the Jinja interpreter
    # replaced; it is kept from the existing file (the C++ test holds the interpreter's rule to it).
    chat_path = os.path.join(args.out, "qwen3_chat_cases.json")
    previous = {}
    if os.path.exists(chat_path):
        for case in json.load(open(chat_path, encoding="utf-8"))["cases"]:
            if "loss_mask" in case:
                previous[json.dumps(case["sample"], sort_keys=True)] = case["loss_mask"]
    chats = []
    for sample in conversations():
        text = auto.apply_chat_template(sample["messages"], tools=sample.get("tools"),
                                        tokenize=False, add_generation_prompt=False)
        ids = hf.encode(text, add_special_tokens=False).ids
        case = {"sample": sample, "text": text, "ids": ids}
        mask = previous.get(json.dumps(sample, sort_keys=True))
        if mask is not None:
            case["loss_mask"] = mask
        chats.append(case)
    with open(os.path.join(args.out, "qwen3_chat_cases.json"), "w", encoding="utf-8") as out:
        json.dump({"source": "transformers " + __import__("transformers").__version__, "cases": chats},
                  out, ensure_ascii=False, indent=1)
    # The demo tokenizer (tools/make_demo_data.py), committed as a small second tokenizer for tests.
    demo_dir = os.path.join(args.out, "demo")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_demo_data.py"), "--out", demo_dir,
                    "--num-samples", "40"], check=True)
    demo = Tokenizer.from_file(os.path.join(demo_dir, "tokenizer", "tokenizer.json"))
    demo_texts = tokenizer_corpus() + [json.loads(line)["messages"][0]["content"]
                                       for line in open(os.path.join(demo_dir, "train.jsonl"), encoding="utf-8")]
    demo_cases = [{"text": text, "ids": demo.encode(text, add_special_tokens=False).ids} for text in demo_texts]
    with open(os.path.join(args.out, "demo_tokenizer_cases.json"), "w", encoding="utf-8") as out:
        json.dump({"source": "tokenizers " + __import__("tokenizers").__version__, "cases": demo_cases},
                  out, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases)} tokenizer cases and {len(chats)} chat cases to {args.out}")


if __name__ == "__main__":
    main()
