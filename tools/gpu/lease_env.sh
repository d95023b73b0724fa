# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (thirty-fourth session): conformance has run whole on an H100 in two halves
# (1,884 tests: 1,221 strict, 0 claimed wrong; the one time-out passed when run again), and every
# test of 50 of the 55 parity files has passed there (the thirty-third and thirty-fourth sessions'
# halves and splits): every failure was the test's own and is mended (Pow's float64 exponents in
# test_arithmetic; the few-rows census through Gemm; test_conv's Conv + activation values now exact
# in any summation order, where cuDNN's signed sums differed from ORT's by 1.4e-6 in one value).
# Left: test_pool and test_unary (the step's time ran out in them, no failure before),
# test_arithmetic and test_conv (mended, not rerun), test_real_models (skipped: no models there). The few-rows kernel (the row count read at run time) gave a
# batch-8 step of 7.09 ms against cuBLASLt's 6.08 in one round: its PTX put each row's load behind a
# branch. The row count is a constant of the loop again (one instance a count, one compile).
#
# This lease: a split of the parity that is left (test_pool, test_unary) and the files whose
# tests were mended (test_conv, test_arithmetic), the few-rows kernel's GPU tests, the softmax
# kernel's (its row length read at run time: never run on a GPU), the heads-attention kernel's
# (new: Softmax(Q K^T) V over heads in one kernel, opt-in), then the A/B of the few-rows
# kernel in step_phases (batch 8, 33 runs a setting, two rounds: 10-run medians of bench_llm_gpu
# spread 1 ms between rounds) and BERT's with the heads-attention kernel, the timelines (batch 1
# and 8, BERT with the heads kernel), BERT against its peers (the softmax kernel with its run-time
# length) and the LLM peers, all with ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 (but the A/B's 0 setting).
export BG_STEPS="split phases kernels bert llm" SPLIT_TIMEOUT=480 SPLIT_JOBS=12
# Thirty-fifth session: the three opt-ins on for the whole lease (the candidates for defaults), so
# the split runs the attention, normalization and torch-export parity files with them; the A/Bs
# name every switch in every setting.
export ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1
# PHASES_PROMPT: the batch-8 prefill too (the thirty-third session's two rounds and this one's had
# it ~1 ms slower with the kernel on, though no product of a prefill has 2-8 rows)
# BERT-base fp16 with the heads-attention kernel (new, opt-in) off and on, and with the residual
# Adds in the norm kernel too (NORM_ADD, new, opt-in), two rounds.
export PHASES_MODELS=fp16 PHASES_BATCH=8 PHASES_PROMPT=512 PHASES_ROUNDS=2 PHASES_TIMEOUT=300 \
  PHASES_SETTINGS="ONNXRUNTIME_EP_MLX_ROWS_KERNEL=0;ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1" \
  PHASES_BERT_SETTINGS="ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=0 ONNXRUNTIME_EP_MLX_NORM_ADD=0;ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=0;ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1"
export KERNELS_MODELS=fp16 KERNELS_VIA=timeline KERNELS_BATCH8=1 \
  KERNELS_ENV="ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 ONNXRUNTIME_EP_MLX_NORM_ADD=1"
T=tests/python/ops
# test_real_models: its 14 tests skipped in the thirty-fourth session's parity (the models come from
# PyPI, which the GPU machine cannot reach): the lease's first call carries build/models/real (34 MB,
# a call of its own: a part and the tree fill most of a call's 64 MiB), which stays while the
# machine is warm.
export SPLIT_TESTS="tests/python/test_real_models.py $T/test_attention.py $T/test_normalization.py tests/python/test_torch_models.py $T/test_pool.py $T/test_unary.py $T/test_conv.py $T/test_arithmetic.py \
$T/test_matmul.py::test_rows_product_kernel $T/test_matmul.py::test_few_rows_by_constant_weights \
$T/test_fused_gpu_paths.py::test_softmax_kernel $T/test_normalization.py::test_softmax_rows_of_changing_length \
$T/test_fused_gpu_paths.py::test_heads_attention_kernel $T/test_normalization.py::test_heads_attention_as_exported \
$T/test_fused_gpu_paths.py::test_norm_takes_its_residual_add"
# A lease with ~900-1,200 s: the split and the A/B.
if [ "${1:-}" = mid ]; then
  # no prefill A/B (none of its products has 2-8 rows): the decode and BERT A/Bs fit the lease
  export BG_STEPS="split phases" PHASES_PROMPT=
fi
# Under ~900 s: the split alone.
if [ "${1:-}" = short ]; then
  export BG_STEPS="split"
fi
