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

# --impl naming no implementation of the config's ops: exit 2 from plan and run alike (before any GPU).
expect 2 "--impl: no op of .*quick.yaml has an implementation 'bogus'" -- "$TOPT" plan "$SRC/configs/quick.yaml" --impl bogus
expect 2 "--impl: no op of .*quick.yaml has an implementation 'bogus'" -- \
  "$TOPT" run "$SRC/configs/quick.yaml" --impl bogus --out "$TMP/out"
expect 2 'no case matches the filter' -- "$TOPT" run "$SRC/configs/quick.yaml" --filter nothing-matches --out "$TMP/out"
# --out that cannot be a directory: named, exit 2, before any GPU.
expect 2 "--out .*quick.yaml/sub: cannot write results there: .*quick.yaml is not a directory" -- \
  "$TOPT" run "$SRC/configs/quick.yaml" --out "$SRC/configs/quick.yaml/sub"

# Values past an axis, and cases too large for any GPU of today.
printf 'ops:\n  - op: causal_softmax\n    axes: {model: llama2-7b, seq: 2147483648}\n' >"$TMP/seq.yaml"
expect 2 "seq.yaml:3:[0-9]+: error: axis 'seq' of op 'causal_softmax': 2147483648 is more than an axis holds: the largest is 2147483647" -- \
  "$TOPT" plan "$TMP/seq.yaml"
printf 'ops:\n  - op: rmsnorm\n    axes: {model: llama2-7b, tokens: 1000000000000}\n' >"$TMP/tokens.yaml"
expect 2 "axis 'tokens' of op 'rmsnorm': 1000000000000 is more than an axis holds" -- "$TOPT" plan "$TMP/tokens.yaml"
expect 2 "axis 'tokens' of op 'rmsnorm': 1000000000000 is more than an axis holds" -- "$TOPT" run "$TMP/tokens.yaml" --out "$TMP/out"
printf 'ops:\n  - op: rmsnorm\n    axes: {model: llama2-7b, tokens: 100000000}\n' >"$TMP/huge.yaml"
expect 2 'huge.yaml:2: error: case rmsnorm .*tokens=100000000.* moves 1.64 TB of tensors, more than the 141 GiB' -- \
  "$TOPT" plan "$TMP/huge.yaml"
expect 2 'tokens=16384,hidden=4096.* moves 268 MB of tensors, more than the 0.1 GiB' -- "$TOPT" plan "$SRC/configs/quick.yaml" --gpu-memory 0.1
expect 0 'configs/quick.yaml: 15 cases' -- "$TOPT" plan "$SRC/configs/quick.yaml" --gpu-memory 80

# A key given twice in a map: yaml-cpp would keep one silently.
printf 'ops:\n  - op: rmsnorm\n    axes:\n      tokens: 1\n      hidden: 8\n      tokens: 2\n' >"$TMP/dup.yaml"
expect 2 "dup.yaml:6:7: error: duplicate key 'tokens' \(first at line 4\)" -- "$TOPT" plan "$TMP/dup.yaml"

# Gates naming what the config does not run: refused before the sweep.
printf 'ops:\n  - op: rmsnorm\n    impls: [ours, cudnn]\n    axes: {tokens: 1, hidden: 8}\ngates:\n  - {op: rmsnorm, impl: bogus, min_speedup: 1}\n' >"$TMP/gate.yaml"
expect 2 "gate.yaml:6:[0-9]+: error: gates\[0\].impl: 'bogus' matches no implementation the config runs for op 'rmsnorm'" -- \
  "$TOPT" run "$TMP/gate.yaml" --out "$TMP/out"
printf 'ops:\n  - op: rmsnorm\n    impls: [ours, cudnn]\n    axes: {tokens: 1, hidden: 8}\ngates:\n  - {op: rmsnorm, impl: ours, vs: unfused, min_speedup: 1}\n' >"$TMP/gate_vs.yaml"
expect 2 "gates\[0\].vs: the config runs no implementation 'unfused' for op 'rmsnorm'; expected one of: ours, cudnn" -- \
  "$TOPT" plan "$TMP/gate_vs.yaml"
[[ -e "$TMP/out" ]] && { echo "FAIL: an invalid config or filter created output"; failures=$((failures + 1)); }

# Multi-process configs (world_size): checked like any config, before ranks or a GPU; a rank's environment
# checked before anything else it does.
expect 0 'configs/all_reduce.yaml: 37 cases, 185 implementation runs' -- "$TOPT" plan "$SRC/configs/all_reduce.yaml"
printf 'world_size: 2\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n' >"$TMP/cold.yaml"
expect 2 "cold.yaml:3:9: error: op 'all_reduce' is collective and timed hot" -- "$TOPT" run "$TMP/cold.yaml" --out "$TMP/out"
printf 'measure: {cache: hot}\nops:\n  - op: all_reduce\n    axes: {bytes: 4096}\n' >"$TMP/no_ranks.yaml"
expect 2 "op 'all_reduce' is collective: the config needs world_size" -- "$TOPT" run "$TMP/no_ranks.yaml" --out "$TMP/out"
printf 'world_size: 2\nmeasure: {cache: hot}\nops:\n  - op: rmsnorm\n    axes: {tokens: 1, hidden: 8}\n' >"$TMP/ranks_rmsnorm.yaml"
expect 2 "world_size 2: op 'rmsnorm' \(line 4\) runs in one process" -- "$TOPT" plan "$TMP/ranks_rmsnorm.yaml"
expect 2 "TOPT_RANK is set but TOPT_WORLD_SIZE is not" -- \
  env TOPT_RANK=0 "$TOPT" run "$SRC/configs/all_reduce.yaml" --out "$TMP/out"
expect 2 "topt profile: .*all_reduce.yaml runs 2 ranks" -- "$TOPT" profile "$SRC/configs/all_reduce.yaml"
expect 2 'no case matches the filter' -- "$TOPT" run "$SRC/configs/all_reduce.yaml" --filter nothing-matches --out "$TMP/out"
expect 2 "--impl: no op of .*all_reduce.yaml has an implementation 'bogus'" -- \
  "$TOPT" run "$SRC/configs/all_reduce.yaml" --impl bogus --out "$TMP/out"
[[ -e "$TMP/out" ]] && { echo "FAIL: an invalid multi-process run created output"; failures=$((failures + 1)); }

# topt compare: a directory, files of different configs, and a file against itself.
expect 2 "topt compare: error: $TMP: is a directory" -- "$TOPT" compare "$TMP" "$SRC/tests/data/recorded/h100_quick_run1.json"
printf '{"schema": "topt.results/1", "context": {}, "results": []}' >"$TMP/empty.json"
expect 2 'share no row' -- "$TOPT" compare "$SRC/tests/data/recorded/h100_quick_run1.json" "$TMP/empty.json"
expect 0 'topt compare: 45 same$' -- \
  "$TOPT" compare "$SRC/tests/data/recorded/h100_quick_run1.json" "$SRC/tests/data/recorded/h100_quick_run1.json"
expect 0 'note: 12 rows in both files: 12 of BASE.s 45, 12 of NEW.s 141' -- \
  "$TOPT" compare "$SRC/tests/data/recorded/h100_quick_run1.json" "$SRC/tests/data/recorded/h100_norm_decode_run1.json"

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
  expect 3 'no CUDA device for the 2 ranks' -- "$TOPT" run "$SRC/configs/all_reduce.yaml" --out "$TMP/nogpu"
fi

echo "$failures failed"
[[ $failures == 0 ]]
