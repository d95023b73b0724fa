# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (thirty-sixth session): conformance has run whole on an H100 (1,884 tests: 1,221
# strict, 0 claimed wrong); the thirty-sixth session's lease ran the 109 tests never run on a GPU
# (100 passed, 8 skipped, 1 failed), test_conv + test_arithmetic whole (310 passed, 6 skipped),
# test_unary whole (444 passed, 38 skipped) and test_fused_gpu_paths (the three opt-ins on): all
# passed but test_heads_attention_kernel, whose census of the Softmax(Q K^T + mask) @ V case without
# a scale counted a Matmul: the softmax launch's placeholder (its scores) was an input of the heads
# kernel, so the product it replaces was evaluated. Mended after the lease (Q stands in); two of
# that file's processes stopped at 120 s. So: test_fused_gpu_paths whole first (300 s), opt-ins on.
#
# The A/Bs of the thirty-sixth session: the few-rows kernel at batch 8 lost both rounds (4.83 / 4.79
# ms off, 5.06 / 4.97 on); BERT with the heads kernel and NORM_ADD 3.25 / 3.23 ms against 3.63 off
# and 3.74 with NORM_ADD alone, but the timeline gave the heads kernel 862 us of BERT's 1,887 us of
# GPU time (72 us a layer, 16-byte loads and all): why is what ncu's sections say (KERNELS_DETAIL).
# Thirty-seventh session: the heads kernel on tensor cores (attention_heads_mma_cuda.cc, the
# default of HEADS_ATTENTION=1 for float16 / bfloat16; "rows" keeps the CUDA-core one): its parity
# runs in test_fused_gpu_paths (test_heads_attention_kernel, both kernels), BERT's phases compare
# off / rows / tensor cores (NORM_ADD on with either), the timeline gives its GPU time.
export BG_STEPS="split kernels bert phases" SPLIT_TIMEOUT=300 SPLIT_JOBS=12
export ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1
export SPLIT_TESTS="tests/python/ops/test_fused_gpu_paths.py"
export KERNELS_DETAIL= KERNELS_MODELS=none KERNELS_VIA=timeline \
  KERNELS_ENV="ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1"
export PHASES_MODELS=none PHASES_ROUNDS=1 PHASES_TIMEOUT=300 \
  PHASES_BERT_SETTINGS="ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=0 ONNXRUNTIME_EP_MLX_NORM_ADD=0;ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=rows ONNXRUNTIME_EP_MLX_NORM_ADD=1;ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1"
if [ "${1:-}" = mid ]; then
  export BG_STEPS="split kernels"
fi
if [ "${1:-}" = short ]; then
  export BG_STEPS="split"
fi
