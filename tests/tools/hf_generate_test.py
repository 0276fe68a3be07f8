#!/usr/bin/env python3
"""An HF export chats in transformers: chat template, then generate. Run by ctest with the test
venv's python:

    hf_generate_test.py DYNCP_TRAIN DYNCP_CHECK SOURCE_ROOT

Needs torch, which the test venv has unless it was made with DYNCP_PYTHON_TORCH=0
(tools/python-test-env.sh: PyPI's Linux wheel with its CUDA libraries is about 2.9 GB). Without
torch it prints why on stderr and exits 77, which ctest reports as skipped; every other
failure is a failure.

Trains the demo recipe for 2 steps on one rank with checkpoint.export_hf, then in transformers:
AutoTokenizer.apply_chat_template(add_generation_prompt=True) on a conversation,
AutoModelForCausalLM (bf16 weights read as fp32) greedy generate of 12 new tokens, twice (the
same ids), each new id inside the vocabulary and the prompt kept as the prefix; finally the
whole generated sequence's loss from transformers against dyncp-check on the same folder
(relative 1e-4), so the model transformers generated with is the one dyncp-train computes.
"""

import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError as error:
    print("*" * 78, file=sys.stderr)
    print(f"tools:hf_generate SKIPPED: torch is not installed in {sys.prefix} ({error}).", file=sys.stderr)
    print("Install it with: tools/python-test-env.sh build/python-env (without DYNCP_PYTHON_TORCH=0)",
          file=sys.stderr)
    print("then: ctest --test-dir build -R tools:hf_generate", file=sys.stderr)
    print("*" * 78, file=sys.stderr)
    sys.exit(77)
from transformers import AutoModelForCausalLM, AutoTokenizer

from demo_export import train_demo

TRAIN, CHECK, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")


MESSAGES = [{"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "What is 2 + 3?"}]
NEW_TOKENS = 12

with tempfile.TemporaryDirectory() as work:
    tokenizer_dir = os.path.join(ROOT, "tests", "fixtures", "data", "demo", "tokenizer")
    export = os.path.join(work, "hf")
    train_demo(TRAIN, ROOT, work, tokenizer_dir, f"checkpoint.export_hf={export}")

    tokenizer = AutoTokenizer.from_pretrained(export)
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)["input_ids"]
    check(tokenizer.decode(prompt[0]).endswith("<|im_start|>assistant\n"),
          f"the prompt does not end with the assistant header: {tokenizer.decode(prompt[0])!r}")
    model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    model.eval()
    torch.manual_seed(0)
    generated = []
    for _ in range(2):
        with torch.no_grad():
            # min_new_tokens: an untrained model may pick the end of turn first; the test wants
            # a continuation of known length.
            output = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                    max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                    pad_token_id=tokenizer.pad_token_id)
        generated.append(output[0].tolist())
    ids = generated[0]
    check(generated[0] == generated[1], "greedy generate is not repeatable")
    check(ids[:prompt.shape[1]] == prompt[0].tolist(), "the output does not start with the prompt")
    new = ids[prompt.shape[1]:]
    check(len(new) == NEW_TOKENS, f"{len(new)} new tokens, expected {NEW_TOKENS}")
    check(all(0 <= token < model.config.vocab_size for token in new), f"new ids out of range: {new}")
    print(f"generated: {tokenizer.decode(new)!r}")

    # The sequence transformers produced, scored by both implementations.
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
        theirs = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:])).item()
    batch = os.path.join(work, "batch.json")
    with open(batch, "w") as f:
        json.dump({"sequences": [ids]}, f)
    scored = subprocess.run([CHECK, "--hf", export, "--batch", batch, "--json"], capture_output=True,
                            text=True, check=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    ours = json.loads(scored.stdout)["loss"]
    relative = abs(ours - theirs) / abs(theirs)
    check(relative <= 1e-4, f"loss of the generated sequence: dyncp-check {ours} vs transformers {theirs}")
    print(f"loss of prompt + generated: transformers {theirs:.7f}, dyncp-check {ours:.7f} ({relative:.1e})")

if failures:
    sys.exit(f"{len(failures)} failure(s)")
print("hf_generate: the export renders its chat template and generates in transformers; "
      "dyncp-check scores the generated sequence as transformers does")
