#!/usr/bin/env bash
# The CLI's documented exit codes and messages, end to end. Usage: test_cli.sh TOPT SOURCE_DIR
set -uo pipefail
TOPT=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

# expect CODE PATTERN -- command...: the exit code is CODE and stdout+stderr match PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc != "$code" ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> exit $rc (want $code), output:"
    echo "$out" | head -20
    failures=$((failures + 1))
  else
    echo "ok: $* -> $rc"
  fi
}

expect 0 '^topt [0-9]+\.[0-9]+\.[0-9]+' -- "$TOPT" --version
expect 0 'Exit codes' -- "$TOPT" --help
expect 0 'rmsnorm.*' -- "$TOPT" list
expect 0 'llama2-70b +hidden=8192, heads=64, kv_heads=8' -- "$TOPT" list
expect 0 'configs/quick.yaml: 15 cases, 45 implementation runs' -- "$TOPT" plan "$SRC/configs/quick.yaml"
expect 0 '1 cases' -- "$TOPT" plan "$SRC/configs/quick.yaml" --filter 'tokens=16384,hidden=8192' --impl ours
expect 2 'invalid regex' -- "$TOPT" plan "$SRC/configs/quick.yaml" --filter '('
expect 2 'subcommand is required|not expected' -- "$TOPT" frobnicate

printf 'ops:\n  - op: rmsnorm\n    axes: {tokens: [1, 2}\n' >"$TMP/malformed.yaml"
expect 2 'malformed.yaml:3:[0-9]+: error: malformed YAML' -- "$TOPT" plan "$TMP/malformed.yaml"
printf 'measure: {min_time: 1}\nops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\n' >"$TMP/unknown_key.yaml"
expect 2 "unknown_key.yaml:1:11: error: unknown key 'min_time' in measure; did you mean 'min_time_s'" -- \
  "$TOPT" plan "$TMP/unknown_key.yaml"
expect 2 "unknown_key.yaml:1:11" -- "$TOPT" run "$TMP/unknown_key.yaml" --out "$TMP/out"
[[ -e "$TMP/out" ]] && { echo "FAIL: an invalid config created output"; failures=$((failures + 1)); }

# topt report: every output it cannot write is exit 2 naming the path, never an abort.
SYNTH="$SRC/tests/data/synthetic/h100_quick_synthetic_run1.json"
touch "$TMP/a_file"
expect 2 "topt report: error: $TMP/a_file/out" -- "$TOPT" report "$SYNTH" --no-charts --out "$TMP/a_file/out"
mkdir -p "$TMP/md_is_a_folder/h100_quick_synthetic_run1.md"
expect 2 "topt report: error: .*h100_quick_synthetic_run1.md" -- \
  "$TOPT" report "$SYNTH" --no-charts --out "$TMP/md_is_a_folder"
if [[ $(id -u) != 0 ]]; then  # root writes anywhere
  mkdir -p "$TMP/read_only" && chmod a-w "$TMP/read_only"
  expect 2 "topt report: error: $TMP/read_only/out" -- "$TOPT" report "$SYNTH" --no-charts --out "$TMP/read_only/out"
fi
# Without --out a report goes under results/, not beside its input.
mkdir -p "$TMP/cwd" && cp "$SYNTH" "$TMP/cwd/in.json"
expect 0 'results/report-[0-9]{8}-[0-9]{6}/index.html' -- \
  bash -c "cd '$TMP/cwd' && '$(realpath "$TOPT")' report in.json --no-charts"
[[ -e "$TMP/cwd/in.md" ]] && { echo "FAIL: topt report wrote beside its input"; failures=$((failures + 1)); }

if ! nvidia-smi -L >/dev/null 2>&1; then
  expect 3 'no CUDA device' -- "$TOPT" run "$SRC/configs/quick.yaml" --out "$TMP/nogpu"
fi

echo "$failures failed"
[[ $failures == 0 ]]
