#!/usr/bin/env bash
# A private Python virtual environment with the test tooling of tools/python/test-requirements.txt
# (tensorboard, matplotlib, transformers, wandb to read results back): created once, updated
# when the list changes.
#
#   tools/python-test-env.sh DIR                        -> DIR/bin/python, with torch
#   DYNCP_PYTHON_TORCH=0 tools/python-test-env.sh DIR   -> without torch (torch-requirements.txt)
#
# torch is for tools:hf_generate (transformers' generate on an HF export). PyPI's Linux wheel
# brings CUDA libraries: about 2.9 GB to download, 5.3 GB installed, measured at 1 min 52 s on
# the CI machine kind (2026-12-02); DYNCP_PYTHON_TORCH=0 leaves it out and the test then reports
# itself skipped. Needs the python3-venv package (tools/install-deps.sh) and PyPI; fails loudly
# without them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env_dir=$1
requirements=("$root/tools/python/test-requirements.txt")
if [[ ${DYNCP_PYTHON_TORCH:-1} == 1 ]]; then
  requirements+=("$root/tools/python/torch-requirements.txt")
fi
stamp=$env_dir/.requirements
wanted=$(cat "${requirements[@]}")
if [[ -x $env_dir/bin/python && -f $stamp ]] && [[ $(cat "$stamp") == "$wanted" ]]; then
  exit 0
fi
# A venv made with torch keeps it when DYNCP_PYTHON_TORCH=0 is set later: the stamp then names
# only what was asked for.
python3 -m venv "$env_dir" || {
  echo "python-test-env: cannot create a venv in $env_dir (apt-get install python3-venv)" >&2
  exit 1
}
pip_arguments=()
for file in "${requirements[@]}"; do pip_arguments+=(-r "$file"); done
"$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check "${pip_arguments[@]}" || {
  echo "python-test-env: pip could not install ${requirements[*]} (PyPI unreachable?)" >&2
  exit 1
}
printf '%s' "$wanted" >"$stamp"
