#!/usr/bin/env bash
# The dry run's static-CP suggestion for a dynamic recipe is itself a valid recipe:
#   static_suggestion.sh DYNCP_TRAIN RECIPE WORLD [key=value ...]
# Runs --dry-run, takes the overrides of the `static-CP baseline of this recipe:` line and
# checks that the recipe with them validates as static CP (dp_balanced) on the same world.
set -euo pipefail
train=$1 recipe=$2 world=$3
shift 3
report=$("$train" --config "$recipe" --world-size "$world" --dry-run "$@")
line=$(sed -n 's/^static-CP baseline of this recipe: //p' <<<"$report")
[[ -n $line ]] || { echo "no static-CP suggestion in the dry run:"; echo "$report"; exit 1; }
read -r -a suggested <<<"${line%%   (*}"
echo "suggestion: $line"
output=$("$train" --config "$recipe" --world-size "$world" --dry-run "$@" "${suggested[@]}" 2>&1) || {
  echo "$output"; echo "the suggested static layout does not validate"; exit 1; }
grep -Eq "packing scheduler: +dp_balanced" <<<"$output" || { echo "$output"; exit 1; }
grep -q "static-CP baseline of this recipe" <<<"$output" && { echo "still dynamic"; exit 1; }
echo "static suggestion validates on $world ranks: ${line#*   }"
