#!/usr/bin/env bash
# Profiles the selected cases with Nsight Compute or Nsight Systems through `topt profile`, which
# checks each case, warms it up, then launches it once inside its NVTX ranges (domain topt,
# op → impl → params) between cudaProfilerStart and cudaProfilerStop. Only those launches are
# captured: ncu starts with profiling off, nsys captures the cudaProfilerStart/Stop ranges.
#
# Usage: scripts/profile.sh ncu|nsys REPORT CONFIG [--filter RE] [--impl NAME...]
#   ncu   writes REPORT.ncu-rep; more ncu options in NCU_ARGS, e.g. NCU_ARGS='--set full'
#   nsys  writes one REPORT*.nsys-rep per profiled launch; more options in NSYS_ARGS
# TOPT, NCU and NSYS name the binaries (defaults: build/release/topt, ncu, nsys).
#
# --clock-control none: ncu otherwise locks the clocks to base, so its durations would not be those
# `topt run` measures; the lent GPU machines also require it. Nsight Systems runs there but cannot
# make a report of what it collected: `topt profile CONFIG --timeline DIR` writes each launch's kernel
# timeline (CUPTI activity records) instead.
set -euo pipefail
if [[ $# -lt 3 || ($1 != ncu && $1 != nsys) ]]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
TOOL=$1
REPORT=$2
shift 2
TOPT=${TOPT:-build/release/topt}
NCU=${NCU:-ncu}
NSYS=${NSYS:-nsys}
case $TOOL in
  ncu)
    # shellcheck disable=SC2086  # NCU_ARGS is a list of options
    exec "$NCU" --profile-from-start off --nvtx --clock-control none ${NCU_ARGS:-} -f -o "$REPORT" \
      "$TOPT" profile "$@"
    ;;
  nsys)
    # shellcheck disable=SC2086
    exec "$NSYS" profile --capture-range=cudaProfilerApi --capture-range-end=repeat --trace=cuda,nvtx ${NSYS_ARGS:-} \
      --force-overwrite=true -o "$REPORT" "$TOPT" profile "$@"
    ;;
esac
