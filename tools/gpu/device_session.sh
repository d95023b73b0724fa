#!/usr/bin/env bash
# One GPU session in few device calls (tools/gpu/README.md). The device tool carries at most
# 64 MiB per call and the machine goes back 30 s after a call, so the wheels travel as seven parts
# of one bundle, one per call, and the slow set-up (install, build, LLM models) starts in the
# background as soon as the parts that hold it have arrived:
#
#   here:    bash tools/gpu/device_session.sh bundle      -> .gpu/s00 ... .gpu/s06
#   device:  bash tools/gpu/device_session.sh park [STEP...]   (carry .gpu/sNN; back to back)
#            bash tools/gpu/device_session.sh run STEP...      (what to run; see run_step)
#
# Bundle order: mlx-cuda-13, the ORT headers (.deps/prefix), onnxruntime-genai-cuda, MLX's Python
# package, onnxruntime-gpu. The first three parts hold everything but onnxruntime-gpu: the
# background job installs them, builds the EP in /tmp/mlx-ep-gpu/build and builds the LLM
# models (bench/bench_llm_gpu.py make) while later parts travel. Steps that need ORT's CUDA EP
# install onnxruntime-gpu once all parts are parked. Logs and reports go to $OUT.
set -uo pipefail
W="${MLX_EP_GPU_DIR:-/tmp/mlx-ep-gpu}"
OUT="${OUT:-$PWD/gpu-out}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PY:-python3}"
export PYTHONUNBUFFERED=1
log() { echo "[gpu $(date +%T)] $*" | tee -a "$OUT/run.log"; }
# The bundle's parts: 7 of ~50 MiB, so that a part and the working tree (~7 MiB of tracked files,
# counted by blocks) fit a call's 64 MiB; six of 58 MiB stopped fitting in the twenty-third session.
NPARTS=7

bundle() {  # here: the wheels of prepare_wheels.sh plus genai-cuda and the headers, in NPARTS parts
  cd "$ROOT" && bash tools/gpu/prepare_wheels.sh >/dev/null
  local G="$ROOT/.gpu" T && T=$(mktemp -d)
  cat "$G"/p*/part_* | tar -x -C "$T"
  [ -n "$(ls "$G"/genai/*.whl 2>/dev/null)" ] || python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d "$G/genai" \
    "onnxruntime-genai-cuda==$(sed -n 's/^ONNXRUNTIME_GENAI_VERSION=//p' scripts/versions.env)"
  # The ORT headers come from scripts/setup.sh (make build): without them the GPU build fails late.
  [ -f "$ROOT/.deps/prefix/usr/include/onnxruntime/onnxruntime_ep_c_api.h" ] \
    || { echo "bundle: no ORT headers in .deps/prefix: run scripts/setup.sh (make build) first" >&2; return 1; }
  tar -cf "$T/prefix.tar" -C "$ROOT/.deps" prefix
  cp "$G"/genai/*.whl "$G"/extra/*.whl "$T/"
  # Two tars back to back: a.tar (all but onnxruntime-gpu) and b.tar; `sizes` holds a.tar's bytes.
  (cd "$T" && tar -cf a.tar mlx_cuda_13-*.whl prefix.tar onnxruntime_genai_cuda-*.whl mlx-*.whl \
    && tar -cf b.tar onnxruntime_gpu-*.whl && stat -c %s a.tar >sizes && cat a.tar b.tar >bundle.bin \
    && split -n "$NPARTS" -d bundle.bin part_)
  rm -rf "$G"/s0* && for p in "$T"/part_*; do mkdir -p "$G/s${p##*_}" && mv "$p" "$G/s${p##*_}/"; done
  mv "$T/sizes" "$G/s00/sizes"
  rm -rf "$T" && ls -la "$G"/s0*
}

extract_ready() {  # a.tar once its bytes have arrived (parts 00.. in order), b.tar once all have
  mkdir -p "$W/wheels"
  local parts=() i have=0 a
  a=$(cat "$W/sizes" 2>/dev/null) || return 0
  for i in $(seq -f %02g 0 $((NPARTS - 1))); do
    [ -f "$W/part_$i" ] || break
    parts+=("$W/part_$i") && have=$((have + $(stat -c %s "$W/part_$i")))
  done
  if [ ! -e "$W/a.done" ] && [ "$have" -ge "$a" ]; then
    cat "${parts[@]}" | head -c "$a" | tar -x -C "$W/wheels"
    [ "${PIPESTATUS[2]}" -eq 0 ] && touch "$W/a.done"  # tar's status (cat ends on SIGPIPE)
  fi
  if [ ! -e "$W/b.done" ] && [ ${#parts[@]} -eq "$NPARTS" ]; then
    cat "${parts[@]}" | tail -c +"$((a + 1))" | tar -x -C "$W/wheels" && touch "$W/b.done"
  fi
  return 0
}

start_background() {  # install what has arrived, build the EP, build the LLM models
  [ -e "$W/bg.started" ] || [ ! -e "$W/a.done" ] && return 0
  touch "$W/bg.started"
  sync_source
  setsid nohup bash "$ROOT/tools/gpu/device_session.sh" background >"$W/bg.log" 2>&1 </dev/null &
  echo $! >"$W/bg.pid"  # its own session (setsid): `stop` ends everything in it
  log "background set-up started"
}

sync_source() {  # $W/src mirrors the tree; a file is copied only when it changed (incremental build)
  mkdir -p "$W/src"
  (cd "$ROOT" && find . -path ./.git -prune -o -path ./.gpu -prune -o -path ./build -prune -o \
    -path ./build-gpu -prune -o -path ./gpu-out -prune -o -path ./.venv -prune -o -path ./.deps -prune -o \
    -type f -print) | while read -r f; do
    cmp -s "$ROOT/$f" "$W/src/$f" || { mkdir -p "$W/src/$(dirname "$f")" && cp "$ROOT/$f" "$W/src/$f"; }
  done
}

configure_and_build() {
  local SITE CUDNN_DIR
  SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  CUDNN_DIR=$(dirname "$(dirname "$(find "$SITE/nvidia" -name cudnn.h | head -1)")")
  # A configure that failed leaves a CMakeCache.txt but no Makefile: configure again then.
  [ -f "$W/build/Makefile" ] || cmake -S "$W/src" -B "$W/build" -DMLX_ROOT="$SITE/mlx" \
    -DMLX_EP_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release -DCUDNN_INCLUDE_PATH="$CUDNN_DIR/include" \
    -DCUDNN_LIBRARY_PATH="$CUDNN_DIR/lib" -DORT_INCLUDE_DIR="$W/prefix/usr/include/onnxruntime" \
    -DJSON_INCLUDE_DIR="$W/prefix/usr/include" >"$W/cmake.log" 2>&1 || return 1
  cmake --build "$W/build" -j"$(nproc)" >"$W/build.log" 2>&1
}

background() {
  cd "$W" || exit 1
  tar -xf wheels/prefix.tar -C "$W"
  # MLX into the image's own environment, so libmlx.so's RPATH ($ORIGIN/../../nvidia/*/lib) finds
  # the CUDA libraries of PyTorch's nvidia-* packages.
  $PY -m pip install -q --no-index --no-deps --upgrade wheels/mlx_cuda_13-*.whl wheels/mlx-*.whl \
    && touch "$W/installed.mlx"
  if configure_and_build; then touch "$W/build.ok"; else touch "$W/build.failed"; fi
  # onnxruntime-gpu and genai-cuda beside it, in $W/ortgpu (first on PYTHONPATH for the LLM
  # steps only): the parity tests keep the image's onnxruntime while this installs.
  wait_for "$W/b.done" /nonexistent 900 || { touch "$W/make.failed"; exit 1; }
  $PY -m pip install -q --no-index --no-deps --target "$W/ortgpu" wheels/onnxruntime_gpu-*.whl \
    wheels/onnxruntime_genai_cuda-*.whl && touch "$W/installed.ort"
  ort_gpu_env
  # The LLM models for bench/bench_llm_gpu.py (PyTorch, transformers and genai's builder).
  # BG_STEPS (given to the park call that starts this job) run beside it: see background_steps.
  [ -n "${BG_STEPS:-}" ] && { background_steps & }
  # SKIP_LLM_MAKE=1 (a short lease: parity steps only) leaves the 16 cores to them; the LLM
  # steps then stop at once ("LLM models not built").
  if [ -n "${SKIP_LLM_MAKE:-}" ]; then
    echo "skipped (SKIP_LLM_MAKE)" >"$W/make.log" && touch "$W/make.failed"
  else
    $PY "$W/src/bench/bench_llm_gpu.py" make --work "$W/llm" ${MAKE_ARGS:-} >"$W/make.log" 2>&1 \
      && touch "$W/make.ok" || touch "$W/make.failed"
  fi
  wait
}

background_steps() {
  # Steps run here are bound by no device call: a parity run is no longer cut into halves at a
  # call's 600 s (the halves lost the files they were reading at the end). Their reports go to
  # $W/bgout; a foreground `run collect` waits for them and brings them back. BG_BUDGET (s) is
  # each step's time as CALL_BUDGET is a call's.
  OUT="$W/bgout" && mkdir -p "$OUT"
  ready_to_run || { touch "$W/bg_steps.done"; return 1; }
  local s
  for s in $BG_STEPS; do
    SECONDS=0 && log "background step $s"
    CALL_BUDGET="${BG_BUDGET:-1500}" FILE_TIMEOUT="${FILE_TIMEOUT:-900}" run_step "$s"
    log "background step $s done in ${SECONDS} s"
  done
  touch "$W/bg_steps.done"
}

ort_gpu_env() {  # onnxruntime-gpu first on the path, and the CUDA libraries where its EP looks
  local SITE
  SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  export PYTHONPATH="$W/ortgpu${PYTHONPATH:+:$PYTHONPATH}"
  export LD_LIBRARY_PATH="$(ls -d "$SITE"/nvidia/*/lib | tr '\n' ':')${LD_LIBRARY_PATH:-}"
}

wait_for() {  # wait_for FILE FAILFILE SECONDS
  local t=0
  while [ ! -e "$1" ]; do
    [ -e "$2" ] && return 1
    [ "$t" -ge "$3" ] && return 1
    sleep 2 && t=$((t + 2))
  done
}

ready_to_run() {
  # Without the first parts nothing builds (a refused park call loses its part): say so at once
  # instead of waiting out the build's time.
  [ -e "$W/bg.started" ] || { log "set-up not started: parts here: $(cd "$W" && ls part_* 2>/dev/null | tr '\n' ' ')"; return 1; }
  wait_for "$W/build.ok" "$W/build.failed" 300 || { log "build not ready"; tail -n 30 "$W/build.log" "$W/bg.log"; return 1; }
  sync_source && configure_and_build || { log "rebuild failed"; grep -A3 error "$W/build.log" | head -30; return 1; }
  export ONNXRUNTIME_EP_MLX_LIBRARY="$W/build/libonnxruntime_ep_mlx.so" PYTHONPATH="$ROOT/python"
  export MLX_PTX_CACHE_DIR="$W/ptx" ONNXRUNTIME_EP_MLX_DEVICE_MEMORY="${DEVICE_MEMORY:-1}"
}

pytest_files() {  # every file with MLX on the GPU, $PARALLEL at a time, each in its own process
  local R="$OUT/reports" G && mkdir -p "$R" && G=$(gpu_count)
  # File i runs on GPU i mod G (a host of several GPUs).
  local i=0 f watch
  stall_watch "$R" & watch=$!
  for f in "$@"; do echo "$((i % G)) $f" && i=$((i + 1)); done | xargs -P "${PARALLEL:-6}" -L1 bash -c \
    'n=$(basename $1 .py); CUDA_VISIBLE_DEVICES=$0 timeout '"${FILE_TIMEOUT:-420}"' python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout='"${STALL_S:-300}"' "$1" \
       > '"$R"'/pytest_$n.log 2>&1; echo "$1 (GPU $0): rc=$? $(tail -1 '"$R"'/pytest_$n.log)"' | tee -a "$OUT/run.log"
  kill "$watch" 2>/dev/null
}

stall_watch() {  # stall_watch REPORTS: while test files run, a file whose log has not grown for
  # STALL_S s (default 300) gets its process's native stacks dumped once, to REPORTS/stall_NAME.txt
  # (cuda-gdb attaches to a running process, as root). The seventeenth session's parity had four
  # files stop making progress mid-run (einsum, indexing, pad, paged_attention) with no evidence.
  local R="$1" gdb tpid pid log name
  gdb=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
  [ -n "$gdb" ] || return 0
  while sleep 30; do
    # Each file's `timeout` holds its log as stdout; pytest itself points its fd 1 at a capture
    # file while a test runs, so the log is read from the `timeout` and the stacks from its child.
    for tpid in $(pgrep -f -- "-m pytest -q -p no:cacheprovider -rfE"); do
      [ "$(cat "/proc/$tpid/comm" 2>/dev/null)" = timeout ] || continue  # not pytest, not the shells
      log=$(readlink "/proc/$tpid/fd/1" 2>/dev/null) && [ -f "$log" ] || continue
      pid=$(pgrep -P "$tpid" | head -1) && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == python* ]] || continue
      name=$(basename "$log" .log)
      [ -e "$R/stall_$name.txt" ] && continue
      [ $(( $(date +%s) - $(stat -c %Y "$log") )) -ge "${STALL_S:-300}" ] || continue
      timeout 120 "$gdb" -p "$pid" -batch -ex "info threads" -ex "thread apply all bt" >"$R/stall_$name.txt" 2>&1
      log "stall: $name made no progress for ${STALL_S:-300} s; stacks in stall_$name.txt"
    done
  done
}

gpu_count() { local n; n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); echo $((n > 0 ? n : 1)); }

# A conformance test's time on a GPU (CONF_TEST_TIMEOUT, 150 s; the runner's own default is 60): a
# cold process compiles every fused kernel it meets with NVRTC, and the MaxPool tests (composed from
# up to 125 slices and 20 fused kernels) took over 60 s there (4 in the twenty-sixth session, 1 in the
# thirty-third; 2 s on the CPU).
conf_test_timeout() { echo "${CONF_TEST_TIMEOUT:-150}"; }

parity_files() {  # the parity files, the slow ones first so that they start at once
  # PARITY_ONLY: these names alone (in this order otherwise). PART's every n-th file follows the
  # shell's collation, which differs between machines (the GPU image's put test_attention.py after
  # test_attention_gqa_cpu_kernel.py, C's before it): a half left for a later lease is named here.
  if [ -n "${PARITY_ONLY:-}" ]; then
    PARITY_ONLY= parity_files | while read -r f; do
      [[ " $PARITY_ONLY " == *" $(basename "$f" .py) "* ]] && echo "$f"
    done
    return 0
  fi
  local slow="test_llm test_torch_models test_attention_vjp test_real_models test_models test_dynamic_shapes"
  local f
  for f in $slow; do
    [[ " ${PARITY_SKIP:-} " == *" $f "* ]] || ls "$ROOT"/tests/python/$f.py "$ROOT"/tests/python/ops/$f.py 2>/dev/null
  done
  # The fuzz and memory-limit tests are about the host process, not the device.
  for f in "$ROOT"/tests/python/test_*.py "$ROOT"/tests/python/ops/test_*.py; do
    # PARITY_SKIP: more names to leave out (files a `split` call reads instead, e.g. test_pool)
    [[ " $slow test_conformance test_fuzz_regressions test_hardening ${PARITY_SKIP:-} " == *" $(basename "$f" .py) "* ]] || echo "$f"
  done
}

run_step() {
  local R="$OUT/reports" && mkdir -p "$R"
  case "$1" in
    parity)  # conformance and every parity file, concurrently (NVRTC compiles are CPU-bound)
      # onnxruntime-gpu 1.31 is the reference (its CPU EP; the image's onnxruntime 1.30 lacks
      # kernels the tests compare with, and genai needs >= 1.31 beside it).
      wait_for "$W/installed.ort" "$W/make.failed" 300 || { log "onnxruntime-gpu not installed"; return 1; }
      local G C left && G=$(gpu_count) && C=$(nproc)
      # What is left of the call (CALL_BUDGET s from the script's start; the device tool stops a
      # call at 600 s, before finish() could pack the reports).
      left=$(( ${CALL_BUDGET:-560} - SECONDS )) && log "parity ${PART:-0/1}: ${left} s left"
      # PART=k/n: this call's share (every n-th test and file from the k-th), a run split over calls;
      # with PARITY_ONLY the files are those named, all of them (conformance still takes its share).
      local part="${PART:-0/1}" k n && k=${part%/*} && n=${part#*/}
      [ -n "${PARITY_ONLY:-}" ] && k=0 && n=1
      ( ort_gpu_env && CONFORMANCE_GPUS=$G timeout "${CONF_TIMEOUT:-$left}" $PY "$ROOT/tests/conformance/run_conformance.py" \
          --shard "$part" --timeout "$(conf_test_timeout)" --budget $((left - 20 - $(conf_test_timeout))) --jobs "${CONF_JOBS:-$((C / 3 > 6 ? C / 3 : 6))}" --out-dir "$R" --floor "$ROOT/tests/conformance/floor_gpu.txt" --list-failures >"$R/conformance.log" 2>&1
        # CONF_AGAIN: a test name (a --filter substring) an earlier share left undecided (a time-out),
        # run again once this share is done, beside the parity files: out-dir conformance_again.
        [ -z "${CONF_AGAIN:-}" ] || timeout 300 $PY "$ROOT/tests/conformance/run_conformance.py" --filter "$CONF_AGAIN" \
          --timeout "$(conf_test_timeout)" --out-dir "$R/conformance_again" >"$R/conformance_again.log" 2>&1 ) &
      local conf=$!
      ( ort_gpu_env && PARALLEL="${PARALLEL:-$((C / 3 > 5 ? C / 3 : 5))}" FILE_TIMEOUT="${FILE_TIMEOUT:-$((left < 420 ? left : 420))}" \
          timeout "${PARITY_TIMEOUT:-$left}" bash -c "$(declare -f pytest_files stall_watch gpu_count log); OUT=$OUT; \
          pytest_files $(parity_files | awk -v k="$k" -v n="$n" '(NR - 1) % n == k' | tr '\n' ' ')" )
      wait $conf; log "conformance: $(tail -3 "$R/conformance.log" | tr '\n' ' ')"
      [ -z "${CONF_AGAIN:-}" ] || log "conformance again ($CONF_AGAIN): $(tail -2 "$R/conformance_again.log" | tr '\n' ' ')"
      # Files still running when the step's time ran out: each file's `timeout` made a process
      # group of its own, out of reach of the step's timeout, so they ran on beside the steps after
      # it (the seventeenth session's decode steps measured 21-24 ms beside four of them, 5.9 ms in
      # the sixteenth alone).
      pkill -f -- "-m pytest -q -p no:cacheprovider -rfE" && log "parity: files still running at its end stopped";;
    conformance)  # the ONNX backend tests alone (the parity step runs them beside every parity file)
      wait_for "$W/installed.ort" "$W/make.failed" 300 || { log "onnxruntime-gpu not installed"; return 1; }
      # The runner's budget stops new tests; the margin holds the data's generation (~10 s) and
      # the tests in flight (conf_test_timeout each at most): with 40 s the twenty-fifth session's
      # H100 run was killed at 360 s past 1,000 of 1,884 tests, before its summary.
      ( ort_gpu_env && CONFORMANCE_GPUS=$(gpu_count) timeout "${CONF_TIMEOUT:-660}" $PY "$ROOT/tests/conformance/run_conformance.py" \
          --timeout "$(conf_test_timeout)" --budget "$(( ${CONF_TIMEOUT:-660} - 20 - $(conf_test_timeout) ))" --jobs "${CONF_JOBS:-8}" --out-dir "$R" --floor "$ROOT/tests/conformance/floor_gpu.txt" --list-failures >"$R/conformance.log" 2>&1 )
      log "conformance rc=$?: $(tail -3 "$R/conformance.log" | tr '\n' ' ')";;
    bert)  # BERT-base fp16/fp32 8x128 against ORT's CUDA EP (run and IOBinding) and PyTorch eager
      wait_for "$W/installed.ort" "$W/make.failed" 300 || { log "onnxruntime-gpu not installed"; return 1; }
      ( ort_gpu_env && timeout "${BERT_TIMEOUT:-300}" $PY "$ROOT/bench/bench_bert_gpu.py" --json "$R/bench_bert_gpu.json" 2>&1 \
        | tee "$R/bench_bert_gpu.log" )
      # fp32 again with TF32 on for every peer (MLX reads the mode once per process: a run of its own)
      ( ort_gpu_env && timeout "${BERT_TIMEOUT:-300}" $PY "$ROOT/bench/bench_bert_gpu.py" --precisions fp32 --tf32 \
          --json "$R/bench_bert_gpu_tf32.json" 2>&1 | tee "$R/bench_bert_gpu_tf32.log" );;
    pytest)  # PYTEST_FILES with the parity step's reference: onnxruntime-gpu 1.31 and genai beside it
      # (the image's onnxruntime 1.30 fails test_quantized's GatherBlockQuantized cases, and
      # test_llm needs onnxruntime_genai: both seen in the thirteenth session)
      wait_for "$W/installed.ort" "$W/make.failed" 300 || { log "onnxruntime-gpu not installed"; return 1; }
      # Paths are the repository's: the background job runs elsewhere (the eighteenth session's
      # BG_STEPS pytest found none of its files).
      ( ort_gpu_env && cd "$ROOT" && pytest_files ${PYTEST_FILES:?} );;
    prompts)  # what a new prompt length costs, with and without prompt buckets (ORT CPU and CUDA EPs too)
      wait_for "$W/installed.ort" "$W/make.failed" 300 || { log "onnxruntime-gpu not installed"; return 1; }
      ( ort_gpu_env && timeout "${PROMPTS_TIMEOUT:-240}" $PY "$ROOT/bench/bench_prompt_lengths.py" --cuda \
          --json "$R/bench_prompt_lengths.json" 2>&1 | tee "$R/bench_prompt_lengths.log" );;
    split)  # SPLIT_TESTS (files or node ids) spread over SPLIT_JOBS processes (pytest_split.sh)
      wait_for "$W/installed.ort" "$W/make.failed" 300 || { log "onnxruntime-gpu not installed"; return 1; }
      # From the repository (SPLIT_TESTS are its paths; as a background step the twenty-first
      # session's split found none of them from the background job's directory).
      ( ort_gpu_env && cd "$ROOT" && SPLIT_TIMEOUT="${SPLIT_TIMEOUT:-$(( ${CALL_BUDGET:-560} - SECONDS - 30 ))}" \
          bash "$ROOT/tools/gpu/pytest_split.sh" "${SPLIT_JOBS:-$(nproc)}" ${SPLIT_TESTS:?} );;
    llm)  # LLM_ENV: variables for the bench alone ("A=1 B=2"), as KERNELS_ENV
      wait_for "$W/make.ok" "$W/make.failed" 240 || { log "LLM models not built"; tail -40 "$W/make.log"; return 1; }
      tail -5 "$W/make.log"
      ( ort_gpu_env && $PY -c "import onnxruntime as o; print(o.__file__, o.get_available_providers())" \
        && env ${LLM_ENV:-} timeout "${LLM_TIMEOUT:-500}" $PY "$ROOT/bench/bench_llm_gpu.py" bench --work "$W/llm" --json "$R/bench_llm_gpu.json" \
        ${LLM_ARGS:-} 2>&1 | tee "$R/bench_llm_gpu.log" );;
    rows)  # batch-8 decode with and without the few-rows product kernel (ROWS_KERNEL=1), A B A B
      # (each setting a process of its own: the EP reads its variables once); ROWS_ROUNDS rounds (2),
      # ROWS_SETTINGS the values of ROWS_KERNEL ("0 1"; "all": one row too), ROWS_BATCHES ("8"; "1,8")
      wait_for "$W/make.ok" "$W/make.failed" 240 || { log "LLM models not built"; return 1; }
      local round setting
      for round in $(seq 1 "${ROWS_ROUNDS:-2}"); do
        for setting in ${ROWS_SETTINGS:-0 1}; do
          ( ort_gpu_env && ONNXRUNTIME_EP_MLX_ROWS_KERNEL=$setting timeout "${ROWS_TIMEOUT:-200}" $PY "$ROOT/bench/bench_llm_gpu.py" \
              bench --work "$W/llm" --peers mlx_loop --batch "${ROWS_BATCHES:-8}" --precisions "${ROWS_MODELS:-fp16}" \
              --json "$R/bench_rows_${setting}_$round.json" 2>&1 | grep -E "mlx_loop|floor|rror" | sed "s/^/[ROWS_KERNEL=$setting round $round] /" | tee -a "$R/bench_rows.log" )
        done
      done;;
    paged)  # PagedAttention against ORT's CUDA EP too (onnxruntime-gpu's schema; skipped on 1.30)
      ( ort_gpu_env && timeout 200 $PY -m pytest -q -p no:cacheprovider -rfEs "$ROOT/tests/python/ops/test_paged_attention.py" \
        >"$R/pytest_paged_ortgpu.log" 2>&1; log "paged on onnxruntime-gpu: rc=$? $(tail -1 "$R/pytest_paged_ortgpu.log")" );;
    launch)  # a custom kernel's launch against MLX's own (bench/mlx_launch_cost.py --what norms), ~1 min
      timeout 150 $PY "$ROOT/bench/mlx_launch_cost.py" --what norms --iters 100 2>&1 | tee "$R/mlx_launch_norms.log";;
    vjp)  # the AttentionVJP CUDA kernels against the composed query blocks (their tests run in parity)
      timeout 150 $PY "$ROOT/bench/bench_attention_vjp.py" --json "$R/bench_attention_vjp.json" 2>&1 \
        | grep -v -e GetCapability -e "] session" | tee "$R/bench_attention_vjp.log";;
    census)  # the CUDA kernels of one BERT fp16 run and of one LLM decode step (MLX's graph dumps)
      timeout 200 $PY "$ROOT/tools/gpu/kernel_census.py" bert --out "$R" 2>&1 | tee "$R/census.log"
      [ -e "$W/make.ok" ] && timeout 150 $PY "$ROOT/tools/gpu/kernel_census.py" llm --model "$W/llm/fp16" --out "$R" \
        2>&1 | tee -a "$R/census.log";;
    phases)  # where a run's time goes (graph / eval / write), MLX primitives per run, MLX CUDA settings A/B
      wait_for "$W/make.ok" "$W/make.failed" 240 || { log "LLM models not built"; tail -40 "$W/make.log"; return 1; }
      local m
      for m in ${PHASES_MODELS:-fp16 int4}; do
        [ "$m" = none ] && continue  # PHASES_MODELS=none: BERT's alone
        # PHASES_BATCH=8: eight rows a decode step (kernel_census.llm_run's BENCH_BATCH)
        BENCH_BATCH="${PHASES_BATCH:-1}" timeout "${PHASES_TIMEOUT:-200}" $PY "$ROOT/tools/gpu/step_phases.py" llm --model "$W/llm/$m" \
          ${PHASES_SETTINGS:+--settings "$PHASES_SETTINGS"} ${PHASES_ROUNDS:+--rounds "$PHASES_ROUNDS"} --json "$R/phases_llm_$m.json" 2>&1 | tee -a "$R/phases.log"
        # PHASES_PROMPT=512: the same for a prompt of that many tokens (no past)
        [ -n "${PHASES_PROMPT:-}" ] && BENCH_BATCH="${PHASES_BATCH:-1}" timeout "${PHASES_TIMEOUT:-200}" $PY "$ROOT/tools/gpu/step_phases.py" llm \
          --model "$W/llm/$m" --past 0 --prompt "$PHASES_PROMPT" ${PHASES_SETTINGS:+--settings "$PHASES_SETTINGS"} ${PHASES_ROUNDS:+--rounds "$PHASES_ROUNDS"} \
          --json "$R/phases_llm_${m}_prompt$PHASES_PROMPT.json" 2>&1 | tee -a "$R/phases.log"
      done
      # PHASES_BERT_SETTINGS: BERT's own settings (default PHASES_SETTINGS)
      local bert_settings="${PHASES_BERT_SETTINGS:-${PHASES_SETTINGS:-}}"
      [ -n "${PHASES_BERT-1}" ] && timeout "${PHASES_TIMEOUT:-200}" $PY "$ROOT/tools/gpu/step_phases.py" bert \
        ${bert_settings:+--settings "$bert_settings"} ${PHASES_ROUNDS:+--rounds "$PHASES_ROUNDS"} --json "$R/phases_bert.json" 2>&1 | tee -a "$R/phases.log";;
    kernels)  # each CUDA kernel family's GPU time in one run: TinyLlama decode steps, BERT fp16;
      # KERNELS_VIA: "timeline" (CUPTI through torch.profiler: real start and end, the GPU's busy
      # time against the run's span), "ncu" (each kernel's own time, serialized), both by default
      wait_for "$W/make.ok" "$W/make.failed" 240 || { log "LLM models not built"; tail -40 "$W/make.log"; return 1; }
      local k v
      # KERNELS_ENV: variables for these runs alone ("A=1 B=2"), e.g. the opt-ins an A/B weighs
      local -a kenv=(env ${KERNELS_ENV:-})
      # KERNELS_DETAIL=REGEX: ncu's sections for those kernels of one BERT run (kernel_times.py --via detail)
      [ -n "${KERNELS_DETAIL:-}" ] && "${kenv[@]}" timeout "${KERNELS_TIMEOUT:-300}" $PY "$ROOT/tools/gpu/kernel_times.py" bert \
        --via detail --kernel "$KERNELS_DETAIL" --json "$R/kernel_detail_bert.json" 2>&1 | tee -a "$R/kernel_detail.log"
      for v in ${KERNELS_VIA:-timeline ncu}; do
        for k in ${KERNELS_MODELS:-fp16 int4}; do
          [ "$k" = none ] && continue  # KERNELS_MODELS=none: BERT's alone
          "${kenv[@]}" timeout "${KERNELS_TIMEOUT:-300}" $PY "$ROOT/tools/gpu/kernel_times.py" llm --via "$v" --model "$W/llm/$k" \
            --json "$R/kernel_times_${v}_$k.json" 2>&1 | tee -a "$R/kernel_times.log"
          # KERNELS_BATCH8=1: the step again with eight rows (where batch 8's 2.9 ms over batch 1 go)
          [ -n "${KERNELS_BATCH8:-}" ] && BENCH_BATCH=8 "${kenv[@]}" timeout "${KERNELS_TIMEOUT:-300}" $PY \
            "$ROOT/tools/gpu/kernel_times.py" llm --via "$v" --model "$W/llm/$k" \
            --json "$R/kernel_times_${v}_${k}_b8.json" 2>&1 | tee -a "$R/kernel_times.log"
          # KERNELS_INPUTS_AB=1: again with ids, mask and positions made once in the EP's memory
          # (kernel_census.llm_run): is the step's 170 us Sum of the mask the pages' migration?
          [ -n "${KERNELS_INPUTS_AB:-}" ] && BENCH_INPUTS_ON_DEVICE=1 "${kenv[@]}" timeout "${KERNELS_TIMEOUT:-300}" $PY \
            "$ROOT/tools/gpu/kernel_times.py" llm --via "$v" --model "$W/llm/$k" \
            --json "$R/kernel_times_${v}_${k}_inputs_on_device.json" 2>&1 | tee -a "$R/kernel_times.log"
          # KERNELS_PROMPT=512: a prefill of that many tokens (no past): where its time goes, with
          # its MLX graph in the log (which copies are the 92 copy_gg_nd kernels of the
          # twenty-seventh session's prefill?)
          [ -n "${KERNELS_PROMPT:-}" ] && ONNXRUNTIME_EP_MLX_GRAPH_CENSUS=graph "${kenv[@]}" timeout "${KERNELS_TIMEOUT:-300}" $PY \
            "$ROOT/tools/gpu/kernel_times.py" llm --via "$v" --model "$W/llm/$k" --past 0 --new "$KERNELS_PROMPT" \
            --json "$R/kernel_times_${v}_${k}_prompt$KERNELS_PROMPT.json" 2>&1 | tee -a "$R/kernel_times.log"
        done
        [ -n "${KERNELS_BERT-1}" ] && "${kenv[@]}" timeout "${KERNELS_TIMEOUT:-300}" $PY "$ROOT/tools/gpu/kernel_times.py" bert \
          --via "$v" --json "$R/kernel_times_${v}_bert.json" 2>&1 | tee -a "$R/kernel_times.log"
      done;;
    events)  # MLX alone: does a GPU stream waiting for the CPU stream's async evaluation go on?
      timeout "${EVENTS_TIMEOUT:-150}" $PY "$ROOT/tools/gpu/cpu_gpu_event.py" --json "$R/cpu_gpu_event.json" 2>&1 \
        | tee "$R/cpu_gpu_event.log";;
    primcost)  # what one MLX primitive of each kind costs on the GPU (MLX's Python API, no EP)
      timeout "${PRIMCOST_TIMEOUT:-200}" $PY "$ROOT/bench/mlx_primitive_cost.py" --json "$R/mlx_primitive_cost.json" 2>&1 \
        | tee "$R/mlx_primitive_cost.log";;
    collect)  # the background steps' reports so far, once they are done or the call's time is up
      wait_for "$W/bg_steps.done" /nonexistent "${COLLECT_WAIT:-$(( ${CALL_BUDGET:-560} - SECONDS - 30 ))}" \
        || log "background steps still running: $(tail -1 "$W/bgout/run.log" 2>/dev/null)"
      [ -d "$W/bgout/reports" ] && cp -r "$W/bgout/reports/." "$R/"
      cp "$W/bgout/run.log" "$R/background_run.log" 2>/dev/null;;
    threads)  # CPU thread scaling on this machine's cores (MLX's CPU device)
      ONNXRUNTIME_EP_MLX_DEVICE=cpu timeout 200 $PY "$ROOT/bench/bench_concurrency.py" --threads 1,2,4,8,16 \
        --mlx-threads 4,16 --json "$R/bench_concurrency_16.json" 2>&1 | tee "$R/bench_concurrency_16.log";;
    *) log "unknown step $1";;
  esac
}

finish() {
  # The kernel cache (80 MB and more) is over what one call brings back: only on request.
  [ -n "${KEEP_PTX:-}" ] && [ -d "$W/ptx" ] && tar -czf "$OUT/ptx.tar.gz" -C "$W" ptx && log "ptx cache $(du -sh "$OUT/ptx.tar.gz" | cut -f1)"
  cp "$W"/make.log "$W"/bg.log "$OUT/reports/" 2>/dev/null
  # A call that logged nothing has no run.log: tar then failed and left the reports unpacked
  # (brought back one by one, past the device tool's count of files: the thirty-third session).
  touch "$OUT/run.log"
  [ -d "$OUT/reports" ] && tar -czf "$OUT/gpu-reports.tar.gz" -C "$OUT" reports run.log && rm -rf "$OUT/reports"
}

mkdir -p "$OUT" "$W"
case "${1:-}" in
  bundle) bundle;;
  background) background;;
  park)
    cp -n "$ROOT"/.gpu/s*/part_* "$ROOT"/.gpu/s00/sizes "$W/" 2>/dev/null
    extract_ready && start_background
    log "parked: $(cd "$W" && ls part_* | tr '\n' ' ')"
    shift; [ $# -gt 0 ] && { ready_to_run && for s in "$@"; do run_step "$s"; done; finish; };;
  run) shift; ready_to_run && for s in "$@"; do run_step "$s"; done; finish;;
  stop)  # end the background job and everything it started (BG_STEPS too); a device command must
    # not `pkill -f` a pattern of its own command line: the seventeenth session's killed itself
    [ -f "$W/bg.pid" ] && pkill -TERM -s "$(cat "$W/bg.pid")" && log "background job stopped";;
  *) echo "usage: $0 bundle|park [STEP...]|run STEP...|stop" >&2; exit 2;;
esac
