#!/usr/bin/env bash
# Configures (once) and builds every target with a preset: release by default.
# Usage: scripts/build.sh [preset] [extra cmake --build args...]
# TOPT_BUILD_DIR overrides the build folder (default build/<preset>); TOPT_CMAKE_ARGS adds
# configure options, e.g. -DCMAKE_CUDA_ARCHITECTURES=80.
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-release}
shift || true
BUILD_DIR=${TOPT_BUILD_DIR:-build/$PRESET}
export PATH="/usr/local/cuda/bin:$PATH"
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  cmake --preset "$PRESET" -B "$BUILD_DIR" ${TOPT_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$BUILD_DIR" "$@"
