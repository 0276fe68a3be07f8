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

# cuDNN's fused attention (docs/cuda.md): cudnn-frontend, NVIDIA's header-only C++ API, from
# its pinned PyPI wheel, unpacked into the build folder (never into the tree). cuDNN itself
# comes with the CUDA toolkit here (/usr/local/cuda: cudnn.h, libcudnn.so.9). Without
# network the build still works and model.attention_backend=fused is refused with the reason.
install_cudnn_frontend() {
  local version=1.32.0
  local dest=${DYNCP_BUILD_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build}/third_party/cudnn-frontend
  [[ -f $dest/include/cudnn_frontend.h && -f $dest/VERSION && $(cat "$dest/VERSION") == "$version" ]] && return 0
  command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || return 0  # no CUDA: not needed
  local tmp
  tmp=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
       --implementation cp --abi cp311 --platform manylinux_2_28_x86_64 \
       "nvidia-cudnn-frontend==$version" -d "$tmp" >/dev/null 2>&1; then
    rm -rf "$dest" && mkdir -p "$dest"
    python3 - "$tmp"/nvidia_cudnn_frontend-*.whl "$dest" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith("include/"):
            wheel.extract(name, sys.argv[2])
PY
    echo "$version" >"$dest/VERSION"
    echo "install-deps: cudnn-frontend $version headers in $dest/include"
  else
    echo "install-deps: could not download nvidia-cudnn-frontend==$version (no network?):" \
         "building without cuDNN's fused attention" >&2
  fi
  rm -rf "$tmp"
}
install_cudnn_frontend

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
