#!/usr/bin/env bash
# Runs the GPU tests under compute-sanitizer, within one device call: memcheck over every GPU test,
# then racecheck over the small shapes (TOPT_SANITIZE=small, tests/gpu/gpu_test.h). Both check only
# this project's kernels (every one is in namespace topt: mangled names start _ZN4topt). With such a
# filter, compute-sanitizer 2025.3 on the H100 stopped racecheck at cuBLAS's nvjet kernels with
# "Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception", and without one it
# instruments every library kernel (5 tests in 375 s): under racecheck the tests leave out attention's
# library implementations (cuBLAS, cuDNN). Hazards are counted in our kernels (reports that name
# topt::) and, apart, in the libraries'. Under the tool no test asserts on timings (TOPT_SANITIZE set).
# Usage: scripts/sanitize.sh OUT_DIR [TEST_BINARY] [-- gtest args...]
#   OUT_DIR      where the full logs go (memcheck.log, racecheck.log); $OUT on the device machine
#   TEST_BINARY  default bundle/topt_gpu_tests (scripts/bundle.sh), else build/release/tests/topt_gpu_tests
# Environment: SANITIZE_TOOLS (default "memcheck racecheck"); SANITIZE_TOTAL_S (540: both tools
# within a 10-minute call, with room to start), of which memcheck takes at most SANITIZE_MEMCHECK_S
# (350: 296 s for every GPU test at 995a827) and racecheck SANITIZE_RACECHECK_S (default: what memcheck left); COMPUTE_SANITIZER: the
# tool's path where it is not found by itself.
# Prints one line per tool ("memcheck: N errors", "racecheck: N hazards", with the tests' counts);
# exits 0 when every tool ran to its end and found nothing, 1 otherwise, 2 on bad usage.
set -uo pipefail

usage() {
  echo "usage: scripts/sanitize.sh OUT_DIR [TEST_BINARY] [-- gtest args...]" >&2
  exit 2
}
[[ $# -ge 1 && $1 != -* ]] || usage
OUT_DIR=$1
shift
BINARY=""
if [[ $# -ge 1 && $1 != -- ]]; then
  BINARY=$1
  shift
fi
if [[ $# -ge 1 ]]; then
  [[ $1 == -- ]] || usage
  shift
fi
GTEST_ARGS=("$@")
# Paths as given, from the caller's folder; the rest runs from the repository's root.
OUT_DIR=$(realpath -m -- "$OUT_DIR")
[[ -z $BINARY ]] || BINARY=$(realpath -m -- "$BINARY")
cd "$(dirname "$0")/.." || exit 2

if [[ -z $BINARY ]]; then
  for candidate in bundle/topt_gpu_tests build/release/tests/topt_gpu_tests; do
    [[ -x $candidate ]] && BINARY=$candidate && break
  done
  [[ -n $BINARY ]] || { echo "sanitize: no test binary at bundle/ or build/release/tests/; pass its path" >&2; exit 2; }
fi
[[ -x $BINARY ]] || { echo "sanitize: test binary '$BINARY' does not exist or is not executable" >&2; exit 2; }

# compute-sanitizer ships with the CUDA toolkit, and on PyPI (nvidia-cuda-sanitizer-api).
find_sanitizer() {
  if [[ -n ${COMPUTE_SANITIZER:-} ]]; then
    [[ -x $COMPUTE_SANITIZER ]] && echo "$COMPUTE_SANITIZER"
    return
  fi
  command -v compute-sanitizer && return
  local dir
  for dir in /usr/local/cuda/bin /usr/local/cuda-*/bin /usr/local/cuda*/compute-sanitizer; do
    [[ -x $dir/compute-sanitizer ]] && echo "$dir/compute-sanitizer" && return
  done
  python3 - <<'PY' 2>/dev/null
import glob, importlib.util, os
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    for path in sorted(glob.glob(os.path.join(root, "*", "compute-sanitizer", "compute-sanitizer"))):
        if os.access(path, os.X_OK):
            print(path)
            raise SystemExit
PY
}
SANITIZER=$(find_sanitizer | head -n 1)
if [[ -z $SANITIZER ]]; then
  echo "sanitize: compute-sanitizer not found (not on PATH, in /usr/local/cuda*/bin, nor in a Python" \
    "nvidia package); install the CUDA toolkit's or nvidia-cuda-sanitizer-api, or set COMPUTE_SANITIZER" >&2
  exit 2
fi
mkdir -p "$OUT_DIR" || { echo "sanitize: cannot create '$OUT_DIR'" >&2; exit 2; }
# The bundle finds cuDNN, cuBLAS and CUPTI through the GPU machine's Python packages.
# shellcheck source=scripts/device_env.sh
source scripts/device_env.sh
echo "sanitize: $("$SANITIZER" --version | grep -i version | head -n 1) on $BINARY"

min() { echo $(($1 < $2 ? $1 : $2)); }

# One tool over the tests: its full log in OUT_DIR/<tool>.log, its summary line in SUMMARY.
declare -a SUMMARY=()
STATUS=0
run_tool() {
  local tool=$1 limit=$2 mode=$3
  shift 3
  local log=$OUT_DIR/$tool.log start=$SECONDS rc
  echo "sanitize: $tool (TOPT_SANITIZE=$mode, at most ${limit}s) -> $log"
  TOPT_SANITIZE=$mode timeout --signal=INT --kill-after=20 "$limit" \
    "$SANITIZER" --tool "$tool" --kernel-name kns=_ZN4topt --error-exitcode 86 --print-limit 1000 "$@" \
    "$BINARY" "${GTEST_ARGS[@]}" >"$log" 2>&1
  rc=$?
  local found what
  if [[ $tool == memcheck ]]; then
    what=errors
    # "========= ERROR SUMMARY: N errors" when the run ended; otherwise count the reports so far.
    found=$(sed -n 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -n 1)
    [[ -n $found ]] || found=$(grep -cE '^========= (Invalid|Misaligned|Out-of-range|Malformed|Program hit)' "$log")
  else
    # The analysis reports, one per racing pair of source lines ("Race reported between ... at
    # KERNEL+offset"): ours name topt::, the libraries' (cuBLAS's nvjet_*, cuDNN's) do not. A tool
    # error ("Internal Sanitizer Error") is counted with ours: nothing after it was checked.
    local theirs
    found=$(grep -cE 'Race reported between .* at (void )?topt::|Internal Sanitizer Error' "$log")
    theirs=$(($(grep -c 'Race reported between' "$log") - $(grep -c 'Race reported between .* at \(void \)\?topt::' "$log")))
    what="hazards in our kernels, $theirs in library kernels"
  fi
  # gtest's line per finished test, "[       OK ] Suite.Name (12 ms)" and the like: counts that
  # hold for a run cut short too.
  local passed failed skipped note=""
  passed=$(grep -c '^\[       OK \] .* ([0-9]* ms)$' "$log")
  failed=$(grep -c '^\[  FAILED  \] .* ([0-9]* ms)$' "$log")
  skipped=$(grep -c '^\[  SKIPPED \] .* ([0-9]* ms)$' "$log")
  case $rc in
    0 | 86) ;;
    124 | 137) note=", TIMED OUT: the count covers the tests run so far" ;;
    1) ;;  # gtest: a test failed (counted below)
    *) note=", exit $rc: see the log" ;;
  esac
  SUMMARY+=("$tool: $found $what (tests: $passed passed, $failed failed, $skipped skipped; $((SECONDS - start))s$note)")
  if [[ $found != 0 || ($rc != 0 && $rc != 86) ]]; then STATUS=1; fi
}

TOTAL_S=${SANITIZE_TOTAL_S:-540}
for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
  left=$((TOTAL_S - SECONDS))
  if ((left < 30)); then
    SUMMARY+=("$tool: not run (${SECONDS}s of SANITIZE_TOTAL_S=${TOTAL_S}s used)")
    STATUS=1
    continue
  fi
  case $tool in
    # API errors are the harness's to catch (CUDA_CHECK), and a test provokes one on purpose (an
    # allocation that cannot fit): memcheck reports device-side errors only.
    memcheck) run_tool memcheck "$(min "${SANITIZE_MEMCHECK_S:-350}" "$left")" 1 --report-api-errors no ;;
    # The GPU references (naive tiled double GEMM, attention, norms: every kernel named *reference*)
    # are the checkers, not the kernels under test, and were most of racecheck's time (a 1×4096×4096
    # GEMM case: 39 s). memcheck covers them, and tests hold them to the CPU references.
    racecheck) run_tool racecheck "$(min "${SANITIZE_RACECHECK_S:-$left}" "$left")" small --racecheck-report analysis \
      --kernel-name-exclude kns=reference ;;
    *) echo "sanitize: unknown tool '$tool' in SANITIZE_TOOLS (memcheck, racecheck)" >&2; exit 2 ;;
  esac
done
printf '%s\n' "${SUMMARY[@]}"
exit $STATUS
