#!/usr/bin/env bash
# --print-config output, fed back through --config, prints the same configuration.
# usage: round_trip.sh DYNCP_TRAIN RECIPE WORLD_SIZE [OVERRIDES...]
set -euo pipefail
binary=$1
recipe=$2
world=$3
shift 3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$binary" --config "$recipe" --world-size "$world" --print-config "$@" >"$scratch/first.yaml"
"$binary" --config "$scratch/first.yaml" --world-size "$world" --print-config >"$scratch/second.yaml"
if ! diff -u "$scratch/first.yaml" "$scratch/second.yaml"; then
  echo "round_trip.sh: the printed configuration changed when fed back" >&2
  exit 1
fi
grep -q '^model:' "$scratch/first.yaml"
echo "round trip ok: $(wc -l <"$scratch/first.yaml") lines"
