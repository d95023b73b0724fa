# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it). The twenty-eighth session's first H100 lease measured MLX's CUDA graph
# size (100 -> 25 ops: fp16 decode 4.00 -> 3.67 ms; now the EP's default) and showed the GQA
# decode kernel at ~20 us a layer (32 blocks at batch 1). Since then, not yet run on a GPU: the
# decode kernel's past rows split among blocks (ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS, opt-in), a
# known first prompt's attention without the past buffer (the default), host inputs copied by the
# driver (ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS=copy, opt-in), a prompt's rotation as one kernel
# (ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL=1, opt-in). The second lease was refused (no machine
# came, twice; then too little budget to start one), so all of it is for the next. A short lease (the session's second,
# ~330 s): their GPU tests first (test_llm with 16 rows a block, so its 64-row caches take 4 blocks
# a head), then a fp16 decode A/B of the split (off, 256 rows, 256 rows with the driver's copy),
# one round.
S=ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS P=ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS
F=tests/python/ops/test_fused_gpu_paths.py
export ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=16 \
  BG_STEPS="split phases" \
  SPLIT_TESTS="$F::test_decode_step_kernel_splits $F::test_gqa_known_first_prompt_reads_no_past $F::test_gqa_known_total_float32 $F::test_gqa_float16 $F::test_prefill_rotate_kernel tests/python/test_llm.py tests/python/test_device_memory.py::test_host_inputs_prefetched tests/python/test_provider_options.py" \
  SPLIT_JOBS=10 SPLIT_TIMEOUT=110 \
  PHASES_MODELS=fp16 PHASES_PROMPT= PHASES_ROUNDS=1 PHASES_TIMEOUT=150 PHASES_BERT= \
  PHASES_SETTINGS="$S=0 $P=0;$S=256 $P=0;$S=256 $P=copy"
export CONF_TIMEOUT=660
# A longer lease: PHASES_ROUNDS=2, and a prefill A/B (PHASES_PROMPT=512 with PHASES_SETTINGS
# "ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL=0;ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL=1": the known
# first prompt is in both), the kernels timeline (KERNELS_VIA=timeline KERNELS_MODELS=fp16
# KERNELS_PROMPT=512 KERNELS_BERT=), the LLM peers.
