#!/usr/bin/env bash
# Installs what TransformerOpt needs to build and test, and nothing it already has.
# Idempotent: a second run only checks and returns in about a second.
set -euo pipefail

APT_PACKAGES=(cmake ninja-build g++ git python3-pip
  libbenchmark-dev libgtest-dev libfmt-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev)
# The cuDNN frontend is header-only; its PyPI wheel ships the C++ headers. Pinned: 1.23 builds with
# cuDNN 9.19 headers here and runs against cuDNN 9.14 and 9.19 on the device.
CUDNN_FRONTEND_VERSION=1.23.0
PY_PACKAGES=("nvidia-cudnn-frontend==${CUDNN_FRONTEND_VERSION}" "matplotlib>=3.6")

missing_apt=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$p")
done
if ((${#missing_apt[@]})); then
  echo "setup: installing ${missing_apt[*]}"
  SUDO=""; [[ $(id -u) != 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('nvidia-cudnn-frontend') != '${CUDNN_FRONTEND_VERSION}')" 2>/dev/null; then
  echo "setup: installing nvidia-cudnn-frontend ${CUDNN_FRONTEND_VERSION} (headers only, --no-deps)"
  "$PY" -m pip install -q --disable-pip-version-check --no-deps "${PY_PACKAGES[0]}"
fi
if ! "$PY" -c "import matplotlib" 2>/dev/null; then
  echo "setup: installing matplotlib"
  "$PY" -m pip install -q --disable-pip-version-check "${PY_PACKAGES[1]}"
fi

command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || {
  echo "setup: the CUDA 13 toolkit (nvcc) is required and was not found in PATH or /usr/local/cuda" >&2
  exit 1
}
