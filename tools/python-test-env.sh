#!/usr/bin/env bash
# A private Python virtual environment with the test tooling of tools/python/test-requirements.txt
# (tensorboard to read event files back): created once, updated when the list changes.
#
#   tools/python-test-env.sh DIR    -> DIR/bin/python
#
# Needs the python3-venv package (tools/install-deps.sh) and PyPI; fails loudly without them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env_dir=$1
requirements=$root/tools/python/test-requirements.txt
stamp=$env_dir/.requirements
if [[ -x $env_dir/bin/python && -f $stamp ]] && cmp -s "$requirements" "$stamp"; then
  exit 0
fi
python3 -m venv "$env_dir" || {
  echo "python-test-env: cannot create a venv in $env_dir (apt-get install python3-venv)" >&2
  exit 1
}
"$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" || {
  echo "python-test-env: pip could not install $requirements (PyPI unreachable?)" >&2
  exit 1
}
cp "$requirements" "$stamp"
