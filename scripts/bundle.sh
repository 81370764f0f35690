#!/usr/bin/env bash
# Packs topt and the test binaries for a GPU machine that has the CUDA driver, toolkit libraries
# and cuDNN, but not this project's other dependencies: those shared libraries go beside the
# binaries, which find them through their $ORIGIN rpath.
# Usage: scripts/bundle.sh [out_dir]   (default bundle/)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bundle}
bash scripts/build.sh release
rm -rf "$OUT" && mkdir -p "$OUT"
B=${TOPT_BUILD_DIR:-build/release}
BINS=("$B/topt" "$B/tests/topt_unit_tests" "$B/tests/topt_gpu_tests")
cp "${BINS[@]}" "$OUT/"
# Everything ldd resolves except the C/C++ runtime (the target's own is newer) and CUDA, cuDNN, NCCL
# and the driver (the target's own must match its driver; NCCL comes from its PyTorch: device_env.sh).
ldd "${BINS[@]}" | awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|libutil|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
  grep -Ev '/lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc[^/]*|cupti|nvidia-ml|nvperf[a-z_]*|nccl)\.so' |
  while read -r lib; do cp -L "$lib" "$OUT/"; done
# Where `topt report` finds its chart script, and the configs, relative to the bundle.
du -sh "$OUT"
ls "$OUT"
