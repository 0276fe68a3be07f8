#!/usr/bin/env python3
"""Checks tools/plot_metrics.py, run by ctest:

    plot_metrics_test.py PLOT_METRICS_PY SAMPLE_METRICS_JSONL

The PNG is decoded here (standard library only) and checked: signature, chunk CRCs, IHDR size,
pixels actually drawn in each panel's colour, and the lr curve (a cosine decay in the sample)
going down from left to right. Bad inputs must exit 2 naming the file and line.
"""

import os
import struct
import subprocess
import sys
import tempfile
import zlib

PLOTTER, SAMPLE = sys.argv[1], sys.argv[2]
BACKGROUND = (255, 255, 255)
LOSS_BLUE, LR_RED, THROUGHPUT_GREEN = (31, 119, 180), (214, 39, 40), (44, 160, 44)
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")
    return condition


def run(*args):
    return subprocess.run([sys.executable, PLOTTER, *args], capture_output=True, text=True,
                          timeout=120)


def decode_png(path):
    """Returns (width, height, rows of RGB tuples) for 8-bit RGB, non-interlaced PNGs."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"bad PNG signature {data[:8]!r}"
    offset, chunks = 8, []
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length:offset + 12 + length])
        assert crc == zlib.crc32(kind + body), f"bad CRC in chunk {kind!r}"
        chunks.append((kind, body))
        offset += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", [c[0] for c in chunks]
    width, height, depth, color_type, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color_type, interlace) == (8, 2, 0), (depth, color_type, interlace)
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride = 1 + 3 * width
    assert len(raw) == height * stride, f"IDAT holds {len(raw)} bytes, expected {height * stride}"
    rows = []
    for y in range(height):
        line = raw[y * stride:(y + 1) * stride]
        assert line[0] == 0, f"row {y}: filter type {line[0]} (the encoder writes 0)"
        rows.append([tuple(line[1 + 3 * x:4 + 3 * x]) for x in range(width)])
    return width, height, rows


with tempfile.TemporaryDirectory(prefix="dyncp-plot-") as work:
    # The committed sample, default size: 960 wide, 3 panels of 220 + gaps and margins.
    png = os.path.join(work, "sample.png")
    result = run(SAMPLE, "--out", png)
    check(result.returncode == 0, f"sample: exit {result.returncode}: {result.stderr}")
    check("12 steps" in result.stdout, f"sample: stdout does not count 12 steps: {result.stdout!r}")
    width, height, rows = decode_png(png)
    check((width, height) == (960, 16 + 3 * 220 + 2 * 34 + 64), f"sample: IHDR {width}x{height}")

    counts = {}
    for row in rows:
        for pixel in row:
            counts[pixel] = counts.get(pixel, 0) + 1
    drawn = width * height - counts.get(BACKGROUND, 0)
    check(drawn > 0.02 * width * height, f"sample: only {drawn} non-background pixels (blank?)")
    for name, color in (("loss", LOSS_BLUE), ("lr", LR_RED), ("tokens/s", THROUGHPUT_GREEN)):
        # a curve across ~800 px, 2 px thick, plus its legend key: well over 1000 pixels
        check(counts.get(color, 0) > 1000, f"sample: {name} curve has {counts.get(color, 0)} pixels")

    # The sample's lr decays monotonically; the lowest red pixel of each column (the curve, not
    # the legend key above it) must move down the panel from left to right, by most of its height.
    lowest_red = [max(y for y in range(height) if rows[y][x] == LR_RED)
                  for x in range(width) if any(rows[y][x] == LR_RED for y in range(height))]
    # (2 px of slack: the marker on the first point reaches 2 px below the 2 px line.)
    rises = sum(1 for a, b in zip(lowest_red, lowest_red[1:]) if b < a - 2)
    check(rises == 0, f"sample: lr curve goes up {rises} times")
    # 1e-3 -> 1.7e-5 on an axis of at most 0 .. 1.5e-3 over 220 px: at least 140 px
    check(lowest_red[-1] - lowest_red[0] > 120, f"sample: lr curve spans only "
                                                f"{lowest_red[-1] - lowest_red[0]} px")

    # Size options reach the IHDR.
    small = os.path.join(work, "small.png")
    result = run(SAMPLE, "--out", small, "--width", "640", "--panel-height", "120")
    check(result.returncode == 0, f"small: exit {result.returncode}: {result.stderr}")
    width, height, _ = decode_png(small)
    check((width, height) == (640, 16 + 3 * 120 + 2 * 34 + 64), f"small: IHDR {width}x{height}")

    # A skipped step (null loss) leaves a gap instead of failing; a one-step run still plots.
    gap = os.path.join(work, "gap.jsonl")
    with open(gap, "w") as handle:
        for step, loss in enumerate(["6.2", "null", "6.1", "6.0"], start=1):
            handle.write(f'{{"iteration": {step}, "loss": {loss}, "lr": 1e-4, '
                         f'"tokens_per_s": {1000 + step}}}\n')
    result = run(gap, "--out", os.path.join(work, "gap.png"))
    check(result.returncode == 0, f"null loss: exit {result.returncode}: {result.stderr}")
    # A resumed job repeats iterations 2-3 in the same file: the plot must equal the one made
    # from the resumed run's lines alone.
    repeated = os.path.join(work, "repeated.jsonl")
    clean = os.path.join(work, "clean.jsonl")
    rows = [(1, 6.0, 1000), (2, 9.0, 1000), (3, 9.0, 1000), (2, 5.5, 1100), (3, 5.0, 1200), (4, 4.0, 1300)]
    for path, kept in ((repeated, rows), (clean, [rows[0]] + rows[3:])):
        with open(path, "w") as handle:
            for step, loss, speed in kept:
                handle.write(f'{{"iteration": {step}, "loss": {loss}, "lr": 1e-4, "tokens_per_s": {speed}}}\n')
    for path in (repeated, clean):
        result = run(path, "--out", path + ".png")
        check(result.returncode == 0, f"{path}: exit {result.returncode}: {result.stderr}")
    check(open(repeated + ".png", "rb").read() == open(clean + ".png", "rb").read(),
          "repeated iterations: the later lines do not replace the earlier ones")
    one = os.path.join(work, "one.jsonl")
    with open(one, "w") as handle:
        handle.write('{"iteration": 7, "loss": 3.5, "lr": 0.0, "tokens_per_s": 10}\n')
    result = run(one, "--out", os.path.join(work, "one.png"))
    check(result.returncode == 0, f"one step: exit {result.returncode}: {result.stderr}")

    # Bad input: exit 2, a message naming the file (and line), and no PNG written.
    sample_lines = open(SAMPLE).read().splitlines()
    bad_cases = {
        "missing": (None, "missing.jsonl: no such file"),
        "empty": ("", "empty.jsonl: no metrics"),
        "blank_lines": ("\n\n  \n", "blank_lines.jsonl: no metrics"),
        "truncated": ("\n".join(sample_lines[:2] + [sample_lines[2][:40]]) + "\n",
                      "truncated.jsonl:3: not valid JSON"),
        "missing_field": (sample_lines[0] + '\n{"iteration": 2, "lr": 1e-3, "tokens_per_s": 5}\n',
                          "missing_field.jsonl:2: missing field(s) loss"),
        "string_loss": ('{"iteration": 1, "loss": "high", "lr": 1e-3, "tokens_per_s": 5}\n',
                        "string_loss.jsonl:1: 'loss' is \"high\""),
        "not_object": ("[1, 2, 3]\n", "not_object.jsonl:1: expected a JSON object"),
        "float_iteration": ('{"iteration": 1.5, "loss": 1, "lr": 1, "tokens_per_s": 1}\n',
                            "float_iteration.jsonl:1: 'iteration' is 1.5"),
    }
    for name, (content, expected) in bad_cases.items():
        path = os.path.join(work, f"{name}.jsonl")
        if content is not None:
            with open(path, "w") as handle:
                handle.write(content)
        out = os.path.join(work, f"{name}.png")
        result = run(path, "--out", out)
        check(result.returncode == 2, f"{name}: exit {result.returncode}, expected 2")
        check(expected in result.stderr, f"{name}: stderr {result.stderr!r} lacks {expected!r}")
        check(not os.path.exists(out), f"{name}: a PNG was written for bad input")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("plot_metrics: sample PNG decoded (signature, CRCs, IHDR, 3 curves, decaying lr); "
      f"{len(bad_cases)} bad inputs exit 2 with file:line")
