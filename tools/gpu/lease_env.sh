# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (thirty-fifth session): conformance has run whole on an H100 (1,884 tests: 1,221
# strict, 0 claimed wrong), and of the 55 parity files 52 have passed whole there; the thirty-fifth
# session's split (1,337 tests, 12 processes, 480 s, the three opt-ins on) passed test_real_models
# (the models carried in the lease's first call), test_pool, test_attention, test_normalization and
# test_torch_models whole, 0 failed, and was cut before the rest. Never run on a GPU at the current
# tests: 13 of test_unary's clip cases, test_conv's Conv + ReLU 3x3 (its five siblings of the same
# mend passed), test_arithmetic's two float64-exponent Pow cases (mended into a skip on a GPU), and
# the kernels' GPU tests (the few-rows kernel's, the softmax kernel's, the heads kernel's and the
# norm kernel's residual Adds). They come first here, alone in the split (~100 tests).
#
# The A/Bs of the thirty-fifth session: the few-rows kernel at batch 8 (4.41 vs 4.51 ms, within the
# host's spread) and BERT with the heads kernel (3.31 off, 3.48 on, 3.23 on with NORM_ADD) are
# inconclusive: the heads kernel moved BERT's bottleneck to the GPU (the run waits 1.6 ms for it,
# 0.4 without). Since the lease the heads kernel reads K's and V's rows 16 bytes a lane (~70 load
# instructions a BERT query row where ~519; `test_heads_attention_kernel` in the split runs it).
# The BERT A/B here adds NORM_ADD alone and the timeline gives the heads kernel's GPU time.
export BG_STEPS="split phases kernels bert llm" SPLIT_TIMEOUT=300 SPLIT_JOBS=12
export ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1
T=tests/python/ops
export SPLIT_TESTS="$T/test_matmul.py::test_rows_product_kernel $T/test_matmul.py::test_few_rows_by_constant_weights \
$T/test_fused_gpu_paths.py::test_softmax_kernel $T/test_fused_gpu_paths.py::test_heads_attention_kernel \
$T/test_fused_gpu_paths.py::test_norm_takes_its_residual_add \
$T/test_unary.py::test_clip_versions $T/test_unary.py::test_clip_int $T/test_unary.py::test_clip_int_opset12 \
$T/test_unary.py::test_clip_attributes_opset6 $T/test_unary.py::test_clip_constant_bounds_bit_for_bit \
$T/test_unary.py::test_clip_constant_bounds_are_one_primitive_each \
$T/test_conv.py::test_conv_activation $T/test_conv.py::test_conv_activation_with_another_reader \
$T/test_arithmetic.py::test_pow_by_a_constant_two_or_three_is_orts_product"
# BERT alone (PHASES_MODELS=none): off, NORM_ADD alone, both; two rounds of 33 runs.
export PHASES_MODELS=none PHASES_ROUNDS=2 PHASES_TIMEOUT=300 \
  PHASES_BERT_SETTINGS="ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=0 ONNXRUNTIME_EP_MLX_NORM_ADD=0;ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=0 ONNXRUNTIME_EP_MLX_NORM_ADD=1;ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1"
# BERT's timeline with the heads kernel on (its GPU time against the two products and the softmax
# it replaces), then the fp16 decode step's.
export KERNELS_MODELS=fp16 KERNELS_VIA=timeline \
  KERNELS_ENV="ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1"
# A lease with ~900-1,200 s: the split and the BERT A/B.
if [ "${1:-}" = mid ]; then
  export BG_STEPS="split phases"
fi
# Under ~900 s: the split alone.
if [ "${1:-}" = short ]; then
  export BG_STEPS="split"
fi
