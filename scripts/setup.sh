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

# FlashInfer's C++ headers (the attention and norm peers, instantiated in our build): the
# flashinfer-python wheel ships them with the CUTLASS they use; no PyTorch, no JIT. Pinned in
# baselines/flashinfer/VERSION: 0.5.3's headers build with the CUDA 13.0 toolkit (0.7 needs a newer CCCL).
FLASHINFER_VERSION=$(head -n1 "$(dirname "$0")/../baselines/flashinfer/VERSION")
FLASHINFER_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/topt/flashinfer-${FLASHINFER_VERSION}
if [[ ! -f $FLASHINFER_DIR/.complete ]]; then
  echo "setup: fetching FlashInfer ${FLASHINFER_VERSION} headers into ${FLASHINFER_DIR}"
  wheel_dir=$(mktemp -d)
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$wheel_dir" "flashinfer-python==${FLASHINFER_VERSION}"
  rm -rf "$FLASHINFER_DIR" && mkdir -p "$FLASHINFER_DIR"
  # flashinfer/data/{include,cutlass/include,cutlass/tools/util/include} -> $FLASHINFER_DIR/...
  "$PY" - "$wheel_dir"/flashinfer_python-*.whl "$FLASHINFER_DIR" <<'PYEOF'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
prefix = "flashinfer/data/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        rel = name[len(prefix):] if name.startswith(prefix) else None
        keep = ("include/", "cutlass/include/", "cutlass/tools/util/include/")
        if rel and rel.startswith(keep) and not name.endswith("/"):
            path = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(name) as src, open(path, "wb") as out:
                out.write(src.read())
PYEOF
  rm -rf "$wheel_dir"
  touch "$FLASHINFER_DIR/.complete"
fi

command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || {
  echo "setup: the CUDA 13 toolkit (nvcc) is required and was not found in PATH or /usr/local/cuda" >&2
  exit 1
}
