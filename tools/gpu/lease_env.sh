# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it). Parity first (split, conformance), then the A/B benchmarks. The split takes
# what the twenty-fourth and twenty-fifth sessions' H100 splits did not reach (the normalization files
# and the fused paths' other GPU cases passed whole there, with both row kernels on; the two
# failures of both runs were the tests' own, mended). Conformance first: 1,000 of 1,884 tests took
# 276 s on an H100 (8 jobs), the whole run wants ~560 s.
export ONNXRUNTIME_EP_MLX_NORM_KERNEL=1 ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=1 BG_STEPS="launch conformance split phases kernels llm" SPLIT_TESTS="tests/python/ops/test_fused_gpu_paths.py::test_norm_kernel tests/python/test_llm.py tests/python/test_device_memory.py tests/python/ops/test_paged_attention.py tests/python/ops/test_quantized.py::test_gpu_decode_kernel_and_quantized_matmul tests/python/ops/test_quantized.py::test_gpu_prefill_dequantize_kernel" SPLIT_JOBS=14 SPLIT_TIMEOUT=420 KERNELS_VIA=timeline KERNELS_INPUTS_AB=1 KERNELS_BATCH8=1 KERNELS_MODELS=fp16 PHASES_MODELS=fp16 PHASES_BERT=1 PHASES_BERT_SETTINGS="ONNXRUNTIME_EP_MLX_NORM_KERNEL=1 ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=1;ONNXRUNTIME_EP_MLX_NORM_KERNEL=0 ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=0" PHASES_ROUNDS=2 PHASES_TIMEOUT=420 PHASES_SETTINGS="ONNXRUNTIME_EP_MLX_NORM_KERNEL=1;ONNXRUNTIME_EP_MLX_NORM_KERNEL=0;ONNXRUNTIME_EP_MLX_NORM_KERNEL=1 ONNXRUNTIME_EP_MLX_DECODE_THREADS=512"
# A lease that starts with less than ~1,300 s of device budget left: the parity steps only, cut
# to fit (`. tools/gpu/lease_env.sh short`).
export CONF_TIMEOUT=660
if [ "${1:-}" = short ]; then
  export BG_STEPS="conformance split" SKIP_LLM_MAKE=1 SPLIT_TIMEOUT=330 SPLIT_JOBS=8
fi
