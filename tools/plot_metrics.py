#!/usr/bin/env python3
"""Draw loss, learning rate and throughput from a dyncp-train metrics file into a PNG.

    python3 tools/plot_metrics.py METRICS.jsonl --out plot.png

METRICS.jsonl is what `logger.metrics_path` writes: one JSON object per optimizer step. The
picture has three stacked panels sharing the x axis (iteration): loss, lr and tokens/s (real
tokens per second). Skipped (NaN/inf) steps are written as null and leave a gap in the line;
an iteration that appears twice (a job resumed from an older checkpoint) is drawn from its last line.

Only the Python 3 standard library is used, so the script runs on a bare machine: the PNG is
encoded here with zlib and struct, lines are drawn with Bresenham's algorithm and text uses a
built-in 5x7 bitmap font. Exit codes: 0 written, 2 bad input (missing, empty or malformed file).
"""

import argparse
import json
import math
import struct
import sys
import zlib

# (JSON key, panel title, RGB of its line)
PANELS = (
    ("loss", "loss", (31, 119, 180)),
    ("lr", "lr", (214, 39, 40)),
    ("tokens_per_s", "tokens/s", (44, 160, 44)),
)

BACKGROUND = (255, 255, 255)
AXIS = (40, 40, 40)
GRID = (225, 225, 225)
TEXT = (20, 20, 20)


class InputError(Exception):
    """Bad metrics file; the message names the file and line."""


# ----------------------------------------------------------------------------------------------
# Reading the metrics


def _number_or_none(value, where, key):
    if value is None:
        return None  # nlohmann/json writes NaN and inf as null
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: '{key}' is {json.dumps(value)}; expected a number or null")
    return float(value) if math.isfinite(value) else None


def read_metrics(path):
    """Returns a list of dicts {iteration, loss, lr, tokens_per_s}, one per iteration, sorted."""
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
        missing = [key for key in ("iteration",) + tuple(p[0] for p in PANELS) if key not in record]
        if missing:
            raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
        iteration = record["iteration"]
        if isinstance(iteration, bool) or not isinstance(iteration, int):
            raise InputError(f"{where}: 'iteration' is {json.dumps(iteration)}; expected an integer")
        row = {"iteration": iteration}
        for key, _, _ in PANELS:
            row[key] = _number_or_none(record[key], where, key)
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no metrics (the file is empty; did the run take a step?)")
    # A job resumed from an older checkpoint appends steps it had already taken: the later
    # record of an iteration is the one the final model went through.
    latest = {row["iteration"]: row for row in rows}
    return [latest[iteration] for iteration in sorted(latest)]


# ----------------------------------------------------------------------------------------------
# Axis ticks and their labels


def nice_ticks(low, high, target_count=5):
    """Round tick values covering [low, high]; returns (ticks, step)."""
    if not high > low:
        pad = abs(low) * 0.05 if low != 0 else 1.0
        low, high = low - pad, high + pad
    raw_step = (high - low) / max(1, target_count - 1)
    magnitude = 10.0 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw_step)
    first = math.floor(low / step + 1e-9) * step
    last = math.ceil(high / step - 1e-9) * step
    count = int(round((last - first) / step)) + 1
    return [first + i * step for i in range(count)], step


def _decimals_to_resolve(step):
    """Fewest decimals that write multiples of step exactly (2 for 0.25, 0 for 500)."""
    for decimals in range(0, 16):
        scaled = step * 10 ** decimals
        if abs(scaled - round(scaled)) <= 1e-6 * scaled:
            return decimals
    return 16


def tick_labels(ticks, step):
    """Labels for one axis, all in the same style, using only the characters of the font.

    Plain decimals while the axis spans [0.01, 1e6); otherwise mantissa and exponent per tick
    (2.5e-4), with as many mantissa digits as the step needs.
    """
    largest = max(abs(tick) for tick in ticks)
    if 1e-2 <= largest < 1e6:
        decimals = _decimals_to_resolve(step)
        return ["0" if abs(tick) < step * 1e-6 else f"{tick:.{decimals}f}" for tick in ticks]
    exponents = {tick: int(math.floor(math.log10(abs(tick)) + 1e-9))
                 for tick in ticks if abs(tick) >= step * 1e-6}
    # One mantissa precision for the whole axis: 5.0e-5 next to 1.0e-4, not 5e-5.
    decimals = max(_decimals_to_resolve(step / 10 ** exponent) for exponent in exponents.values())
    return [f"{tick / 10 ** exponents[tick]:.{decimals}f}e{exponents[tick]}" if tick in exponents
            else "0" for tick in ticks]


# ----------------------------------------------------------------------------------------------
# A 5x7 bitmap font: each glyph is 7 rows of 5 bits, most significant bit on the left.

FONT = {
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E),
    "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F),
    "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02),
    "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E),
    "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E),
    "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    ".": (0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C),
    "-": (0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00),
    "/": (0x01, 0x01, 0x02, 0x04, 0x08, 0x10, 0x10),
    " ": (0x00,) * 7,
    "a": (0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F),
    "e": (0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E),
    "i": (0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E),
    "k": (0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12),
    "l": (0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "n": (0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11),
    "o": (0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E),
    "r": (0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10),
    "s": (0x00, 0x00, 0x0F, 0x10, 0x0E, 0x01, 0x1E),
    "t": (0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06),
}
GLYPH_WIDTH, GLYPH_HEIGHT, GLYPH_GAP = 5, 7, 1


class Canvas:
    """An RGB raster with the few drawing operations a line chart needs."""

    def __init__(self, width, height):
        self.width, self.height = width, height
        self.pixels = bytearray(BACKGROUND * (width * height))

    def set(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            offset = 3 * (y * self.width + x)
            self.pixels[offset:offset + 3] = bytes(color)

    def fill_rect(self, x0, y0, x1, y1, color):
        for y in range(max(0, y0), min(self.height, y1 + 1)):
            for x in range(max(0, x0), min(self.width, x1 + 1)):
                self.set(x, y, color)

    def line(self, x0, y0, x1, y1, color, thickness=1):
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        error = dx + dy
        reach = range(-(thickness // 2), thickness - thickness // 2)
        while True:
            for ox in reach:
                for oy in reach:
                    self.set(x0 + ox, y0 + oy, color)
            if x0 == x1 and y0 == y1:
                return
            doubled = 2 * error
            if doubled >= dy:
                error += dy
                x0 += sx
            if doubled <= dx:
                error += dx
                y0 += sy

    def text(self, x, y, string, color=TEXT, scale=2):
        """Draws string with its top-left corner at (x, y); unknown characters become blanks."""
        for index, char in enumerate(string):
            rows = FONT.get(char, FONT[" "])
            left = x + index * (GLYPH_WIDTH + GLYPH_GAP) * scale
            for row, bits in enumerate(rows):
                for column in range(GLYPH_WIDTH):
                    if bits & (0x10 >> column):
                        self.fill_rect(left + column * scale, y + row * scale,
                                       left + column * scale + scale - 1,
                                       y + row * scale + scale - 1, color)

    def encode_png(self):
        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        stride = 3 * self.width
        raw = b"".join(b"\x00" + bytes(self.pixels[y * stride:(y + 1) * stride])
                       for y in range(self.height))  # filter type 0 (none) on every row
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def text_width(string, scale=2):
    return len(string) * (GLYPH_WIDTH + GLYPH_GAP) * scale - GLYPH_GAP * scale


# ----------------------------------------------------------------------------------------------
# Layout


def draw_panel(canvas, box, rows, key, title, color, x_ticks, x_range, label_x_axis):
    left, top, right, bottom = box
    values = [row[key] for row in rows if row[key] is not None]
    if values:
        # Headroom above the data keeps the curve clear of the title in the top-right corner.
        low, high = min(values), max(values)
        y_ticks, y_step = nice_ticks(low, high + 0.25 * (high - low))
    else:
        y_ticks, y_step = [0.0, 1.0], 1.0
    y_low, y_high = y_ticks[0], y_ticks[-1]
    x_low, x_high = x_range

    def to_x(value):
        return left + round((value - x_low) / (x_high - x_low) * (right - left))

    def to_y(value):
        return bottom - round((value - y_low) / (y_high - y_low) * (bottom - top))

    x_step = x_ticks[1] - x_ticks[0]
    for tick, label in zip(x_ticks, tick_labels(x_ticks, x_step)):
        canvas.line(to_x(tick), top, to_x(tick), bottom, GRID)
        if label_x_axis:
            canvas.text(to_x(tick) - text_width(label) // 2, bottom + 8, label)
    for tick, label in zip(y_ticks, tick_labels(y_ticks, y_step)):
        canvas.line(left, to_y(tick), right, to_y(tick), GRID)
        canvas.text(left - 8 - text_width(label), to_y(tick) - GLYPH_HEIGHT, label)
    canvas.line(left, top, left, bottom, AXIS)
    canvas.line(left, bottom, right, bottom, AXIS)
    canvas.line(left, top, right, top, AXIS)
    canvas.line(right, top, right, bottom, AXIS)

    previous = None
    for row in rows:
        if row[key] is None:
            previous = None  # a skipped step breaks the line
            continue
        point = (to_x(row["iteration"]), to_y(row[key]))
        if previous is None:  # a marker, so a point between two gaps stays visible
            canvas.fill_rect(point[0] - 2, point[1] - 2, point[0] + 2, point[1] + 2, color)
        else:
            canvas.line(previous[0], previous[1], point[0], point[1], color, thickness=2)
        previous = point

    # The title sits in the panel's top-right corner with a colour key, on a blank box drawn
    # over the curve so it stays readable.
    title_left = right - 10 - text_width(title)
    canvas.fill_rect(title_left - 40, top + 4, right - 4, top + 24, BACKGROUND)
    canvas.fill_rect(title_left - 34, top + 14, title_left - 8, top + 16, color)
    canvas.text(title_left, top + 8, title)


def render(rows, width, panel_height):
    margin_left, margin_right, margin_top, gap, margin_bottom = 120, 24, 16, 34, 64
    height = margin_top + len(PANELS) * panel_height + (len(PANELS) - 1) * gap + margin_bottom
    canvas = Canvas(width, height)
    iterations = [row["iteration"] for row in rows]
    x_ticks, _ = nice_ticks(min(iterations), max(iterations), target_count=8)
    x_range = (x_ticks[0], x_ticks[-1])
    for index, (key, title, color) in enumerate(PANELS):
        top = margin_top + index * (panel_height + gap)
        box = (margin_left, top, width - margin_right, top + panel_height)
        draw_panel(canvas, box, rows, key, title, color, x_ticks, x_range,
                   label_x_axis=index == len(PANELS) - 1)
    label = "iteration"
    canvas.text((margin_left + width - margin_right - text_width(label)) // 2, height - 26, label)
    return canvas


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Plot loss, lr and tokens/s from a dyncp-train metrics JSONL file to a PNG.")
    parser.add_argument("metrics", help="the file logger.metrics_path wrote (one JSON line per step)")
    parser.add_argument("--out", help="PNG to write (default: METRICS with the suffix .png)")
    parser.add_argument("--width", type=int, default=960, help="image width in pixels (default 960)")
    parser.add_argument("--panel-height", type=int, default=220,
                        help="height of each of the three panels in pixels (default 220)")
    args = parser.parse_args(argv)
    if args.width < 400 or args.panel_height < 80:
        parser.error("--width must be at least 400 and --panel-height at least 80")
    out = args.out or (args.metrics[:-6] if args.metrics.endswith(".jsonl") else args.metrics) + ".png"

    try:
        rows = read_metrics(args.metrics)
    except InputError as error:
        print(f"plot_metrics: {error}", file=sys.stderr)
        return 2
    png = render(rows, args.width, args.panel_height).encode_png()
    try:
        with open(out, "wb") as handle:
            handle.write(png)
    except OSError as error:
        print(f"plot_metrics: {out}: cannot write the PNG: {error}", file=sys.stderr)
        return 2
    print(f"plot_metrics: {len(rows)} steps -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
