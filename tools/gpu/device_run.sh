#!/usr/bin/env bash
# Run on the GPU machine, last call: installs the carried mlx-cuda-13 and onnxruntime-gpu wheels,
# builds the EP against MLX's CUDA backend, and runs the smoke test, the conformance suite and the
# benchmark with MLX on the GPU. Logs and reports go to $OUT (or ./gpu-out).
set -uo pipefail
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT" /tmp/mlx-ep-gpu
export PYTHONUNBUFFERED=1
log() { echo "[gpu] $*" | tee -a "$OUT/run.log"; }

cp .gpu/p*/part_* /tmp/mlx-ep-gpu/ 2>/dev/null
cat /tmp/mlx-ep-gpu/part_* > /tmp/mlx-ep-gpu/bundle.tar || { log "missing wheel parts"; exit 1; }
mkdir -p /tmp/mlx-ep-gpu/wheels && tar -xf /tmp/mlx-ep-gpu/bundle.tar -C /tmp/mlx-ep-gpu/wheels
PY=python3
# Into the image's own environment, so libmlx.so's RPATH ($ORIGIN/../../nvidia/*/lib) finds the
# CUDA libraries that PyTorch's nvidia-* packages already installed there.
$PY -m pip install -q --no-index --no-deps --upgrade /tmp/mlx-ep-gpu/wheels/*.whl 2>&1 | tail -2
[ -n "$(ls .gpu/extra/*.whl 2>/dev/null)" ] && $PY -m pip install -q --no-index --no-deps --upgrade .gpu/extra/*.whl 2>&1 | tail -2
SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
log "python $($PY --version 2>&1), site $SITE, onnxruntime $($PY -c 'import onnxruntime; print(onnxruntime.__version__)')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/run.log"

CUDNN_DIR=$(dirname "$(dirname "$(find "$SITE/nvidia" -name cudnn.h | head -1)")")
log "cudnn at $CUDNN_DIR"
cmake -S . -B build-gpu -DMLX_ROOT="$SITE/mlx" -DMLX_EP_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
  -DCUDNN_INCLUDE_PATH="$CUDNN_DIR/include" -DCUDNN_LIBRARY_PATH="$CUDNN_DIR/lib" \
  -DORT_INCLUDE_DIR="$PWD/.deps/prefix/usr/include/onnxruntime" -DJSON_INCLUDE_DIR="$PWD/.deps/prefix/usr/include" \
  >"$OUT/cmake.log" 2>&1 || { log "cmake failed"; tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" >"$OUT/build.log" 2>&1 || { log "build failed"; grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
export ONNXRUNTIME_EP_MLX_LIBRARY="$PWD/build-gpu/libonnxruntime_ep_mlx.so"
log "built $ONNXRUNTIME_EP_MLX_LIBRARY"

export PYTHONPATH="$PWD/python"
R="$OUT/reports" && mkdir -p "$R"
$PY -m onnxruntime_ep_mlx info 2>&1 | tee -a "$OUT/run.log"
# STEPS selects what runs (default: all): demo models conformance pytest bench (also: memory bert launch vjp)
STEPS="${STEPS:-demo models conformance pytest bench}"
case " $STEPS " in *" demo "*) $PY examples/demo.py 2>&1 | tee "$R/demo.log";; esac
case " $STEPS " in *" models "*)
  # Whole models: the EP against ORT's CUDA EP and ORT's CPU EP, in one process per table.
  timeout 240 $PY bench/bench_torch_models.py --large --json "$R/bench_torch_models.json" 2>&1 | tee "$R/bench_torch_models.log"
  timeout 240 $PY bench/bench_whole_models.py 2>&1 | tee "$R/bench_whole_models.log";; esac
case " $STEPS " in *" conformance "*)
  timeout 300 $PY tests/conformance/run_conformance.py --jobs 8 --out-dir "$R" --floor tests/conformance/floor_gpu.txt --list-failures > "$R/conformance.log" 2>&1
  tail -4 "$R/conformance.log";; esac
case " $STEPS " in *" pytest "*)
  # The parity and bad-input tests with MLX on the GPU (same tolerances as on the CPU), one file
  # per process so that a crash shows which file it came from.
  # PYTEST_FILES picks a subset (default: every op test file and the bad-input tests).
  for f in ${PYTEST_FILES:-tests/python/ops/test_*.py tests/python/test_bad_input.py}; do
    timeout "${PYTEST_FILE_TIMEOUT:-55}" $PY -m pytest -q -p no:cacheprovider "$f" > "$R/pytest_$(basename "$f" .py).log" 2>&1
    echo "$f: rc=$? $(tail -1 "$R/pytest_$(basename "$f" .py).log")"
  done;; esac
case " $STEPS " in *" memory "*)
  # Device memory (docs/gpu_memory.md) and per-run overhead: the test that counts host copies,
  # GPT-2 with IOBinding against ORT's CUDA EP with and without the EP's device memory, and the
  # tiny-model overhead on the GPU and on MLX's CPU device with the hand-off spin off and on.
  timeout 120 $PY -m pytest -q -p no:cacheprovider -rs tests/python/test_device_memory.py 2>&1 | tee "$R/pytest_device_memory.log" | tail -5
  for dm in 0 1; do
    echo "== ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=$dm" | tee -a "$R/bench_iobinding.log"
    ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=$dm timeout 150 $PY bench/bench_iobinding.py --filter "${BENCH_MODEL:-gpt2_dynamo}" --json "$R/bench_iobinding_dm$dm.json" 2>&1 | tee -a "$R/bench_iobinding.log"
  done
  [ "${OVERHEAD:-1}" = 1 ] && for dev in gpu cpu; do for spin in 0 50; do
    echo "== device $dev spin $spin" | tee -a "$R/bench_overhead.log"
    ONNXRUNTIME_EP_MLX_DEVICE=$dev ONNXRUNTIME_EP_MLX_SPIN_US=$spin timeout 100 $PY bench/bench_overhead.py --iters 2000 --json "$R/bench_overhead_${dev}_$spin.json" 2>&1 | tee -a "$R/bench_overhead.log"
  done; done;;
esac
case " $STEPS " in *" vjp "*)
  # The AttentionVJP CUDA kernels (src/ops/attention_vjp_cuda.cc): their parity tests over a
  # 1-byte score budget (each case asserts the kernels' verbose log line), then the benchmark
  # against the composed query blocks.
  timeout "${PYTEST_FILE_TIMEOUT:-300}" $PY -m pytest -v -rs -p no:cacheprovider tests/python/ops/test_attention_vjp_kernel.py > "$R/pytest_attention_vjp_kernel.log" 2>&1
  echo "test_attention_vjp_kernel: rc=$? $(tail -1 "$R/pytest_attention_vjp_kernel.log")"
  timeout 150 $PY bench/bench_attention_vjp.py --json "$R/bench_attention_vjp.json" 2>&1 | grep -v -e GetCapability -e "] session" | tee "$R/bench_attention_vjp.log";; esac
case " $STEPS " in *" bert "*)
  # BERT-base fp16/fp32 8x128: the EP (plain run and IOBinding on its device memory) against ORT's
  # CUDA EP (run and IOBinding) and PyTorch eager.
  ONNXRUNTIME_EP_MLX_DEVICE_MEMORY="${BERT_DEVICE_MEMORY:-1}" timeout 400 $PY bench/bench_bert_gpu.py --json "$R/bench_bert_gpu.json" 2>&1 | tee "$R/bench_bert_gpu.log";; esac
case " $STEPS " in *" launch "*)
  # What a small kernel costs in MLX itself, next to PyTorch eager and CUDA graphs (issue 7).
  timeout 120 $PY bench/mlx_launch_cost.py 2>&1 | tee "$R/mlx_launch_cost.log";; esac
case " $STEPS " in *" bench "*)
  timeout 120 $PY bench/bench_models.py --torch --json "$R/bench_gpu.json" 2>&1 | tee "$R/bench.log";; esac
tar -czf "$OUT/gpu-reports.tar.gz" -C "$OUT" reports cmake.log build.log run.log && rm -rf "$R"
