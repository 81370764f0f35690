#!/usr/bin/env bash
# Set-up if needed, build every target, run every test. GPU tests (label `gpu`) skip themselves
# where no CUDA device is present. This is what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
ctest --test-dir "${TOPT_BUILD_DIR:-build/release}" --output-on-failure "$@"
