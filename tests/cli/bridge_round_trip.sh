#!/usr/bin/env bash
# --print-config --format bridge output, fed back through --config, gives the same resolved
# configuration as the recipe it was printed from (native --print-config of both must match).
# usage: bridge_round_trip.sh DYNCP_TRAIN RECIPE WORLD_SIZE
set -euo pipefail
binary=$1
recipe=$2
world=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$binary" --config "$recipe" --world-size "$world" --print-config --format bridge >"$scratch/bridge.yaml"
grep -q '^_target_: megatron.bridge.training.config.ConfigContainer' "$scratch/bridge.yaml"
"$binary" --config "$recipe" --world-size "$world" --print-config | tail -n +2 >"$scratch/first.yaml"
"$binary" --config "$scratch/bridge.yaml" --world-size "$world" --print-config | tail -n +2 \
  >"$scratch/second.yaml"
if ! diff -u "$scratch/first.yaml" "$scratch/second.yaml"; then
  echo "bridge_round_trip.sh: the Bridge dump did not load back to the same configuration" >&2
  exit 1
fi
echo "bridge round trip ok: $(grep -c '' "$scratch/bridge.yaml") lines"
