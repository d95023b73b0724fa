# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it). The twenty-seventh session's H100 ran the row-kernel A/B, the LLM peers,
# the split and the kernel timelines (decode, batch 8, inputs in the EP's memory, a 512-token
# prefill); from them: the GQA decode kernel's 512-thread blocks became the default, the device
# writes' all-blocks kernel lost its per-thread pointer arrays (2.2 ms of a prefill), and MLX's
# CUDA graphs of 100 operations (MLX_MAX_OPS_PER_BUFFER's default on sm_90) look like the reason
# a step waits 1.3-1.7 ms after its last launch. So first the graph size A/B of a fp16 decode
# step (100, MLX's default there, against 25), with the host inputs' prefetch (opt-in,
# runtime/cuda_prefetch.h) as a third setting, in alternating order; then the timelines at the
# defaults (is the prefill's write now ~20 us?), the LLM peers, and the split of the GPU tests
# that changed or never finished (test_llm again: its decode steps now take blocks of 512).
export BG_STEPS="phases kernels llm split" \
  PHASES_MODELS=fp16 PHASES_PROMPT= PHASES_ROUNDS=2 PHASES_TIMEOUT=480 PHASES_BERT= \
  PHASES_SETTINGS="MLX_MAX_OPS_PER_BUFFER=100;MLX_MAX_OPS_PER_BUFFER=25;MLX_MAX_OPS_PER_BUFFER=25 ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS=1" \
  KERNELS_VIA=timeline KERNELS_MODELS=fp16 KERNELS_PROMPT=512 KERNELS_BATCH8=1 \
  SPLIT_TESTS="tests/python/ops/test_fused_gpu_paths.py::test_norm_kernel tests/python/ops/test_fused_gpu_paths.py::test_decode_step_kernel_blocks tests/python/ops/test_fused_gpu_paths.py::test_decode_step_by_kernel tests/python/test_device_memory.py tests/python/test_llm.py tests/python/ops/test_quantized.py::test_gpu_prefill_dequantize_kernel" \
  SPLIT_JOBS=10 SPLIT_TIMEOUT=420
# A lease that starts with less than ~1,300 s of device budget left: the A/B and the split only,
# cut to fit (`. tools/gpu/lease_env.sh short`).
export CONF_TIMEOUT=660
if [ "${1:-}" = short ]; then
  export BG_STEPS="phases split" SPLIT_TIMEOUT=330 SPLIT_JOBS=8
fi
