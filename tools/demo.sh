#!/usr/bin/env bash
# The README's first command: install what is missing, build (CPU), and run the demo job.
# Until the trainer lands, the demo job is a --dry-run of the demo recipe on 4 ranks: it
# validates the config, prints the parallel layout and the dynamic CP groups that would exist.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
DYNCP_BUILD_DIR=${DYNCP_BUILD_DIR:-$root/build} "$root/tools/build.sh" -DDYNCP_TESTS=OFF
build_dir=${DYNCP_BUILD_DIR:-$root/build}
recipe=$root/configs/demo/tiny_moe.yaml

"$build_dir/apps/dyncp-train/dyncp-train" --config "$recipe" --world-size 4 --dry-run
echo
echo "demo: the recipe validated; training lands with the trainer (see README)."
