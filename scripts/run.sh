#!/usr/bin/env bash
# Set-up if needed, build, run a sweep, write results and report under results/<timestamp>/.
# Usage: scripts/run.sh [config] [topt run options...]
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/quick.yaml}
shift || true
bash scripts/setup.sh
bash scripts/build.sh release --target topt
OUT="results/$(date +%Y%m%d-%H%M%S)"
# Exit codes pass through: 1 a check or case failed, 2 config error, 3 no CUDA device.
./build/release/topt run "$CONFIG" --out "$OUT" "$@"
