#!/usr/bin/env python3
"""Compare two dyncp-train metrics files, e.g. a dynamic-CP run and its static-CP baseline:

    python3 tools/compare_metrics.py DYNAMIC.jsonl STATIC.jsonl

Prints, for each file, the steps, the mean loss of the last 5 steps, the median step time and
the median tokens/s; then the speed-up of the first over the second (median step time ratio)
and the largest relative loss difference over the iterations both ran (the same global batches
give the same losses on any layout, to fp32 round-off). Standard library only. Exit codes:
0 compared, 2 bad input (missing or malformed file, no common iterations).
"""

import json
import statistics
import sys


def read(path):
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as error:
        raise SystemExit(f"compare_metrics: {path}: cannot read: {error.strerror}") from None
    rows = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows[int(row["iteration"])] = row  # a resumed run's later line wins
        except (ValueError, KeyError, TypeError) as error:
            raise SystemExit(f"compare_metrics: {path}:{number}: not a metrics line ({error})")
    if not rows:
        raise SystemExit(f"compare_metrics: {path}: no metrics")
    return rows


def summary(rows):
    steps = sorted(rows)
    losses = [rows[s]["loss"] for s in steps if rows[s]["loss"] is not None]
    # The first step pays one-time costs (group creation, arenas): left out of the medians.
    timed = steps[1:] or steps
    return {"steps": len(steps), "last_loss": statistics.fmean(losses[-5:]) if losses else None,
            "step_ms": statistics.median(rows[s]["elapsed_ms"] for s in timed),
            "tokens_per_s": statistics.median(rows[s]["tokens_per_s"] for s in timed)}


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        first, second = read(argv[1]), read(argv[2])
    except SystemExit as error:
        print(error, file=sys.stderr)
        return 2
    for path, rows in ((argv[1], first), (argv[2], second)):
        s = summary(rows)
        print(f"{path}: {s['steps']} steps, last-5 loss {s['last_loss']:.5f}, median step "
              f"{s['step_ms']:.1f} ms, median {s['tokens_per_s']:.0f} tokens/s")
    common = sorted(set(first) & set(second))
    if not common:
        print("compare_metrics: the files share no iteration", file=sys.stderr)
        return 2
    worst = max(abs(first[i]["loss"] - second[i]["loss"]) / abs(second[i]["loss"])
                for i in common if first[i]["loss"] is not None and second[i]["loss"] is not None)
    speedup = summary(second)["step_ms"] / summary(first)["step_ms"]
    print(f"speed-up of the first over the second: {speedup:.2f}x (median step time); "
          f"largest relative loss difference over {len(common)} common steps: {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
