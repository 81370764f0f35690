#!/usr/bin/env bash
# Set-up if needed, build every target, run every test. GPU tests (label `gpu`) skip themselves
# where no CUDA device is present. This is what .ci/run calls.
# With a GPU, ctest runs every test in a process of its own, one at a time (GPU tests time kernels on
# the one device). Without one, the GPU tests can only skip, and ctest's ~1100 processes would each
# spend ~0.2 s loading cuBLAS and cuDNN: the two GoogleTest binaries run once each instead (every test,
# one process), then ctest runs the rest (label `script`: the CLI, README and report checks).
# Arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
build=${TOPT_BUILD_DIR:-build/release}
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  ctest --test-dir "$build" --output-on-failure "$@"
else
  "$build/tests/topt_unit_tests" --gtest_brief=1
  "$build/tests/topt_gpu_tests" --gtest_brief=1
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)" -L script "$@"
fi
