#!/usr/bin/env python3
"""Deterministic synthetic SFT chat data and a tiny byte-level BPE tokenizer for the demo.

    python3 tools/make_demo_data.py --out runs/demo [--num-samples 4000] [--seed 1]

Writes, under --out:
  train.jsonl                chat samples {"messages": [...]} (arithmetic, list reversal, key-value
                             recall behind distractor sentences, a few two-turn chats); lengths from
                             a few dozen tokens to a long tail of a few thousand
  tokenizer/tokenizer.json   byte-level BPE in Hugging Face format: 256 byte tokens, merges learned
                             on this corpus, and the Qwen special tokens; at most 512 ids in all
  tokenizer/tokenizer_config.json  pad/eos tokens and Qwen3's chat_template, verbatim
Only the Python standard library is needed; the same arguments always give the same bytes.
"""
import argparse
import collections
import json
import os
import random
import re

QWEN3_CHAT_TEMPLATE = "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0].role == 'system' %}\n        {{- messages[0].content + '\\n\\n' }}\n    {%- endif %}\n    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0].role == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n{%- for message in messages[::-1] %}\n    {%- set index = (messages|length - 1) - loop.index0 %}\n    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n        {%- set ns.multi_step_tool = false %}\n        {%- set ns.last_query_index = index %}\n    {%- endif %}\n{%- endfor %}\n{%- for message in messages %}\n    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}\n        {%- set content = message.content %}\n        {%- set reasoning_content = '' %}\n        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n            {%- set reasoning_content = message.reasoning_content %}\n        {%- else %}\n            {%- if '</think>' in message.content %}\n                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n            {%- endif %}\n        {%- endif %}\n        {%- if loop.index0 > ns.last_query_index %}\n            {%- if loop.last or (not loop.last and reasoning_content) %}\n                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n            {%- else %}\n                {{- '<|im_start|>' + message.role + '\\n' + content }}\n            {%- endif %}\n        {%- else %}\n            {{- '<|im_start|>' + message.role + '\\n' + content }}\n        {%- endif %}\n        {%- if message.tool_calls %}\n            {%- for tool_call in message.tool_calls %}\n                {%- if (loop.first and content) or (not loop.first) %}\n                    {{- '\\n' }}\n                {%- endif %}\n                {%- if tool_call.function %}\n                    {%- set tool_call = tool_call.function %}\n                {%- endif %}\n                {{- '<tool_call>\\n{\"name\": \"' }}\n                {{- tool_call.name }}\n                {{- '\", \"arguments\": ' }}\n                {%- if tool_call.arguments is string %}\n                    {{- tool_call.arguments }}\n                {%- else %}\n                    {{- tool_call.arguments | tojson }}\n                {%- endif %}\n                {{- '}\\n</tool_call>' }}\n            {%- endfor %}\n        {%- endif %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and enable_thinking is false %}\n        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}"
QWEN_SPLIT_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                  "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
MAX_VOCAB = 512
NUM_MERGES = MAX_VOCAB - 256 - len(SPECIAL_TOKENS) - 7  # a little headroom below 512

COLORS = ["red", "blue", "green", "yellow", "black", "white", "purple", "orange", "pink", "gray"]
ANIMALS = ["cat", "dog", "fox", "owl", "bear", "wolf", "duck", "frog", "lion", "mouse"]
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
PLACES = ["the park", "the lake", "the city", "the farm", "the forest", "the market", "the river"]
VERBS = ["saw", "met", "painted", "followed", "found", "called", "visited", "counted"]


def byte_symbols():
    """GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 onwards."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    mapping = {}
    shifted = 256
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(shifted)
            shifted += 1
    return mapping


def distractor(rng):
    return "{} {} a {} {} near {}.".format(rng.choice(NAMES).capitalize(), rng.choice(VERBS),
                                           rng.choice(COLORS), rng.choice(ANIMALS), rng.choice(PLACES))


def arithmetic(rng):
    a, b = rng.randrange(0, 1000), rng.randrange(0, 1000)
    op = rng.choice(["+", "-", "*"])
    result = {"+": a + b, "-": a - b, "*": a * b}[op]
    return "What is {} {} {}?".format(a, op, b), "{} {} {} = {}".format(a, op, b, result)


def reversal(rng):
    items = [rng.choice(COLORS + ANIMALS) for _ in range(rng.randrange(3, 13))]
    return "Reverse the list: " + " ".join(items), " ".join(reversed(items))


def recall(rng):
    # Log-normal distractor count: median ~6 sentences, a long tail of several hundred.
    count = min(400, int(rng.lognormvariate(1.8, 1.1)))
    key = "{}-{}".format(rng.choice(NAMES), rng.randrange(10, 100))
    value = "{} {}".format(rng.choice(COLORS), rng.choice(ANIMALS))
    sentences = [distractor(rng) for _ in range(count)]
    sentences.insert(rng.randrange(0, count + 1), "The secret of {} is {}.".format(key, value))
    question = "Read the notes.\n" + "\n".join(sentences) + "\nWhat is the secret of {}?".format(key)
    return question, "The secret of {} is {}.".format(key, value)


def make_sample(rng):
    kind = rng.random()
    if kind < 0.1:
        first, second = arithmetic(rng), reversal(rng)
        return {"messages": [{"role": "user", "content": first[0]}, {"role": "assistant", "content": first[1]},
                             {"role": "user", "content": second[0]}, {"role": "assistant", "content": second[1]}]}
    task = arithmetic if kind < 0.4 else reversal if kind < 0.7 else recall
    question, answer = task(rng)
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    if rng.random() < 0.2:
        messages.insert(0, {"role": "system", "content": "You are a careful assistant."})
    return {"messages": messages}


def rendered_text(sample):
    """The text the Qwen3 template renders for these simple samples (for BPE training only)."""
    parts = []
    messages = sample["messages"]
    for index, message in enumerate(messages):
        if message["role"] == "assistant" and index == len(messages) - 1:
            parts.append("<|im_start|>assistant\n<think>\n\n</think>\n\n" + message["content"] + "<|im_end|>\n")
        else:
            parts.append("<|im_start|>{}\n{}<|im_end|>\n".format(message["role"], message["content"]))
    return "".join(parts)


# ASCII stand-in for the Qwen split pattern (the corpus is ASCII, where they agree).
ASCII_SPLIT = re.compile(r"'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]"
                         r"| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_SPLIT = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS))


def train_merges(texts, num_merges):
    symbols = byte_symbols()
    word_counts = collections.Counter()
    for text in texts:
        for segment in SPECIAL_SPLIT.split(text):
            for piece in ASCII_SPLIT.findall(segment):
                word_counts[tuple(symbols[b] for b in piece.encode("utf-8"))] += 1
    words = [[list(word), count] for word, count in sorted(word_counts.items())]
    merges = []
    for _ in range(num_merges):
        pair_counts = collections.Counter()
        for word, count in words:
            for left, right in zip(word, word[1:]):
                pair_counts[(left, right)] += count
        if not pair_counts:
            break
        # Most frequent pair; ties broken by the pair itself so the result is deterministic.
        best = min(pair_counts.items(), key=lambda item: (-item[1], item[0]))[0]
        merges.append(best)
        merged = best[0] + best[1]
        for entry in words:
            word = entry[0]
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == best[0] and word[i + 1] == best[1]:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            entry[0] = out
    return merges


def tokenizer_json(merges):
    symbols = byte_symbols()
    vocab = {symbols[byte]: byte for byte in range(256)}
    for left, right in merges:
        if left + right not in vocab:
            vocab[left + right] = len(vocab)
    added = [{"id": len(vocab) + i, "content": token, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, token in enumerate(SPECIAL_TOKENS)]
    assert len(vocab) + len(added) <= MAX_VOCAB
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[left, right] for left, right in merges]},
    }


def tokenizer_config():
    return {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace", "model_max_length": 32768,
            "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
            "chat_template": QWEN3_CHAT_TEMPLATE}


def write_json(path, value, indent=None):
    with open(path, "w", encoding="utf-8") as out:
        json.dump(value, out, ensure_ascii=False, indent=indent)
        out.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-samples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.num_samples < 1:
        parser.error("--num-samples must be >= 1")
    rng = random.Random(args.seed)
    samples = [make_sample(rng) for _ in range(args.num_samples)]
    os.makedirs(os.path.join(args.out, "tokenizer"), exist_ok=True)
    with open(os.path.join(args.out, "train.jsonl"), "w", encoding="utf-8") as out:
        for sample in samples:
            out.write(json.dumps(sample, ensure_ascii=False) + "\n")
    # Merges are learned on a fixed-size prefix so the tokenizer does not depend on --num-samples.
    merge_rng = random.Random(12345)
    training_texts = [rendered_text(make_sample(merge_rng)) for _ in range(1500)]
    merges = train_merges(training_texts, NUM_MERGES)
    write_json(os.path.join(args.out, "tokenizer", "tokenizer.json"), tokenizer_json(merges), indent=1)
    write_json(os.path.join(args.out, "tokenizer", "tokenizer_config.json"), tokenizer_config(), indent=2)
    print("wrote {} samples and a {}-token tokenizer to {}".format(
        len(samples), 256 + len(merges) + len(SPECIAL_TOKENS), args.out))


if __name__ == "__main__":
    main()
