#!/usr/bin/env bash
# Rebuilds everything committed under reports/ from the committed reports/<gpu>/*.json alone (no GPU):
# each config's Markdown and CSV tables (topt report --no-charts), README's results block and its
# charts (reports/make_report.py readme).
# Usage: scripts/report.sh           the committed files
#        scripts/report.sh --site    also every chart of every op and HTML pages, in results/report-<time>/
# TOPT=path/to/topt uses that binary; default build/release/topt, built if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z ${TOPT:-} ]]; then
  TOPT=./build/release/topt
  [[ -x $TOPT ]] || bash scripts/build.sh release --target topt
fi
export TOPT_REPORT_SCRIPT=${TOPT_REPORT_SCRIPT:-$PWD/reports/make_report.py}
for gpu_dir in reports/*/; do
  compgen -G "$gpu_dir*.json" >/dev/null || continue
  "$TOPT" report "$gpu_dir"*.json --no-charts --out "$gpu_dir"  # its .html pages are git-ignored
done
python3 reports/make_report.py readme README.md
if [[ ${1:-} == --site ]]; then
  "$TOPT" report reports/*/*.json
fi
