#!/usr/bin/env python3
"""Modelled against measured, per op class (docs/step-model.md): the first GPU run calibrates
the modelled step's table (the packing.step_model_* keys).

    step_model_vs_measured.py RESULTS_JSONL DRY_RUN_TXT...

RESULTS_JSONL is tools/bench/gpu_step.sh's results (DYNCP_BENCH_KEEP keeps them): per bin size,
the trainer's row ("impl": "dyncp": median step time and per-phase times of the timed steps)
and bench_gemm's ("impl": "gemm-anchor": each GEMM shape of that bin, timed on the device).
Each DRY_RUN_TXT is the `--dry-run` output of the same benchmark command, named
dry-run-<bin tokens>.txt, whose "modelled GPU step" table is read.

Compared, per bin size:
  dense GEMMs, expert GEMMs, LM head + CE   the modelled rate (FLOPs / modelled time) against
                                            bench_gemm's rate on that class's shapes
                                            (qkv_proj + o_proj; expert_gate_up + expert_down;
                                            lm_head): measured / (bf16 peak) is the efficiency
                                            to put in the table
  kernels (every compute class)             against the step's measured compute time
  CP exchange, EP all-to-all, TP           against the measured cp_comm, ep_comm, tp_comm,
  collectives, gradient reduce, optimizer   grad_sync and optimizer times
  + param all-gather
  step                                      against the measured step time
Exit 0 when every table and measurement was found; 1 otherwise.
"""

import json
import os
import re
import sys

CLASSES = ("dense GEMMs", "expert GEMMs", "attention", "Gated DeltaNet", "LM head + CE",
           "element-wise", "optimizer", "CP exchange", "EP all-to-all", "TP collectives",
           "gradient reduce", "param all-gather")
KERNELS = CLASSES[:6]
PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
GEMM_SHAPES = {"dense GEMMs": ("qkv_proj", "o_proj"),
               "expert GEMMs": ("expert_gate_up", "expert_down"),
               "LM head + CE": ("lm_head",)}
PHASES = (("kernels (every compute class)", KERNELS, "compute"),
          ("CP exchange", ("CP exchange",), "cp_comm"),
          ("EP all-to-all", ("EP all-to-all",), "ep_comm"),
          ("TP collectives", ("TP collectives",), "tp_comm"),
          ("gradient reduce", ("gradient reduce",), "grad_sync"),
          ("optimizer + param all-gather", ("optimizer", "param all-gather"), "optimizer"))


def quantity(text):
    if text == "-":
        return 0.0
    match = re.fullmatch(r"([0-9.]+(?:e[+-]?[0-9]+)?)([KMGTPE]?)B?", text)
    if not match:
        raise ValueError(f"not a quantity: {text!r}")
    return float(match[1]) * PREFIX[match[2]]


def read_table(path):
    """The modelled table of one dry run: {class: {flops, bytes, ms}}, step ms, bf16 peak."""
    rows, step_ms, peak, inside = {}, None, None, False
    for line in open(path):
        inside = inside or line.startswith("modelled GPU step")
        name = line[2:18].strip()
        if inside and line.startswith("  ") and name in CLASSES and name not in rows:
            fields = line[18:].split()
            rows[name] = {"flops": quantity(fields[0]), "bytes": quantity(fields[1]),
                          "ms": float(fields[-4])}
        match = re.match(r"  modelled step: +([0-9.]+) ms", line)
        if inside and match:
            step_ms = float(match[1])
        match = re.search(r"of the table's bf16 peak \(([0-9.]+) TFLOP/s\)", line)
        if match:
            peak = float(match[1])
    missing = [c for c in CLASSES if c not in rows]
    if missing or step_ms is None or peak is None:
        raise ValueError(f"{path}: no complete modelled table (missing {missing or 'the totals'})")
    return rows, step_ms, peak


def ratio(measured, modelled):
    return f"{measured / modelled:.2f}x" if modelled > 0 and measured is not None else "-"


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    results = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    ok = True
    for path in sys.argv[2:]:
        match = re.search(r"dry-run-([0-9]+)\.txt$", os.path.basename(path))
        if not match:
            print(f"step model: {path} is not named dry-run-<bin tokens>.txt")
            ok = False
            continue
        bin_tokens = int(match[1])
        try:
            rows, step_ms, peak = read_table(path)
        except ValueError as error:
            print(f"step model: {error}")
            ok = False
            continue
        # One trainer run per attention backend (tools/bench/gpu_step.sh); a refused backend
        # (fused without cuDNN) has no timings and is only named.
        runs = [r for r in results if r.get("impl") == "dyncp" and r.get("bin_tokens") == bin_tokens]
        for refused in (r for r in runs if "refused" in r):
            print(f"  attention_backend={refused.get('attention_backend')}: refused "
                  f"({refused['refused']})")
        measured_runs = [r for r in runs if "refused" not in r] or [None]
        gemms = {r["name"]: r for r in results if r.get("impl") == "gemm-anchor"
                 and r.get("bin_tokens") == bin_tokens}
        print(f"modelled vs measured, {bin_tokens}-token bins (modelled: the dry run's table; "
              f"measured: median of the timed steps, bench_gemm on the device):")
        print(f"  {'class':30} {'modelled':>16} {'measured':>16} {'measured/modelled':>18}")
        for name, shapes in GEMM_SHAPES.items():
            row = rows[name]
            modelled = row["flops"] / (row["ms"] * 1e-3) / 1e12 if row["ms"] > 0 else 0.0
            timed = [gemms[s] for s in shapes if s in gemms]
            if len(timed) != len(shapes):
                print(f"  {name:30} {modelled:10.1f} TF/s {'not measured':>16}")
                ok = False
                continue
            flops = sum(2.0 * g["m"] * g["n"] * g["k"] * g["count"] for g in timed)
            measured = flops / sum(g["seconds"] for g in timed) / 1e12
            print(f"  {name:30} {modelled:10.1f} TF/s {measured:10.1f} TF/s "
                  f"{ratio(measured, modelled):>18}   (efficiency {measured / peak:.2f} of "
                  f"{peak:.0f} TFLOP/s)")
        for ours in measured_runs:
            if ours is not None and ours.get("attention_backend"):
                print(f"  measured with attention_backend={ours['attention_backend']}:")
            phases = (ours or {}).get("time_ms") or {}
            for name, classes, key in PHASES:
                modelled = sum(rows[c]["ms"] for c in classes)
                measured = phases.get(key)
                if measured is None:
                    ok = False
                shown = f"{measured:13.2f} ms" if measured is not None else f"{'not measured':>16}"
                print(f"  {name:30} {modelled:13.2f} ms {shown} {ratio(measured, modelled):>18}")
            measured = ours.get("step_ms") if ours else None
            if measured is None:
                ok = False
            shown = f"{measured:13.2f} ms" if measured is not None else f"{'not measured':>16}"
            print(f"  {'step':30} {step_ms:13.2f} ms {shown} {ratio(measured, step_ms):>18}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
