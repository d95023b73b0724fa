# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it). The twenty-eighth session's first H100 lease measured MLX's CUDA graph
# size (100 -> 25 ops: fp16 decode 4.00 -> 3.67 ms; now the EP's default) and showed the GQA
# decode kernel at ~20 us a layer (32 blocks at batch 1). Its second lease: the decode kernel's
# past rows split among blocks (ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS, opt-in). First its
# correctness in the background (the split parity tests, the decode kernel's, and test_llm with
# 16 rows a block so its 64-row caches take 4 blocks a head; the driver's copy of host inputs and
# the CUDA graph size's default, MLX_MAX_OPS_PER_BUFFER=25, too), then, in a `run` call of its own
# with ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=256 exported, `phases` (fp16 decode: split off, at
# 256 rows, and at 256 with the host inputs copied by the driver; alternating rounds) and the
# `kernels` timelines (b1, b8) with both.
export ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=16 \
  BG_STEPS="split" \
  SPLIT_TESTS="tests/python/ops/test_fused_gpu_paths.py::test_decode_step_kernel_splits tests/python/test_device_memory.py::test_host_inputs_prefetched tests/python/test_provider_options.py" \
  SPLIT_JOBS=10 SPLIT_TIMEOUT=150
# (test_llm with the split, and the kernels timeline: cut when the second lease began with 508 s)
# The `run` call after it: `. tools/gpu/lease_env.sh measure && CALL_BUDGET=540 bash
# tools/gpu/device_session.sh run phases kernels`.
export CONF_TIMEOUT=660
if [ "${1:-}" = measure ]; then
  # phases: the split off and at 256 rows, then with the host inputs copied by the CUDA driver
  # (ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS=copy); the timeline with both (the split kernel's time, and
  # the attention mask's first reader after the driver's copy).
  P=ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS S=ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS
  export ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=256 ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS=copy \
    PHASES_MODELS=fp16 PHASES_PROMPT= PHASES_ROUNDS=2 PHASES_TIMEOUT=300 PHASES_BERT= \
    PHASES_SETTINGS="$S=0 $P=0;$S=256 $P=0;$S=256 $P=copy" \
    KERNELS_VIA=timeline KERNELS_MODELS=fp16 KERNELS_PROMPT= KERNELS_BATCH8= KERNELS_BERT=
fi
