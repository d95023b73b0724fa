#!/usr/bin/env bash
# The sanitizer runs of docs/reliability.md (`make sanitize`): against the ASan + UBSan build of
# the EP in BUILD_DIR (build-fuzz/, made by `make fuzz-build`; MLX and ORT uninstrumented),
#  1. ctest: the C++ core and host tests, LeakSanitizer on;
#  2. a Python subset with the ASan runtime LD_PRELOADed into the interpreter (leak checks off:
#     CPython's own allocations are not ours);
#  3. the structured mutator (tools/fuzz/fuzz_nodes.py, FUZZ_NODES mutants, default 2000) on the
#     sanitized EP;
#  4. with VALGRIND=1, valgrind memcheck of the host test from the normal build (build/).
#   tools/fuzz/sanitize.sh [BUILD_DIR] [pytest files...]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build-fuzz}" && pwd)
shift || true
TESTS=("$@")
if [ ${#TESTS[@]} -eq 0 ]; then
  TESTS=(tests/python/test_hardening.py tests/python/test_bad_input.py tests/python/ops/test_gather_elements.py
         tests/python/ops/test_normalization.py tests/python/ops/test_shape.py tests/python/ops/test_indexing.py
         tests/python/ops/test_reduction.py tests/python/ops/test_pool.py tests/python/ops/test_control_flow.py)
fi
status=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

echo "== 1. ctest under ASan + UBSan + LSan ($BUILD)"
(cd "$BUILD" && ASAN_OPTIONS=detect_leaks=1 \
  ctest --output-on-failure) || status=1

echo "== 2. Python subset with the ASan runtime preloaded"
ASAN_RT=$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)
# Not under ASan: the tests that set RLIMIT_AS (ASan reserves terabytes of shadow address space)
# and the RSS bound (ASan's quarantine holds freed memory on purpose).
(cd "$ROOT" && LD_PRELOAD=$ASAN_RT ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
  ONNXRUNTIME_EP_MLX_LIBRARY=$BUILD/libonnxruntime_ep_mlx.so \
  .venv/bin/python -m pytest -q -p no:cacheprovider "${TESTS[@]}" \
    -k "not allocation_failure and not fuzz_mutated and not rss_stays_flat") || status=1

echo "== 3. the structured mutator, both workers under ASan (no RLIMIT_AS: ASan caps allocations)"
(cd "$ROOT" && LD_PRELOAD=$ASAN_RT ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:max_allocation_size_mb=3072 \
  ONNXRUNTIME_EP_MLX_LIBRARY=$BUILD/libonnxruntime_ep_mlx.so \
  .venv/bin/python tools/fuzz/fuzz_nodes.py --seed 1 --count "${FUZZ_NODES:-2000}" --timeout 120 --mem-gb 0 \
    --report "$BUILD/fuzz-nodes-asan.json" --keep "$BUILD/fuzz-nodes-asan" | tail -n 3) || status=1
# A worker killed by a sanitizer report in the EP: its log names an EP frame.
if grep -h -A40 -E "ERROR: AddressSanitizer|runtime error" "$BUILD"/fuzz-nodes-asan/worker-*.log 2>/dev/null |
   grep -qE "libonnxruntime_ep_mlx|mlx_ep::"; then
  echo "sanitizer reports with an EP frame in $BUILD/fuzz-nodes-asan/worker-*.log"
  status=1
fi

if [ "${VALGRIND:-0}" = 1 ]; then
  echo "== 4. valgrind memcheck of the host test (normal build: make build)"
  # ORT (a release build) and ld.so have known reports of their own; the run fails only on an
  # error whose stack has a frame in the EP, or on definitely/indirectly lost bytes.
  log=$BUILD/valgrind-host_test.log
  (cd "$ROOT/build/tests/cpp" && valgrind --leak-check=full --num-callers=50 ./host_test >"$log" 2>&1) || status=1
  ours=$(awk '/^==[0-9]+== [A-Z]/{inblk=1; hit=0} inblk && /libonnxruntime_ep_mlx|mlx_ep::/{hit=1}
              inblk && /^==[0-9]+== *$/{if (hit) n++; inblk=0} END{print n+0}' "$log")
  grep -E "ERROR SUMMARY|definitely lost|indirectly lost" "$log"
  echo "error contexts with an EP frame: $ours"
  grep -qE "(definitely|indirectly) lost: [1-9]" "$log" && status=1
  [ "$ours" = 0 ] || status=1
fi
exit $status
