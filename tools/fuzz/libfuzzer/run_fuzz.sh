#!/usr/bin/env bash
# Runs the libFuzzer target for a given time (`make fuzz FUZZ_SECONDS=N`).
#   tools/fuzz/libfuzzer/run_fuzz.sh BUILD_DIR SECONDS [more libFuzzer flags or inputs]
# New corpus entries go to BUILD_DIR/corpus/work (kept between runs), crashes to
# BUILD_DIR/fuzz-artifacts/. Replay one: BUILD_DIR/tools/fuzz/libfuzzer/mlx_ep_fuzz_model FILE
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
BUILD=$(cd "$1" && pwd)
SECONDS_TO_RUN=$2
shift 2
CORPUS=$BUILD/corpus
[ -f "$CORPUS/onnx.dict" ] || "$ROOT/.venv/bin/python" "$ROOT/tools/fuzz/libfuzzer/make_corpus.py" "$CORPUS"
mkdir -p "$CORPUS/work" "$BUILD/fuzz-artifacts"
# A huge allocation (a declared [2^40] initializer, ORT's or ours) returns null instead of being
# reported, as malloc does in production: ORT and the EP must turn it into an error. Leaks are
# checked by `make sanitize` on the C++ host test; here MLX's and ORT's process-lifetime caches
# would drown them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:max_allocation_size_mb=3072:detect_leaks=0:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "$BUILD/tools/fuzz/libfuzzer/mlx_ep_fuzz_model" \
  -max_total_time="$SECONDS_TO_RUN" -timeout=60 -rss_limit_mb=8192 -malloc_limit_mb=4096 \
  -dict="$CORPUS/onnx.dict" -artifact_prefix="$BUILD/fuzz-artifacts/" -print_final_stats=1 \
  "$@" "$CORPUS/work" "$CORPUS/seeds"
