#!/usr/bin/env python3
"""Checks tools/compare_metrics.py, run by ctest:  compare_metrics_test.py TOOL SAMPLE_JSONL

A copy of the sample with every step twice as slow and losses off by 1e-6 relative must read as
a 2.00x speed-up of the sample over the copy and a 1.0e-06 loss difference; bad input exits 2."""

import json
import os
import subprocess
import sys
import tempfile

TOOL, SAMPLE = sys.argv[1], sys.argv[2]
with tempfile.TemporaryDirectory() as work:
    slow = os.path.join(work, "slow.jsonl")
    with open(slow, "w") as out:
        for line in open(SAMPLE):
            row = json.loads(line)
            row["elapsed_ms"] *= 2
            row["tokens_per_s"] /= 2
            row["loss"] *= 1 + 1e-6
            out.write(json.dumps(row) + "\n")
    result = subprocess.run([sys.executable, TOOL, SAMPLE, slow], capture_output=True, text=True)
    print(result.stdout + result.stderr)
    assert result.returncode == 0, result.returncode
    assert "speed-up of the first over the second: 2.00x" in result.stdout, result.stdout
    assert "largest relative loss difference over 12 common steps: 1.0e-06" in result.stdout
    assert "12 steps" in result.stdout
    bad = os.path.join(work, "bad.jsonl")
    open(bad, "w").write('{"iteration": 1}\nnot json\n')
    result = subprocess.run([sys.executable, TOOL, SAMPLE, bad], capture_output=True, text=True)
    assert result.returncode == 2 and "bad.jsonl:2" in result.stderr, (result.returncode, result.stderr)
    missing = subprocess.run([sys.executable, TOOL, SAMPLE, os.path.join(work, "none.jsonl")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "none.jsonl: cannot read" in missing.stderr, missing.stderr
print("compare_metrics: speed-up and loss difference of a doctored copy, bad input exits 2")
