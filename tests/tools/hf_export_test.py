#!/usr/bin/env python3
"""HF exports load and chat in transformers. Run by ctest with the test venv's python
(tools/python-test-env.sh: transformers, no torch):

    hf_export_test.py DYNCP_TRAIN DYNCP_EXPORT SOURCE_ROOT

Trains the demo recipe for 2 steps on one rank with a transformers-5 style tokenizer folder (the
chat template also in chat_template.jinja, plus a generation_config.json-less folder), saving a
checkpoint and the end-of-training export; then converts the checkpoint with dyncp-export. Both
exports must: hold every tokenizer file, chat_template.jinja included; say bfloat16 in
config.json over BF16 tensors; have a generation_config.json transformers reads; render the chat
template through AutoTokenizer.apply_chat_template exactly as the original folder does. The two
exports' weights must be byte-identical (the same step's weights, the same bf16 rounding), and so
must those of the checkpoint exported at the end of a 2-rank run with EP 2, and of a 2-rank run
with tensor parallelism 2, that resume it without training (the ranks write the tensors they
hold, the TP ranks rebuilding each split tensor from their pieces).
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from demo_export import run, train_demo

TRAIN, EXPORT, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")


def safetensors_dtypes(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


MESSAGES = [{"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": "5"},
            {"role": "user", "content": "And 4 + 4?"}]

with tempfile.TemporaryDirectory() as work:
    tokenizer = os.path.join(work, "tokenizer")
    shutil.copytree(os.path.join(ROOT, "tests", "fixtures", "data", "demo", "tokenizer"), tokenizer)
    template = json.load(open(os.path.join(tokenizer, "tokenizer_config.json")))["chat_template"]
    with open(os.path.join(tokenizer, "chat_template.jinja"), "w") as f:
        f.write(template)
    with open(os.path.join(tokenizer, "special_tokens_map.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, f)
    save, at_end, converted = (os.path.join(work, name) for name in ("ckpt", "hf_end", "hf_export"))
    train_demo(TRAIN, ROOT, work, tokenizer, f"checkpoint.save={save}", f"checkpoint.export_hf={at_end}")
    print(run([EXPORT, "--checkpoint", save, "--out", converted]).strip())
    # The same checkpoint exported by 2 ranks, each holding half the experts (EP 2), resumed
    # without training and saving nothing: each rank writes the pieces it holds.
    two_ranks = os.path.join(work, "hf_two_ranks")
    log = train_demo(TRAIN, ROOT, work, tokenizer, f"checkpoint.load={save}", "checkpoint.save=",
                     f"checkpoint.export_hf={two_ranks}", "model.expert_model_parallel_size=2",
                     launcher=("mpirun", "-np", "2"))
    check(f"HF weights exported to {two_ranks} by 2 ranks" in log, "no 2-rank export logged")
    tensor_parallel = os.path.join(work, "hf_tensor_parallel")
    log = train_demo(TRAIN, ROOT, work, tokenizer, f"checkpoint.load={save}", "checkpoint.save=",
                     f"checkpoint.export_hf={tensor_parallel}", "model.tensor_model_parallel_size=2",
                     "model.sequence_parallel=true", launcher=("mpirun", "-np", "2"))
    check(f"HF weights exported to {tensor_parallel} by 2 ranks" in log, "no TP-2 export logged")

    reference = AutoTokenizer.from_pretrained(tokenizer).apply_chat_template(
        MESSAGES, tokenize=False, add_generation_prompt=True)
    for folder in (at_end, converted, two_ranks, tensor_parallel):
        name = os.path.basename(folder)
        for file in os.listdir(tokenizer):
            check(os.path.isfile(os.path.join(folder, file)), f"{name}: {file} not copied")
        check(open(os.path.join(folder, "chat_template.jinja")).read() == template,
              f"{name}: chat_template.jinja differs")
        config = AutoConfig.from_pretrained(folder)
        dtype = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None))
        check(dtype.endswith("bfloat16"), f"{name}: config dtype {dtype}")
        check(safetensors_dtypes(os.path.join(folder, "model.safetensors")) == {"BF16"},
              f"{name}: tensors are not all BF16")
        generation = GenerationConfig.from_pretrained(folder)
        # The demo config.json has no eos id: the tokenizer's eos_token (<|im_end|>) is used.
        check(generation.eos_token_id == 488 and generation.pad_token_id == 486,
              f"{name}: generation_config eos {generation.eos_token_id} pad {generation.pad_token_id}")
        rendered = AutoTokenizer.from_pretrained(folder).apply_chat_template(
            MESSAGES, tokenize=False, add_generation_prompt=True)
        check(rendered == reference and rendered.endswith("<|im_start|>assistant\n"),
              f"{name}: chat template renders {rendered!r}")
    check(open(os.path.join(at_end, "model.safetensors"), "rb").read() ==
          open(os.path.join(converted, "model.safetensors"), "rb").read(),
          "dyncp-export of the last checkpoint differs from the end-of-training export")
    check(open(os.path.join(two_ranks, "model.safetensors"), "rb").read() ==
          open(os.path.join(at_end, "model.safetensors"), "rb").read(),
          "the 2-rank (EP 2) export differs from the 1-rank export")
    check(open(os.path.join(tensor_parallel, "model.safetensors"), "rb").read() ==
          open(os.path.join(at_end, "model.safetensors"), "rb").read(),
          "the TP-2 export differs from the 1-rank export")
    # Without a tokenizer to copy, dyncp-export says how to give one (exit 2).
    os.remove(os.path.join(save, "config.yaml"))
    result = subprocess.run([EXPORT, "--checkpoint", save, "--out", os.path.join(work, "x")],
                            capture_output=True, text=True)
    check(result.returncode == 2 and "--tokenizer DIR" in result.stderr,
          f"no config.yaml: exit {result.returncode}, {result.stderr!r}")

if failures:
    sys.exit(f"{len(failures)} failure(s)")
print("hf_export: the exports load in transformers with bf16 dtype, the chat template and a "
      "generation config; dyncp-export's, the 2-rank (EP 2) and the TP-2 exports equal the "
      "end-of-training export byte for byte")
