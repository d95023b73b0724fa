# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it). The twenty-sixth session's H100 ran conformance whole (1,217 strict, 0
# wrong), most of the split and the LLM peers with both row kernels on; its phases A/B was cut. So
# the A/B first, on a quiet machine (the row kernels on and off, A B A B: they stay opt-in until it
# shows a gain), the LLM peers, then the split of what is still unread, the kernel timeline and
# conformance last.
export ONNXRUNTIME_EP_MLX_NORM_KERNEL=1 ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=1 BG_STEPS="phases llm split kernels conformance" SPLIT_TESTS="tests/python/ops/test_fused_gpu_paths.py::test_norm_kernel tests/python/test_llm.py tests/python/test_device_memory.py tests/python/ops/test_paged_attention.py tests/python/ops/test_quantized.py::test_gpu_decode_kernel_and_quantized_matmul tests/python/ops/test_quantized.py::test_gpu_prefill_dequantize_kernel" SPLIT_JOBS=10 SPLIT_TIMEOUT=420 KERNELS_VIA=timeline KERNELS_INPUTS_AB=1 KERNELS_BATCH8=1 KERNELS_MODELS=fp16 KERNELS_PROMPT=512 PHASES_MODELS=fp16 PHASES_BERT=1 PHASES_BERT_SETTINGS="ONNXRUNTIME_EP_MLX_NORM_KERNEL=1 ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=1;ONNXRUNTIME_EP_MLX_NORM_KERNEL=0 ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=0" PHASES_ROUNDS=2 PHASES_TIMEOUT=420 PHASES_SETTINGS="ONNXRUNTIME_EP_MLX_NORM_KERNEL=1;ONNXRUNTIME_EP_MLX_NORM_KERNEL=0;ONNXRUNTIME_EP_MLX_NORM_KERNEL=1 ONNXRUNTIME_EP_MLX_DECODE_THREADS=512"
# A lease that starts with less than ~1,300 s of device budget left: the A/B and the split only,
# cut to fit (`. tools/gpu/lease_env.sh short`).
export CONF_TIMEOUT=660
if [ "${1:-}" = short ]; then
  export BG_STEPS="phases split" SPLIT_TIMEOUT=330 SPLIT_JOBS=8
fi
