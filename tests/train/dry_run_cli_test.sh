#!/usr/bin/env bash
# dyncp-train --dry-run from the command line, run by ctest:
#   dry_run_cli_test.sh DYNCP_TRAIN SOURCE_DIR CASE
# CASE: smoke (the mock recipe on 4 ranks: preview and memory table) | seed (the Qwen3.5 recipe,
# whose data file is absent here: exit 0 with a note). Exits non-zero on any mismatch.
set -euo pipefail
train=$1
source_dir=$2
case_name=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-dry-run-$case_name.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

expect() {
  if ! grep -qE -- "$1" "$work/out"; then
    echo "missing from the dry-run output: $1" >&2
    cat "$work/out" >&2
    exit 1
  fi
}

case $case_name in
  smoke)
    "$train" --config "$source_dir/configs/smoke/tiny_mock.yaml" --world-size 4 --dry-run \
      >"$work/out" 2>&1
    expect '^schedule preview \(first global batch, default_dynamic_cp\):'
    expect '^  global batch: +16 samples, [0-9]+ real tokens, [0-9]+ padded'
    expect '^  microbatches: +[1-9][0-9]* on a pool of 4 ranks'
    expect '^  groups by CP size: +cp[0-9]+:[0-9]+'
    expect '^  schedule check: +ok$'
    expect '^  static CP: +[0-9.e+-]+ ms'
    expect '^  lower bound: +[0-9.e+-]+ ms'
    expect '^memory estimate per rank'
    for item in weights gradients 'AdamW moments' 'saved activations' 'cross-entropy chunk' \
                'CP all-gather' 'EP dispatch' total; do
      expect "^  $item +[0-9]+\.[0-9] MiB"
    done
    expect '^  fits: [0-9.]+ MiB x 4 rank\(s\)'
    # The histogram accounts for every rank of every microbatch.
    python3 - "$work/out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
microbatches = int(re.search(r"microbatches: +(\d+) on a pool of (\d+)", text).group(1))
histogram = re.search(r"groups by CP size: +(.*)", text).group(1).split()
slots = sum(int(size) * int(count) for size, count in (h[2:].split(":") for h in histogram))
assert slots == 4 * microbatches, (histogram, microbatches)
print("smoke dry run: preview and memory table present,", " ".join(histogram))
PY
    ;;
  seed)
    "$train" --config "$source_dir/configs/qwen3_5_35b_a3b_dynamic_cp.yaml" --world-size 8 \
      --dry-run >"$work/out" 2>&1
    expect '^schedule preview: skipped: dataset.data_path .* does not exist'
    expect '^  total +[0-9]+\.[0-9] MiB'
    expect '^  fits\?: not checked'
    echo "seed dry run: exit 0, preview skipped with a note, memory table printed"
    ;;
  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
