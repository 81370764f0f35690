#!/usr/bin/env bash
# Set-up if needed, build every target, run every test. GPU tests (label `gpu`) skip themselves
# where no CUDA device is present. This is what .ci/run calls.
# Without a GPU the tests run in parallel (each of ctest's ~1100 processes spends most of its time
# loading cuDNN and cuBLAS); with one, one at a time, since GPU tests time kernels on the one device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
jobs=1
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then jobs=$(nproc); fi
ctest --test-dir "${TOPT_BUILD_DIR:-build/release}" --output-on-failure -j "$jobs" "$@"
