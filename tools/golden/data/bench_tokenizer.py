#!/usr/bin/env python3
"""Tokenizer throughput, single core: dyncp-data bench-tokenizer next to HF `tokenizers` (Python,
one thread) on the same mixed corpus, in the same run. Needs PyPI `tokenizers`.

    python3 tools/golden/data/bench_tokenizer.py --binary build/apps/dyncp-data/dyncp-data \\
        [--tokenizer tests/fixtures/tokenizers/qwen3] [--megabytes 8]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import tempfile
import time

os.sched_setaffinity(0, {0})  # one core for both implementations
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

ENGLISH = ("The quick brown fox jumps over the lazy dog. It's a well-known pangram; they've used it "
           "for decades to test typewriters, fonts and keyboards. ")
CODE = ("def tokenize(text: str) -> list[int]:\n    ids = []\n    for piece in split(text):\n"
        "        ids.extend(bpe(piece))  # merge by rank\n    return ids\n\n")
CJK = "自然语言处理是人工智能的一个重要方向。日本語の文章も含まれています。한국어 문장입니다。"
MIXED = "Emoji 😀👍🏽 and numbers 1234567890, URLs https://example.com/a?b=c&d=e\r\n\t  spaces   "


def build_corpus(megabytes, seed=7):
    rng = random.Random(seed)
    parts, size = [], 0
    kinds = [ENGLISH, CODE, CJK, MIXED]
    while size < megabytes * 1e6:
        document = "".join(rng.choice(kinds) * rng.randint(1, 6) for _ in range(rng.randint(2, 12)))
        document += " doc{} value {}".format(len(parts), rng.randint(0, 10**9))
        parts.append(document)
        size += len(document.encode("utf-8"))
    return parts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--tokenizer", default=os.path.join(ROOT, "tests", "fixtures", "tokenizers", "qwen3"))
    parser.add_argument("--megabytes", type=float, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    documents = build_corpus(args.megabytes)
    corpus = "\x1e".join(documents)
    total_bytes = len(corpus.encode("utf-8"))
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as out:
        out.write(corpus.encode("utf-8"))
        path = out.name

    hf = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    seconds, tokens = [], 0
    for _ in range(args.repeats):
        started = time.perf_counter()
        tokens = sum(len(hf.encode(document, add_special_tokens=False).ids) for document in documents)
        seconds.append(time.perf_counter() - started)
    hf_result = {"implementation": "hf-tokenizers", "bytes": total_bytes, "documents": len(documents),
                 "tokens": tokens, "median_mb_per_s": total_bytes / 1e6 / statistics.median(seconds),
                 "best_mb_per_s": total_bytes / 1e6 / min(seconds)}
    ours = subprocess.run(["taskset", "-c", "0", args.binary, "bench-tokenizer", "--tokenizer", args.tokenizer,
                           "--text-file", path, "--repeats", str(args.repeats)],
                          check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    os.unlink(path)
    ours = json.loads(ours)
    print(json.dumps(hf_result))
    print(json.dumps(ours))
    if ours["tokens"] != hf_result["tokens"]:
        print("WARNING: token counts differ ({} vs {})".format(ours["tokens"], hf_result["tokens"]))
    print("dyncp / HF median throughput: {:.2f}x".format(ours["median_mb_per_s"] / hf_result["median_mb_per_s"]))


if __name__ == "__main__":
    main()
