# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (thirty-third session): an H100 ran the first half of conformance and the parity
# files at the defaults (PART=0/2): conformance 942 tests, 611 strict, claimed_wrong 0, one cold-
# cache time-out (MaxPool with argmax, as in the twenty-sixth session); 28 files, 25 whole, three
# failures that were the tests' own (mended: Pow's float64 exponents skip where float64 stays on
# ORT; the few-rows kernel's census missed the bias cases, which ORT's MatMulAddFusion makes Gemms,
# now taken by the kernel too), and test_quantized stopped at its last five tests (the heavy GPU
# ones, each a subprocess over part of the file). The few-rows kernel's A/B: batch-8 fp16 decode
# 6.25 / 7.43 ms -> 5.07 / 4.55 ms (prefill b8 22.4 -> 23.3 ms, unexplained).
#
# This lease: the second half (conformance's PART=1/2, the parity files the first half left, named in
# PARITY_ONLY), then a split of test_quantized's heavy GPU tests (cut in the first half), the few-rows
# kernel's tests with the Gemm cases, the softmax kernel's test (the row's length now read at run
# time: written after the lease) and test_llm, all with ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1: the
# evidence to make the few-rows kernel a default (its values held in the first half's parity; the
# bias cases, through Gemm, have not run on a GPU); then one round of the kernel's A/B (`rows`, ~3
# min) at batch 1 and 8, MLX's gemv and cuBLASLt (0) against the kernel for every product of 1-8
# rows (all): K, N and the rows are now read at run time (one compile a dtype instead of one a
# (K, N) pair), which may cost the kernel some speed, and batch 1 says whether it reads weights as
# fast as MLX's gemv (what fusing the norms and SiLU into the products would need).
export BG_STEPS="parity split rows" PART="${PART:-1/2}" BG_BUDGET=960 SPLIT_TIMEOUT=400 SPLIT_JOBS=12
export ROWS_ROUNDS=1 ROWS_SETTINGS="0 all" ROWS_BATCHES=1,8
export ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1
# The first half's one conformance time-out (cold-cache compiles over the runner's 60 s), again.
export CONF_AGAIN=test_maxpool_with_argmax_2d_precomputed_pads
# The parity files the first half did not run, by name: PART's every other file follows the shell's
# collation, and the GPU image's is not this machine's (parity_files in device_session.sh).
export PARITY_ONLY="test_torch_models test_real_models test_dynamic_shapes test_constant_fold test_folding \
test_kernel_reuse test_package_and_diagnostics test_provider_options test_activation_extra test_attention \
test_attention_contrib_gqa test_attention_contrib_rotary test_bitwise test_contrib_matmul test_control_flow test_conv \
test_einsum test_gather_elements test_logical test_normalization_image test_pad test_pool test_recurrent test_resize \
test_rotary_embedding test_tensor_misc test_unary"
Q=tests/python/ops/test_quantized.py
export SPLIT_TESTS="$Q::test_gpu_decode_kernel_and_quantized_matmul $Q::test_gpu_decode_kernel_word_loads \
$Q::test_gpu_prefill_dequantize_kernel $Q::test_transposed_a_reaches_the_kernel_as_a_view \
tests/python/ops/test_matmul.py::test_rows_product_kernel tests/python/ops/test_matmul.py::test_few_rows_by_constant_weights \
tests/python/ops/test_fused_gpu_paths.py::test_softmax_kernel tests/python/test_llm.py"
# A lease with ~1,100-1,400 s: the half of parity alone.
if [ "${1:-}" = mid ]; then
  export BG_STEPS="parity" BG_BUDGET=900
fi
# Under ~1,100 s: the split alone.
if [ "${1:-}" = short ]; then
  export BG_STEPS="split"
fi
