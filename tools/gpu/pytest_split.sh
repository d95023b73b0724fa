#!/usr/bin/env bash
# pytest_split.sh JOBS TEST... : the tests of TEST (files or node ids) in JOBS processes at once,
# each a round-robin share of the collected node ids, so one slow file no longer outlasts a
# device call (test_indexing and test_pool took over 420 s each with a cold CUDA kernel cache).
# Logs go to $OUT/reports/split_K.log; $OUT/reports/split_summary.txt gathers every process's
# last line and its FAILED/ERROR lines. SPLIT_TIMEOUT bounds each process (default 400 s; SIGINT,
# so that pytest still reports the failures it has seen). Each process has its own MLX CUDA kernel
# cache ($MLX_PTX_CACHE_DIR/split_K): with one shared directory, 16 processes writing the same
# module files gave "There is no kernel named ..." (sixth session: MLX writes a module's .ptx and
# .txt with plain ofstreams, so a reader may see half a file). Each starts with a copy of what the
# earlier steps left in $MLX_PTX_CACHE_DIR (conformance, phases: no process writes there while the
# split runs), so the kernels those compiled are not compiled again per process (the twenty-sixth
# session's split reached 93 of 139 tests in 420 s, its processes compiling cold). A failure's
# report is written to split_K.failures when it happens: a process killed at the limit prints no
# summary.
set -uo pipefail
JOBS="$1" && shift
R="$OUT/reports" && mkdir -p "$R"
PY="${PY:-python3}"
IDS=$(mktemp)
$PY -m pytest -q -p no:cacheprovider --collect-only "$@" 2>/dev/null | grep '::' >"$IDS"
echo "$(wc -l <"$IDS") tests in $JOBS processes" | tee "$R/split_summary.txt"
# None collected is a failure (a wrong directory or path), not an empty success.
[ -s "$IDS" ] || { echo "no tests collected from $* in $PWD" | tee -a "$R/split_summary.txt"; exit 1; }
for k in $(seq 0 $((JOBS - 1))); do
  awk -v k="$k" -v n="$JOBS" '(NR - 1) % n == k' "$IDS" >"$IDS.$k"
  [ -s "$IDS.$k" ] || continue
  ( BASE="${MLX_PTX_CACHE_DIR:-/tmp/mlx-ptx}" && export MLX_PTX_CACHE_DIR="$BASE/split_$k" && mkdir -p "$MLX_PTX_CACHE_DIR"
    find "$BASE" -mindepth 1 -maxdepth 1 ! -name 'split_*' -exec cp -a {} "$MLX_PTX_CACHE_DIR"/ \; 2>/dev/null
    export MLX_EP_FAILURE_LOG="$R/split_$k.failures"  # each failure as it happens (tests/python/conftest.py)
    timeout -s INT -k 20 "${SPLIT_TIMEOUT:-400}" $PY -c 'import sys, pytest; sys.exit(pytest.main(sys.argv[2:] + open(sys.argv[1]).read().splitlines()))' \
      "$IDS.$k" -q -p no:cacheprovider -rfE --tb=short \
      >"$R/split_$k.log" 2>&1; echo "split $k: rc=$? $(tail -1 "$R/split_$k.log")" ) &
done | tee -a "$R/split_summary.txt"
wait
grep -h -E '^(FAILED|ERROR) ' "$R"/split_*.log | sort | tee -a "$R/split_summary.txt"
true  # no FAILED line is not an error
