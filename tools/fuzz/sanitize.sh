#!/usr/bin/env bash
# The sanitizer runs of docs/reliability.md (`make sanitize`): against the ASan + UBSan build of
# the EP in BUILD_DIR (build-fuzz/, made by `make fuzz-build`; MLX and ORT uninstrumented),
#  1. ctest: the C++ core and host tests, LeakSanitizer on (suppressions: lsan.supp);
#  2. a Python subset with the ASan runtime LD_PRELOADed into the interpreter (leak checks off:
#     CPython's own allocations are not ours);
#  3. with VALGRIND=1, valgrind memcheck of the host test from the normal build (build/).
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
(cd "$BUILD" && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$ROOT/tools/fuzz/lsan.supp:print_suppressions=0 \
  ctest --output-on-failure) || status=1

echo "== 2. Python subset with the ASan runtime preloaded"
ASAN_RT=$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)
# Not under ASan: the tests that set RLIMIT_AS (ASan reserves terabytes of shadow address space)
# and the RSS bound (ASan's quarantine holds freed memory on purpose).
(cd "$ROOT" && LD_PRELOAD=$ASAN_RT ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
  ONNXRUNTIME_EP_MLX_LIBRARY=$BUILD/libonnxruntime_ep_mlx.so \
  .venv/bin/python -m pytest -q -p no:cacheprovider "${TESTS[@]}" \
    -k "not allocation_failure and not fuzz_mutated and not rss_stays_flat") || status=1

if [ "${VALGRIND:-0}" = 1 ]; then
  echo "== 3. valgrind memcheck of the host test (normal build)"
  (cd "$ROOT/build/tests/cpp" && valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --suppressions=$ROOT/tools/fuzz/valgrind.supp ./host_test) || status=1
fi
exit $status
