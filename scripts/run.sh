#!/usr/bin/env bash
# Set-up if needed, build, run a sweep, write results and report under results/<timestamp>/.
# Usage: scripts/run.sh [config] [topt run options...]
# TOPT=path/to/topt uses a prebuilt binary (a bundle from scripts/bundle.sh) and skips set-up and
# build: for GPU machines that cannot install packages.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/quick.yaml}
shift || true
if [[ -z ${TOPT:-} ]]; then
  bash scripts/setup.sh
  bash scripts/build.sh release --target topt
  TOPT=./build/release/topt
fi
OUT="results/$(date +%Y%m%d-%H%M%S)"
# Exit codes pass through: 1 a check, case or gate failed, 2 config error, 3 no CUDA device.
status=0
"$TOPT" run "$CONFIG" --out "$OUT" "$@" || status=$?
# Tables and charts beside the results, whatever the run's verdict (charts need python3 + matplotlib).
# The chart script from this checkout, wherever the binary was built.
export TOPT_REPORT_SCRIPT=${TOPT_REPORT_SCRIPT:-$PWD/reports/make_report.py}
if [[ -f $OUT/results.json ]]; then
  "$TOPT" report "$OUT/results.json" --out "$OUT" || echo "run.sh: report incomplete (see above); results are in $OUT"
fi
exit $status
