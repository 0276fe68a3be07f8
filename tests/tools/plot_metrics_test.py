#!/usr/bin/env python3
"""Checks tools/plot_metrics.py, run by ctest with the test venv's python (matplotlib):

    plot_metrics_test.py PLOT_METRICS_PY SAMPLE_METRICS_JSONL

The PNG is read back with matplotlib and checked: size from the options, each panel's curve
drawn in its colour, the lr curve (a cosine decay in the sample) going down from left to right,
a resumed launch marked, repeated iterations drawn from their last line. Bad inputs must exit 2
naming the file and line; without matplotlib the tool exits 1 saying how to install it.
"""

import os
import subprocess
import sys
import tempfile

import matplotlib.image
import numpy

PLOTTER, SAMPLE = sys.argv[1], sys.argv[2]
LOSS_BLUE, LR_RED, GRAD_PURPLE, THROUGHPUT_GREEN = (31, 119, 180), (214, 39, 40), (148, 103, 189), (44, 160, 44)
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL: {message}")
    return condition


def run(*args, python=(sys.executable,)):
    return subprocess.run([*python, PLOTTER, *args], capture_output=True, text=True, timeout=120)


def read_png(path):
    """(width, height, RGB array of uint8 [height, width, 3])."""
    image = numpy.rint(matplotlib.image.imread(path)[:, :, :3] * 255).astype(numpy.uint8)
    return image.shape[1], image.shape[0], image


def mask(image, color):
    return numpy.all(image == numpy.array(color, dtype=numpy.uint8), axis=2)


with tempfile.TemporaryDirectory(prefix="dyncp-plot-") as work:
    # The committed sample, default size: 960 wide, 5 panels of 220 plus 60.
    png = os.path.join(work, "sample.png")
    result = run(SAMPLE, "--out", png)
    check(result.returncode == 0, f"sample: exit {result.returncode}: {result.stderr}")
    check("12 steps" in result.stdout, f"sample: stdout does not count 12 steps: {result.stdout!r}")
    width, height, image = read_png(png)
    check((width, height) == (960, 5 * 220 + 60), f"sample: size {width}x{height}")
    for name, color in (("loss", LOSS_BLUE), ("lr", LR_RED), ("grad norm", GRAD_PURPLE),
                        ("tokens/s", THROUGHPUT_GREEN)):
        drawn = int(mask(image, color).sum())
        check(drawn > 300, f"sample: {name} curve has {drawn} pixels")
    # The sample's lr decays: the red curve's lowest pixel per column moves down the panel.
    red = mask(image, LR_RED)
    columns = [x for x in range(width) if red[:, x].any()]
    lowest = [int(numpy.nonzero(red[:, x])[0].max()) for x in columns]
    check(len(columns) > 500 and lowest[-1] - lowest[0] > 100,
          f"sample: lr curve over {len(columns)} columns falls {lowest[-1] - lowest[0]} px")

    small = os.path.join(work, "small.png")
    result = run(SAMPLE, "--out", small, "--width", "640", "--panel-height", "120")
    check(result.returncode == 0, f"small: exit {result.returncode}: {result.stderr}")
    width, height, _ = read_png(small)
    check((width, height) == (640, 5 * 120 + 60), f"small: size {width}x{height}")

    # A second launch (another run_id) appending to the file is marked with a line.
    lines = open(SAMPLE).read().splitlines()
    same, resumed = os.path.join(work, "same.jsonl"), os.path.join(work, "resumed.jsonl")
    with open(same, "w") as a, open(resumed, "w") as b:
        for index, line in enumerate(lines):
            a.write(line[:-1] + ', "run_id": "first"}\n')
            b.write(line[:-1] + f', "run_id": "{"first" if index < 6 else "second"}"}}\n')
    for path in (same, resumed):
        check(run(path, "--out", path + ".png").returncode == 0, f"{path}: not plotted")
    check(open(same + ".png", "rb").read() != open(resumed + ".png", "rb").read(),
          "a new run_id is not marked in the plot")
    # Validation loss points are drawn (orange).
    with_validation = os.path.join(work, "validation.jsonl")
    with open(with_validation, "w") as handle:
        for index, line in enumerate(lines):
            handle.write(line[:-1] + (', "validation_loss": 6.0}\n' if index % 4 == 3 else "}\n"))
    check(run(with_validation, "--out", with_validation + ".png").returncode == 0, "validation plot")
    _, _, image = read_png(with_validation + ".png")
    orange = int(mask(image, (255, 127, 14)).sum())
    check(orange > 50, f"validation loss: {orange} orange pixels")

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

    # Without matplotlib (no site-packages): exit 1 naming how to get it, after reading the file.
    result = run(SAMPLE, "--out", os.path.join(work, "none.png"), python=(sys.executable, "-S"))
    check(result.returncode == 1 and "needs matplotlib" in result.stderr,
          f"no matplotlib: exit {result.returncode}, {result.stderr!r}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("plot_metrics: sample PNG read back (size, 4 curves, decaying lr, resume marked, "
      f"validation points); {len(bad_cases)} bad inputs exit 2 with file:line")
