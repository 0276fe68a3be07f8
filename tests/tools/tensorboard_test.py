#!/usr/bin/env python3
"""logger.tensorboard_dir writes event files TensorBoard reads. Run by ctest with the test venv's
python (tools/python-test-env.sh):

    tensorboard_test.py DYNCP_TRAIN SOURCE_ROOT

Trains the smoke recipe on one rank for 4 steps with evaluation every 2 steps, then reads the
event file with tensorboard's EventAccumulator and compares every scalar with the metrics JSONL.
"""

import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator

TRAIN, ROOT = sys.argv[1], sys.argv[2]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")


def f32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


with tempfile.TemporaryDirectory() as work:
    tb_dir, metrics = os.path.join(work, "tb"), os.path.join(work, "m.jsonl")
    one_rank = ["model.context_parallel_size=1", "model.dynamic_context_parallel=false",
                "model.max_seqlen_per_dp_cp_rank=256", "model.expert_model_parallel_size=1"]
    result = subprocess.run(
        [TRAIN, "--config", os.path.join(ROOT, "configs", "smoke", "tiny_mock.yaml"), *one_rank,
         "train.train_iters=4", "validation.eval_interval=2", "validation.eval_iters=1",
         f"logger.metrics_path={metrics}", f"+logger.tensorboard_dir={tb_dir}"],
        capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if result.returncode != 0:
        print(result.stdout + result.stderr)
        sys.exit(f"dyncp-train exited {result.returncode}")
    files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
    check(len(files) == 1, f"one event file expected, found {files}")
    rows = [json.loads(line) for line in open(metrics)]

    accumulator = event_accumulator.EventAccumulator(
        tb_dir, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0})
    accumulator.Reload()  # raises on a bad CRC or a malformed record
    tags = accumulator.Tags()
    expected = {"lm loss": "loss", "learning-rate": "lr", "grad-norm": "grad_norm",
                "batch-size": "global_batch_size", "throughput/tokens_per_s": "tokens_per_s",
                "throughput/tflops_per_device": "tflops_per_device",
                "time/step_ms": "elapsed_ms"}
    for tag, key in expected.items():
        check(tag in tags["scalars"], f"scalar {tag} missing (have {tags['scalars']})")
        if tag not in tags["scalars"]:
            continue
        events = accumulator.Scalars(tag)
        check([e.step for e in events] == [r["iteration"] for r in rows],
              f"{tag}: steps {[e.step for e in events]}")
        for event, row in zip(events, rows):
            check(event.value == f32(row[key]), f"{tag} step {event.step}: {event.value} vs {row[key]}")
    for tag in ("memory/peak_mib", "time/straggler_wait_ms"):
        check(tag in tags["scalars"], f"scalar {tag} missing")
    peak = accumulator.Scalars("memory/peak_mib")
    check(all(e.value > 1 for e in peak), "peak memory below 1 MiB")
    validation = accumulator.Scalars("lm loss validation") if "lm loss validation" in tags["scalars"] else []
    expected_validation = [(r["iteration"], r["validation_loss"]) for r in rows if "validation_loss" in r]
    check([(e.step, e.value) for e in validation] ==
          [(step, f32(value)) for step, value in expected_validation] and len(validation) == 2,
          f"validation loss {validation} vs {expected_validation}")
    check("cp-group-size" in tags["histograms"], f"histogram missing (have {tags['histograms']})")
    if "cp-group-size" in tags["histograms"]:
        histograms = accumulator.Histograms("cp-group-size")
        for event, row in zip(histograms, rows):
            groups = sum(row["group_sizes"].values())
            check(event.histogram_value.num == groups,
                  f"histogram step {event.step}: {event.histogram_value.num} groups vs {groups}")
            check(list(event.histogram_value.bucket_limit) ==
                  sorted(float(s) for s in row["group_sizes"]), "histogram bucket limits")

if failures:
    sys.exit(f"{len(failures)} failure(s)")
print(f"tensorboard: {len(rows)} steps of {len(expected) + 2} scalars, the validation loss and "
      "the group-size histogram read back equal to the metrics")
