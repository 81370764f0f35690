#!/usr/bin/env bash
# Configures (once) and builds every target with a preset: release by default.
# Usage: scripts/build.sh [preset] [extra cmake --build args...]
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-release}
shift || true
export PATH="/usr/local/cuda/bin:$PATH"
if [[ ! -f build/$PRESET/build.ninja ]]; then
  cmake --preset "$PRESET" ${TOPT_CMAKE_ARGS:-} >/dev/null
fi
cmake --build --preset "$PRESET" "$@"
