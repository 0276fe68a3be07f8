#!/usr/bin/env bash
# A private Python virtual environment with the test tooling of tools/python/test-requirements.txt
# (tensorboard, matplotlib, transformers, wandb to read results back): created once, updated
# when the list changes.
#
#   tools/python-test-env.sh DIR                        -> DIR/bin/python
#   DYNCP_PYTHON_TORCH=1 tools/python-test-env.sh DIR   -> also torch (torch-requirements.txt)
#
# torch is opt-in: PyPI's Linux wheel brings CUDA libraries (about 2.9 GB), too much for CI;
# without it tools:hf_generate reports itself skipped. Needs the python3-venv package
# (tools/install-deps.sh) and PyPI; fails loudly without them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env_dir=$1
requirements=("$root/tools/python/test-requirements.txt")
if [[ ${DYNCP_PYTHON_TORCH:-0} == 1 ]]; then
  requirements+=("$root/tools/python/torch-requirements.txt")
fi
stamp=$env_dir/.requirements
wanted=$(cat "${requirements[@]}")
if [[ -x $env_dir/bin/python && -f $stamp ]] && [[ $(cat "$stamp") == "$wanted" ]]; then
  exit 0
fi
# A venv made with torch keeps it when DYNCP_PYTHON_TORCH is not set again: the stamp then
# names only what was asked for.
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
