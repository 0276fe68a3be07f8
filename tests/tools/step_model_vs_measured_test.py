#!/usr/bin/env python3
"""tools/bench/step_model_vs_measured.py on a real dry run and made-up measurements:

    step_model_vs_measured_test.py TOOL DYNCP_TRAIN SOURCE_ROOT

The measured side is built from the modelled table itself (each phase twice its modelled time,
bench_gemm's dense shapes at a known rate), so every printed ratio is known; a dry run without
the table, or results without a measurement, must fail.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

tool, train, root = sys.argv[1:4]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")


with tempfile.TemporaryDirectory() as work:
    dry_run = os.path.join(work, "dry-run-256.txt")
    text = subprocess.run([train, "--config", os.path.join(root, "configs/smoke/tiny_mock.yaml"),
                           "--world-size", "2", "--dry-run"], capture_output=True, text=True,
                          check=True).stdout
    open(dry_run, "w").write(text)
    table = text[text.index("modelled GPU step"):]
    modelled = {line[2:18].strip(): float(line[18:].split()[-4])
                for line in table.splitlines() if line.startswith("  ") and "ms" in line
                and not line.startswith("  op class") and not line.startswith("  modelled")
                and not line.startswith("  basis")}
    step = float(re.search(r"modelled step: +([0-9.]+) ms", table)[1])
    kernels = sum(modelled[c] for c in ("dense GEMMs", "expert GEMMs", "attention",
                                        "Gated DeltaNet", "LM head + CE", "element-wise"))
    results = os.path.join(work, "results.jsonl")
    with open(results, "w") as out:
        # gpu_step.sh writes a refused backend first (fused without cuDNN): it has no timings
        # and must not stand in for the measured run.
        out.write(json.dumps({"impl": "dyncp", "bin_tokens": 256, "attention_backend": "fused",
                              "refused": "model.attention_backend: fused: no cuDNN"}) + "\n")
        out.write(json.dumps({"impl": "dyncp", "bin_tokens": 256, "step_ms": 2 * step,
                              "attention_backend": "flash",
                              "time_ms": {"compute": 2 * kernels,
                                          "cp_comm": 2 * modelled["CP exchange"],
                                          "ep_comm": 2 * modelled["EP all-to-all"],
                                          "tp_comm": 2 * modelled["TP collectives"],
                                          "grad_sync": 2 * modelled["gradient reduce"],
                                          "optimizer": 2 * (modelled["optimizer"] +
                                                            modelled["param all-gather"])}}) + "\n")
        # 2 m n k count FLOPs in 1e-3 s: 2e9 x 1e3 = 2 TFLOP/s per shape.
        for name in ("qkv_proj", "o_proj", "expert_gate_up", "expert_down", "lm_head"):
            out.write(json.dumps({"impl": "gemm-anchor", "bin_tokens": 256, "name": name,
                                  "m": 1000, "n": 1000, "k": 1000, "count": 1,
                                  "seconds": 1e-3}) + "\n")
    run = subprocess.run([sys.executable, tool, results, dry_run], capture_output=True, text=True)
    print(run.stdout + run.stderr)
    check(run.returncode == 0, f"exit {run.returncode} with every measurement present")
    for name in ("kernels (every compute class)", "step", "EP all-to-all", "CP exchange"):
        line = next((l for l in run.stdout.splitlines() if l.startswith(f"  {name} ")), "")
        check(line.rstrip().endswith("2.00x"), f"{name}: measured twice the model: {line!r}")
    dense = next((l for l in run.stdout.splitlines() if l.startswith("  dense GEMMs")), "")
    check("2.0 TF/s" in dense, f"dense GEMMs measured at 2 TFLOP/s: {dense!r}")
    check("efficiency 0.00 of 790 TFLOP/s" in dense, f"efficiency against the peak: {dense!r}")
    check("attention_backend=fused: refused" in run.stdout, "the refused backend is named")

    # A missing measurement fails; so does a dry run without the table.
    rows = [json.loads(l) for l in open(results)]
    with open(results, "w") as out:
        for row in rows:
            if row.get("name") != "lm_head":
                out.write(json.dumps(row) + "\n")
    run = subprocess.run([sys.executable, tool, results, dry_run], capture_output=True, text=True)
    check(run.returncode == 1, f"exit {run.returncode} without the lm_head measurement")
    open(dry_run, "w").write(text[:text.index("modelled GPU step")])
    run = subprocess.run([sys.executable, tool, results, dry_run], capture_output=True, text=True)
    check(run.returncode == 1 and "no complete modelled table" in run.stdout,
          f"exit {run.returncode} on a dry run without the table: {run.stdout!r}")

print("step_model_vs_measured: " + ("FAILED" if failures else "ok"))
sys.exit(1 if failures else 0)
