#!/usr/bin/env python3
"""logger.wandb_* drive the W&B sidecar (tools/wandb_sidecar.py), checked offline. Run by ctest
with the test venv's python (tools/python-test-env.sh: wandb):

    wandb_test.py DYNCP_TRAIN SOURCE_ROOT

With WANDB_MODE=offline W&B writes each run to DIR/wandb/offline-run-*-<id>/run-<id>.wandb, a
LevelDB-log file of protobuf records; the test reads it back and compares the W&B history with
the metrics JSONL. Cases:
  - a run of the smoke recipe (4 steps, evaluation every 2) into a metrics file that already
    holds another launch's row: one offline run named by logger.wandb_exp_name, id = run id,
    the resolved configuration as its config, exactly this launch's 4 rows (loss, lr, grad
    norm, validation loss), in the default folder beside the metrics file;
  - the trainer killed with SIGKILL mid-run: the sidecar sees its input close, logs every row
    the trainer wrote and finishes the W&B run;
  - a sidecar that ends at once: training completes (exit 0) and says so with the by-hand
    command; a sidecar that cannot be started: exit 2 naming logger.wandb_project;
  - the sidecar by hand on a finished file (one launch's rows), and without the wandb package
    (exit 3 saying how to install it).
"""

import glob
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time

from wandb.proto import wandb_internal_pb2

TRAIN, ROOT = sys.argv[1], sys.argv[2]
SIDECAR = os.path.join(ROOT, "tools", "wandb_sidecar.py")
failures = []
# The venv's python3 first on PATH: the sidecar's `#!/usr/bin/env python3` must find wandb.
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", WANDB_MODE="offline", WANDB_SILENT="true",
           PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
ONE_RANK = ["model.context_parallel_size=1", "model.dynamic_context_parallel=false",
            "model.max_seqlen_per_dp_cp_rank=256", "model.expert_model_parallel_size=1"]


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")


def train_command(*overrides):
    return [TRAIN, "--config", os.path.join(ROOT, "configs", "smoke", "tiny_mock.yaml"), *ONE_RANK,
            "logger.wandb_project=dyncp-test", *overrides]


def wandb_records(path):
    """The protobuf records of a .wandb file (LevelDB log format: 32 KiB blocks of chunks)."""
    data = open(path, "rb").read()
    ident, magic, _ = struct.unpack("<4sHB", data[:7])
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path}: not a W&B transaction log")
    block, position, pending = 32768, 7, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def offline_run(folder, run_id):
    """History rows by step, the run record and whether the run was finished."""
    found = glob.glob(os.path.join(folder, "wandb", f"offline-run-*-{run_id}", f"run-{run_id}.wandb"))
    check(len(found) == 1, f"one offline run {run_id} expected in {folder}, found {found}")
    history, run, finished = {}, None, False
    for record in wandb_records(found[0]) if found else []:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                   for item in record.history.item}
            history[row["_step"]] = row
        elif kind == "run":
            run = record.run
        elif kind == "exit":
            finished = True
    return history, run, finished


def rows_of(metrics, run_id):
    return [row for row in map(json.loads, open(metrics)) if row["run_id"] == run_id]


def run_id_of(output):
    match = re.search(r"run id (\d{8}-\d{6}-[0-9a-f]{6})", output)
    check(match is not None, "the run id line is missing")
    return match.group(1) if match else ""


with tempfile.TemporaryDirectory() as work:
    # 1. A run into a metrics file that already holds another launch's row.
    metrics = os.path.join(work, "m.jsonl")
    with open(metrics, "w") as f:
        f.write(json.dumps({"run_id": "20260101-000000-abcdef", "iteration": 1, "loss": 99.0}) + "\n")
    started = time.monotonic()
    result = subprocess.run(train_command("train.train_iters=4", "validation.eval_interval=2",
                                          "validation.eval_iters=1", f"logger.metrics_path={metrics}",
                                          "logger.wandb_exp_name=smoke", "logger.wandb_entity="),
                            capture_output=True, text=True, env=ENV)
    output = result.stdout + result.stderr
    print(f"train + sidecar: {time.monotonic() - started:.1f} s")
    if result.returncode != 0:
        print(output)
        sys.exit(f"dyncp-train exited {result.returncode}")
    check("W&B: sidecar pid" in output, "no sidecar start line")
    check("ended early" not in output and "still running" not in output, "the sidecar did not end well")
    run_id = run_id_of(output)
    rows = rows_of(metrics, run_id)
    history, run, finished = offline_run(os.path.join(work, "wandb"), run_id)
    check(finished, "the W&B run was not finished")
    check(run is not None and run.display_name == "smoke" and run.project == "dyncp-test",
          f"run record {run.display_name if run else None!r} in {run.project if run else None!r}")
    config = {item.key: json.loads(item.value_json) for item in run.config.update} if run else {}
    check(config.get("train", {}).get("train_iters") == 4 and "model" in config,
          f"the resolved configuration is not the run's config: {sorted(config)}")
    check(sorted(history) == [1, 2, 3, 4], f"W&B steps {sorted(history)}, expected 1..4 of this launch only")
    for row in rows:
        logged = history.get(row["iteration"], {})
        for key, name in (("loss", "lm loss"), ("lr", "learning-rate"), ("grad_norm", "grad-norm"),
                          ("tokens_per_s", "throughput/tokens_per_s")):
            check(logged.get(name) == row[key], f"step {row['iteration']}: {name} {logged.get(name)} vs {row[key]}")
        check(logged.get("time/straggler_wait_ms") == row["time_ms"]["straggler_wait"],
              f"step {row['iteration']}: straggler wait")
        check(logged.get("lm loss validation") == row.get("validation_loss"),
              f"step {row['iteration']}: validation loss {logged.get('lm loss validation')} vs "
              f"{row.get('validation_loss')}")
    check(os.path.isfile(os.path.join(work, "wandb", f"dyncp-{run_id}.yaml")), "no configuration file")

    # 2. SIGKILL: the pipe closes with the trainer, and the sidecar logs what was written.
    killed_metrics = os.path.join(work, "killed.jsonl")
    log_path = os.path.join(work, "killed.log")
    with open(log_path, "w") as log:
        trainer = subprocess.Popen(train_command("train.train_iters=100000", f"logger.metrics_path={killed_metrics}",
                                                 "logger.wandb_exp_name=killed",
                                                 f"logger.wandb_save_dir={work}/killed_wandb"),
                                   stdout=log, stderr=subprocess.STDOUT, env=ENV)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not os.path.exists(killed_metrics)
                                                or len(open(killed_metrics).readlines()) < 3):
            time.sleep(0.2)
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
    output = open(log_path).read()
    match = re.search(r"W&B: sidecar pid (\d+)", output)
    check(match is not None, "no sidecar pid in the killed run's log")
    if match:
        sidecar = int(match.group(1))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and os.path.exists(f"/proc/{sidecar}") and \
                open(f"/proc/{sidecar}/stat").read().split()[2] != "Z":
            time.sleep(0.2)
        check(time.monotonic() < deadline, "the sidecar did not end after the trainer was killed")
    run_id = run_id_of(output)
    rows = rows_of(killed_metrics, run_id)
    history, _, finished = offline_run(os.path.join(work, "killed_wandb"), run_id)
    check(len(rows) >= 3 and sorted(history) == [row["iteration"] for row in rows],
          f"killed run: W&B steps {sorted(history)} vs {len(rows)} rows written")
    check(finished, "killed run: the W&B run was not finished")

    # 3. A sidecar that ends at once, one that cannot start.
    result = subprocess.run(train_command("train.train_iters=3", f"logger.metrics_path={work}/early.jsonl",
                                          "logger.wandb_exp_name=early"),
                            capture_output=True, text=True, env=dict(ENV, DYNCP_WANDB_SIDECAR="/bin/false"))
    output = result.stdout + result.stderr
    check(result.returncode == 0 and "W&B sidecar ended early (exit status 1" in output and
          "log them later with: /bin/false" in output and
          len(open(f"{work}/early.jsonl").readlines()) == 3,
          f"early-ending sidecar: exit {result.returncode}: {output[-600:]}")
    result = subprocess.run(train_command("train.train_iters=3", f"logger.metrics_path={work}/none.jsonl",
                                          "logger.wandb_exp_name=none"),
                            capture_output=True, text=True,
                            env=dict(ENV, DYNCP_WANDB_SIDECAR=os.path.join(work, "no-such-sidecar")))
    output = result.stdout + result.stderr
    check(result.returncode == 2 and "logger.wandb_project" in output and "DYNCP_WANDB_SIDECAR" in output,
          f"missing sidecar: exit {result.returncode}: {output[-400:]}")

    # 4. By hand on a finished file: only the chosen launch's rows; without wandb: exit 3.
    first_id = json.loads(open(metrics).readlines()[1])["run_id"]
    result = subprocess.run([sys.executable, SIDECAR, metrics, "--project", "dyncp-test", "--name", "again",
                             "--run-id", first_id, "--dir", os.path.join(work, "by_hand")],
                            capture_output=True, text=True, env=ENV)
    check(result.returncode == 0 and "logged 4 rows" in result.stderr,
          f"by hand: exit {result.returncode}: {result.stderr[-400:]}")
    history, _, finished = offline_run(os.path.join(work, "by_hand"), first_id)
    check(sorted(history) == [1, 2, 3, 4] and finished, f"by hand: W&B steps {sorted(history)}")
    result = subprocess.run([sys.executable, "-S", SIDECAR, metrics, "--project", "p", "--name", "n"],
                            capture_output=True, text=True, env=ENV)
    check(result.returncode == 3 and "pip install wandb" in result.stderr,
          f"without wandb: exit {result.returncode}: {result.stderr[-300:]}")

if failures:
    sys.exit(f"{len(failures)} failure(s)")
print("wandb: the sidecar logs exactly each launch's rows to an offline W&B run, survives a killed "
      "trainer, and never stops training")
