#!/usr/bin/env python3
"""bench_model (the model half of tools/bench/gpu_step.sh and run_model_bench.sh) on a tiny
shape: its JSON line is self-consistent, mock_varlen bins are full, the written batch and config
match what was timed, and bad arguments exit 2. Standard library only."""
import json
import os
import subprocess
import sys
import tempfile

bench = sys.argv[1]
env = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def run(*args):
    return subprocess.run([bench, *args], capture_output=True, text=True, env=env)


with tempfile.TemporaryDirectory() as work:
    batch, config = os.path.join(work, "batch.json"), os.path.join(work, "config.json")
    done = run("--size", "tiny", "--layers", "2", "--bin-tokens", "512", "--bins", "3",
               "--mock-varlen", "lognormal:mean=100,sigma=1.0,min=8,max=400", "--steps", "2",
               "--write-batch", batch, "--write-config", config)
    assert done.returncode == 0, done.stderr
    line = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("{")))
    assert line["layers"] == 2 and line["bins"] == 3, line
    tokens = line["bin_tokens"] * line["bins"]
    assert abs(line["tokens_per_s"] - tokens / line["median_s"]) <= 0.01 * line["tokens_per_s"], line
    phases = line["attention_s"] + line["experts_s"] + line["other_s"]
    assert line["attention_s"] > 0 and line["experts_s"] > 0, line
    assert phases <= line["median_s"] * 1.0001 + 1e-4, line
    assert abs(line["model_tflops"] * 1e12 * line["median_s"] - line["flops_per_step"]) \
        <= 0.01 * line["flops_per_step"], line
    sequences = json.load(open(batch))["sequences"]
    assert sum(len(s) for s in sequences) == 512, "the first bin is not full"
    assert json.load(open(config))["num_hidden_layers"] == 2
    assert all(0 <= t < 512 for s in sequences for t in s)

for bad in (["--size", "bogus"], ["--steps", "x"], ["--device", "tpu"], ["--unknown"]):
    done = run(*bad)
    assert done.returncode == 2 and "bench_model:" in done.stderr, (bad, done.returncode, done.stderr)
print("bench_model checks passed")
