#!/usr/bin/env bash
# Checks, on this Debian machine, that a GPU-check build (tools/gpu-check.sh, real mode) needs
# nothing of the system beyond what a GPU machine has: in a private mount namespace (root,
# unshare -m) the system's copies of the prefix's libraries and Open MPI's component and help
# folders are hidden behind bind mounts, then the build's dyncp-train trains 2 CPU steps with
# gpu-check.sh's environment (relocated Open MPI singleton). Prints ldd's libraries from outside
# the prefix. docs/cuda.md section 6.
#
#   tools/gpu-prefix-check.sh [BUILD_DIR]      # default build-gpu-check (prefix unpacked there)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=$(cd "${1:-$root/build-gpu-check}" && pwd)
prefix=$build_dir/gpu-prefix
train=$build_dir/apps/dyncp-train/dyncp-train
[[ -x $train && -d $prefix/usr ]] || { echo "gpu-prefix-check: run tools/gpu-check.sh first" >&2; exit 2; }
if [[ ${1:-} != --inside ]] && [[ -z ${DYNCP_PREFIX_CHECK_INSIDE:-} ]]; then
  DYNCP_PREFIX_CHECK_INSIDE=1 exec unshare -m "$0" "$build_dir"
fi
system=/usr/lib/x86_64-linux-gnu
multiarch=$prefix/usr/lib/x86_64-linux-gnu
empty=$(mktemp -d)
for folder in "$system/openmpi" "$system/pmix2" /usr/share/openmpi /etc/openmpi; do
  if [[ -d $folder ]]; then mount --bind "$empty" "$folder"; fi
done
# Every shared library the prefix carries, where the system has it too, except the files mount
# and grep load themselves (PCRE2 through libselinux): those stay visible, and say so.
tools_need=$(ldd "$(command -v mount)" "$(command -v grep)" | awk '$3 ~ /^\// {print $3}' | xargs -r readlink -f)
kept=()
for library in "$multiarch"/*.so.* "$multiarch"/openblas-pthread/*.so.*; do
  name=$(basename "$library")
  for candidate in "$system/$name" "$system/openblas-pthread/$name"; do
    [[ -e $candidate && ! -L $candidate ]] || continue
    if grep -qxF "$(readlink -f "$candidate")" <<<"$tools_need"; then
      kept+=("$name")
    else
      mount --bind /dev/null "$candidate"
    fi
  done
done
if [[ ${#kept[@]} -gt 0 ]]; then echo "left visible (mount and grep load them): ${kept[*]}"; fi
export LD_LIBRARY_PATH=$multiarch:$multiarch/openblas-pthread:$multiarch/openmpi/lib:${NCCL_HOME:-/usr/local/cuda}/lib
export OPAL_PREFIX=$prefix/usr OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_pml=ob1
export OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx PMIX_INSTALL_PREFIX=$prefix/usr
echo "libraries from outside the prefix:"
ldd "$train" | grep -v "$prefix" | sed 's/ (0x.*//'
OPENBLAS_NUM_THREADS=1 "$train" --config "$root/configs/smoke/tiny_mock.yaml" \
  model.context_parallel_size=1 model.expert_model_parallel_size=1 \
  model.dynamic_context_parallel=false model.max_seqlen_per_dp_cp_rank=256 \
  train.train_iters=2 train.global_batch_size=2 2>&1 | grep -E "iteration +2/" \
  || { echo "gpu-prefix-check: the trainer did not run from the prefix" >&2; exit 1; }
echo "gpu-prefix-check: passed (the system's copies hidden)"
