#!/usr/bin/env bash
# Enforce the layer table (docs/architecture.md §2): a file under lib/<layer>/ may include
# "<other>/..." only for layers below it. Prints every violation; exits 1 if there is any.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
layers=(core config packing data ops model dist parallel train)
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done
status=0
for layer in "${layers[@]}"; do
  [[ -d "$root/lib/$layer" ]] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    included=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$line")
    [[ -n "${rank[$included]+x}" ]] || continue
    # dist is a sibling of packing/data/ops/model: it may use core and config only.
    allowed=1
    if (( rank[$included] > rank[$layer] )); then allowed=0; fi
    if [[ $layer == dist && $included != core && $included != config && $included != dist ]]; then allowed=0; fi
    if (( allowed == 0 )); then
      echo "layering violation: $file includes \"$included/...\" (lib/$layer may not use $included)"
      status=1
    fi
  done < <(grep -rEn '#include "[a-z_]+/' "$root/lib/$layer" --include='*.hpp' --include='*.cpp' --include='*.h' || true)
done
exit $status
