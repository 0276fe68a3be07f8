#!/usr/bin/env python3
"""Plot a dyncp-train metrics file (logger.metrics_path) with matplotlib.

    python3 tools/plot_metrics.py METRICS.jsonl [--out plot.png] [--width 960] [--panel-height 220]

Five panels sharing the x axis (iteration): training loss with the validation loss of the
evaluation steps, learning rate, gradient norm, tokens/s, and the CP group sizes the scheduler
chose over time (a stacked area: how many groups of each size each step ran). Skipped (NaN/inf)
steps are written as null and leave a gap; an iteration that appears twice (a job resumed from
an older checkpoint appending to the same file) is drawn from its last line, and the first step
of every later launch (a new run_id) is marked with a dotted vertical line.

Needs matplotlib (PyPI, or Debian's python3-matplotlib). Exit codes: 0 written, 2 bad input
(missing, empty or malformed file), 1 matplotlib missing.
"""

import argparse
import json
import math
import sys

REQUIRED = ("iteration", "loss", "lr", "tokens_per_s")
OPTIONAL = ("grad_norm", "validation_loss")


class InputError(Exception):
    """Bad metrics file; the message names the file and line."""


def _number_or_none(value, where, key):
    if value is None:
        return None  # nlohmann/json writes NaN and inf as null
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: '{key}' is {json.dumps(value)}; expected a number or null")
    return float(value) if math.isfinite(value) else None


def read_metrics(path):
    """One dict per iteration, sorted: the numbers above, group_sizes {size: count}, run_id."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.readlines()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (pass the file logger.metrics_path wrote)")
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a metrics JSONL file")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}")

    rows = []
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: not valid JSON ({error.msg} at column {error.colno}); "
                             "each line must be one JSON object")
        if not isinstance(record, dict):
            raise InputError(f"{where}: expected a JSON object per line, got {type(record).__name__}")
        missing = [key for key in REQUIRED if key not in record]
        if missing:
            raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
        iteration = record["iteration"]
        if isinstance(iteration, bool) or not isinstance(iteration, int):
            raise InputError(f"{where}: 'iteration' is {json.dumps(iteration)}; expected an integer")
        row = {"iteration": iteration, "run_id": record.get("run_id")}
        for key in REQUIRED[1:] + OPTIONAL:
            row[key] = _number_or_none(record.get(key), where, key)
        groups = record.get("group_sizes", {})
        if not isinstance(groups, dict) or not all(
                str(size).isdigit() and isinstance(count, int) for size, count in groups.items()):
            raise InputError(f"{where}: 'group_sizes' is {json.dumps(groups)}; expected "
                             "{\"size\": count, ...}")
        row["group_sizes"] = {int(size): count for size, count in groups.items()}
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no metrics (the file is empty; did the run take a step?)")
    # A job resumed from an older checkpoint appends steps it had already taken: the later
    # record of an iteration is the one the final model went through.
    latest = {row["iteration"]: row for row in rows}
    return [latest[iteration] for iteration in sorted(latest)]


def render(rows, out, width, panel_height):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dpi = 100
    panels = 5
    figure, axes = plt.subplots(panels, 1, sharex=True, dpi=dpi,
                                figsize=(width / dpi, (panels * panel_height + 60) / dpi))
    steps = [row["iteration"] for row in rows]

    def series(key):
        return [math.nan if row[key] is None else row[key] for row in rows]

    loss_axis, lr_axis, grad_axis, speed_axis, group_axis = axes
    loss_axis.plot(steps, series("loss"), color="tab:blue", label="training loss")
    evaluated = [(row["iteration"], row["validation_loss"]) for row in rows
                 if row["validation_loss"] is not None]
    if evaluated:
        loss_axis.plot(*zip(*evaluated), color="tab:orange", marker="o", label="validation loss")
    loss_axis.set_ylabel("loss (nats/token)")
    loss_axis.legend(loc="upper right")
    lr_axis.plot(steps, series("lr"), color="tab:red")
    lr_axis.set_ylabel("learning rate")
    grad_axis.plot(steps, series("grad_norm"), color="tab:purple")
    grad_axis.set_ylabel("grad norm")
    speed_axis.plot(steps, series("tokens_per_s"), color="tab:green")
    speed_axis.set_ylabel("tokens/s")
    sizes = sorted({size for row in rows for size in row["group_sizes"]})
    if sizes:
        group_axis.stackplot(steps, [[row["group_sizes"].get(size, 0) for row in rows]
                                     for size in sizes], labels=[f"cp{size}" for size in sizes])
        group_axis.legend(loc="upper right", ncol=len(sizes))
    group_axis.set_ylabel("groups by CP size")
    group_axis.set_xlabel("iteration")
    # Where a later launch (resume) took over.
    for previous, row in zip(rows, rows[1:]):
        if row["run_id"] and previous["run_id"] and row["run_id"] != previous["run_id"]:
            for axis in axes:
                axis.axvline(row["iteration"], color="grey", linestyle=":")
    for axis in axes:
        axis.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=dpi)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("metrics", help="the file logger.metrics_path wrote (one JSON line per step)")
    parser.add_argument("--out", help="PNG to write (default: METRICS with the suffix .png)")
    parser.add_argument("--width", type=int, default=960, help="image width in pixels (default 960)")
    parser.add_argument("--panel-height", type=int, default=220,
                        help="height of each of the five panels in pixels (default 220)")
    args = parser.parse_args(argv)
    if args.width < 400 or args.panel_height < 80:
        parser.error("--width must be at least 400 and --panel-height at least 80")
    out = args.out or (args.metrics[:-6] if args.metrics.endswith(".jsonl") else args.metrics) + ".png"
    try:
        rows = read_metrics(args.metrics)
    except InputError as error:
        print(f"plot_metrics: {error}", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot_metrics: needs matplotlib (pip install matplotlib, or apt-get install "
              "python3-matplotlib)", file=sys.stderr)
        return 1
    try:
        render(rows, out, args.width, args.panel_height)
    except OSError as error:
        print(f"plot_metrics: {out}: cannot write the PNG: {error}", file=sys.stderr)
        return 2
    print(f"plot_metrics: {len(rows)} steps -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
