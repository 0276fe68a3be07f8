#!/usr/bin/env bash
# Install the Debian packages dyncp-train builds and tests against.
# Idempotent: installs only what is missing, runs `apt-get update` at most once.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config python3 python3-venv
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev catch2 nlohmann-json3-dev
  libopenblas-dev openmpi-bin libopenmpi-dev
  libpcre2-dev libutf8proc-dev libboost-context-dev libxxhash-dev
  clang libclang-rt-dev universal-ctags
)
# Slurm pieces are needed only by the one-node Slurm launch test.
if [[ "${DYNCP_WITH_SLURM:-1}" == 1 ]]; then
  packages+=(slurmctld slurmd slurm-client munge)
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
