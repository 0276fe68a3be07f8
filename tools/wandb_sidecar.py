#!/usr/bin/env python3
"""Log a dyncp-train metrics file (logger.metrics_path) to Weights & Biases.

dyncp-train starts this itself on rank 0 when logger.wandb_project is set (docs/operations.md,
"Weights & Biases"); it can also be run by hand on a finished file, for example on a machine
that reaches W&B when the compute nodes do not:

    python3 tools/wandb_sidecar.py METRICS.jsonl --project P --name N [--entity E]
        [--dir DIR] [--run-id RUN_ID] [--config RESOLVED.yaml] [--follow]

Each row becomes one W&B step (its `iteration`), under the names the TensorBoard writer uses
(`lm loss`, `learning-rate`, `grad-norm`, `batch-size`, `lm loss validation`, `throughput/...`,
`memory/peak_mib`, `time/..._ms`) plus the other numbers of the row (`cp-groups/cpN`,
`tokens/...`, ...). --run-id keeps only that launch's rows (a resumed job appends to the same
file) and becomes the W&B run id, so logging the same launch twice continues one W&B run.
--config attaches a resolved configuration (the YAML dyncp-train prints) as the run's config.

--follow (how dyncp-train runs it): keep reading rows as they are appended until standard
input closes, which dyncp-train does after its last row (and the kernel does if it dies), then
log what is left and finish. SIGINT, SIGTERM, SIGHUP and SIGUSR1 are ignored then: the job's
signals are the trainer's to act on, and the closing pipe ends the sidecar.

WANDB_MODE=offline writes the run under DIR/wandb/ for `wandb sync` later. Needs the `wandb`
package (pip install wandb). Exit codes: 0 logged, 2 bad usage or input, 3 wandb missing,
1 W&B failed.
"""

import argparse
import json
import math
import os
import select
import signal
import sys

# JSONL key -> W&B name, as the TensorBoard writer (lib/train/tensorboard_writer.cpp) names them.
SCALARS = {
    "loss": "lm loss",
    "lr": "learning-rate",
    "grad_norm": "grad-norm",
    "global_batch_size": "batch-size",
    "validation_loss": "lm loss validation",
    "tokens_per_s": "throughput/tokens_per_s",
    "tflops_per_device": "throughput/tflops_per_device",
    "elapsed_ms": "time/step_ms",
    "elapsed_ms_min": "time/step_ms_min",
    "elapsed_ms_max": "time/step_ms_max",
    "eta_s": "time/eta_s",
    "consumed_samples": "tokens/consumed_samples",
    "loss_tokens": "tokens/loss_tokens",
    "real_tokens": "tokens/real_tokens",
    "padded_tokens": "tokens/padded_tokens",
    "microbatches": "schedule/microbatches",
    "comm_bytes": "schedule/comm_bytes",
    "dropped_samples": "data/dropped_samples",
    "skipped_steps": "data/skipped_steps",
}
NOT_LOGGED = ("run_id", "iteration", "group_sizes", "time_ms", "peak_memory_bytes")


class InputError(Exception):
    """Bad metrics row; the message names the file and line."""


def wandb_row(record):
    """The W&B values of one metrics row (nulls, i.e. non-finite numbers, left out)."""
    values = {}

    def put(name, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            values[name] = value

    for key, name in SCALARS.items():
        put(name, record.get(key))
    if "peak_memory_bytes" in record:
        put("memory/peak_mib", record["peak_memory_bytes"] / (1024.0 * 1024.0))
    for phase, milliseconds in (record.get("time_ms") or {}).items():
        put(f"time/{phase}_ms", milliseconds)
    for size, count in (record.get("group_sizes") or {}).items():
        put(f"cp-groups/cp{size}", count)
    for key, value in record.items():
        if key not in SCALARS and key not in NOT_LOGGED:
            put(f"other/{key}", value)
    return values


class RowReader:
    """Complete JSONL rows appended to a file since the last call (a partial last line waits)."""

    def __init__(self, path, run_id):
        self.path, self.run_id = path, run_id
        self.offset, self.line_number, self.pending = 0, 0, b""

    def new_rows(self):
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []  # dyncp-train creates it before starting the sidecar; by hand: caught in main
        self.offset += len(data)
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        rows = []
        for line in lines:
            self.line_number += 1
            if not line.strip():
                continue
            where = f"{self.path}:{self.line_number}"
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise InputError(f"{where}: not a JSON metrics row ({error})")
            if not isinstance(record, dict) or not isinstance(record.get("iteration"), int):
                raise InputError(f"{where}: a metrics row needs an integer 'iteration'")
            if self.run_id is None or record.get("run_id") == self.run_id:
                rows.append(record)
        return rows


def read_config(path):
    if path is None:
        return None
    import yaml  # a dependency of wandb

    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def wait_for_more(seconds):
    """True while standard input is open: sleeps until it closes or `seconds` pass."""
    readable, _, _ = select.select([sys.stdin.buffer], [], [], seconds)
    if not readable:
        return True
    return os.read(sys.stdin.fileno(), 4096) != b""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("metrics", help="the JSONL file logger.metrics_path names")
    parser.add_argument("--project", required=True)
    parser.add_argument("--name", required=True, help="the W&B run name (logger.wandb_exp_name)")
    parser.add_argument("--entity", default=None)
    parser.add_argument("--dir", default=None, help="W&B's local files (logger.wandb_save_dir)")
    parser.add_argument("--run-id", default=None, help="log only this dyncp-train launch's rows")
    parser.add_argument("--config", default=None, help="resolved configuration YAML")
    parser.add_argument("--follow", action="store_true",
                        help="log rows as they come until standard input closes")
    parser.add_argument("--poll-seconds", type=float, default=1.0)
    args = parser.parse_args()
    if args.follow:
        for signal_number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signal_number, signal.SIG_IGN)
    if not args.follow and not os.path.isfile(args.metrics):
        print(f"wandb_sidecar: {args.metrics}: no such file", file=sys.stderr)
        return 2
    try:
        import wandb
    except ImportError as error:
        print(f"wandb_sidecar: needs the wandb package ({error}): pip install wandb", file=sys.stderr)
        return 3

    try:
        config = read_config(args.config)
    except (OSError, ValueError) as error:
        print(f"wandb_sidecar: {args.config}: cannot read the configuration: {error}", file=sys.stderr)
        return 2
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    reader = RowReader(args.metrics, args.run_id)
    run = wandb.init(project=args.project, entity=args.entity, name=args.name, dir=args.dir,
                     id=args.run_id, resume="allow" if args.run_id else None, config=config)
    progress = {"step": None, "rows": 0}

    def log(records):
        for record in records:
            step = record["iteration"]
            if progress["step"] is not None and step <= progress["step"]:
                continue  # W&B steps only grow; a repeated iteration was logged already
            run.log(wandb_row(record), step=step)
            progress["step"], progress["rows"] = step, progress["rows"] + 1

    try:
        log(reader.new_rows())
        while args.follow and wait_for_more(args.poll_seconds):
            log(reader.new_rows())
        log(reader.new_rows())  # what came between the last read and the end of the input
    except InputError as error:
        print(f"wandb_sidecar: {error}", file=sys.stderr)
        run.finish(exit_code=2)
        return 2
    run.finish()
    print(f"wandb_sidecar: logged {progress['rows']} rows of {args.metrics} to {args.project}/{args.name}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
