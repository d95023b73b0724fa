# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (thirty-first session): an H100 ran the split of the new defaults' parity files
# (481 passed, 0 failed; the wide-loads and prefill-dequantization tests outran the split's 400 s),
# the timelines with NBITS_WIDE=1 (int4 prefill 10.56 ms, its dequantization 2.5 ms, was 11.5), the
# LLM peers and the decode A/B with the write phase's wait timed apart: a fp16 step's host is done
# ~1.0 ms before the GPU (write 1.07 ms, 1.01 of it waiting), so kernel time counts again. Written
# after it, not yet on a GPU: the GQA decode kernel walks the admitted rows only (the default
# kernel; half its passes at 1,024 of 2,048 rows); the grouped GQA decode kernel
# (ONNXRUNTIME_EP_MLX_DECODE_GROUPED=1); one row's merged-product columns with packed strides (the
# 22 copy_g_nd a fp16 step); the heads-last kernel of the fused attention core
# (ONNXRUNTIME_EP_MLX_HEADS_LAST_KERNEL=1, the prefill's 22 x 22.8 us select); MatMulNBits siblings
# as one node (the default: int4's gate and up, 111 -> 89 launches a step); the wide-loads test in
# six shards. So, next, in this order:
#   - the split: the wide loads' six shards and the dequantization's three modes (NBITS_WIDE's
#     parity: to make it the default), the grouped and heads-last kernels' parity, GQA's file (the admitted-rows
#     change is in the default kernel), test_llm (ColumnParts) and test_matmul;
#   - the decode A/B: the default, GROUPED=1, NBITS_WIDE=1, both, two rounds; BERT-base fp16's with
#     the softmax kernel (opt-in since the twenty-third session, its GPU parity passed in the
#     twenty-fourth, never timed) against the default;
#   - the timelines with the three (the grouped kernel's time against this session's 22 x 21.4 us,
#     the prefill's heads-last kernel against its select's 22 x 22.8 us);
#   - the LLM peers at the defaults (the ratios);
#   - the census: no copy_g_nd left between the SiLU product and the down projection (ColumnParts).
S=ONNXRUNTIME_EP_MLX_DECODE_GROUPED W=ONNXRUNTIME_EP_MLX_NBITS_WIDE L=ONNXRUNTIME_EP_MLX_HEADS_LAST_KERNEL
F=tests/python/ops/test_fused_gpu_paths.py Q=tests/python/ops/test_quantized.py
export BG_STEPS="split phases kernels llm census" LLM_ENV= \
  SPLIT_TESTS="$Q::test_gpu_decode_kernel_wide_loads $Q::test_gpu_prefill_dequantize_kernel $F::test_decode_step_kernel_grouped $F::test_heads_last_kernel $F::test_gqa_float16 tests/python/ops/test_attention_contrib_gqa.py tests/python/test_llm.py tests/python/ops/test_matmul.py" \
  SPLIT_JOBS=12 SPLIT_TIMEOUT=400 \
  PHASES_MODELS="fp16 int4" PHASES_PROMPT= PHASES_ROUNDS=2 PHASES_TIMEOUT=600 PHASES_BERT=1 \
  PHASES_BERT_SETTINGS="default;ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=1" \
  PHASES_SETTINGS="default;$S=1;$W=1;$S=1 $W=1" \
  KERNELS_VIA=timeline KERNELS_MODELS="fp16 int4" KERNELS_PROMPT=512 KERNELS_BATCH8= KERNELS_BERT= \
  KERNELS_ENV="$S=1 $W=1 $L=1"
export CONF_TIMEOUT=660
# A lease with ~1,100-1,400 s: the split, the A/B and the timelines (`. tools/gpu/lease_env.sh mid`).
if [ "${1:-}" = mid ]; then
  export BG_STEPS="split phases kernels" SPLIT_TIMEOUT=300
fi
# Under ~1,100 s: the split and the A/B (`. tools/gpu/lease_env.sh short`).
if [ "${1:-}" = short ]; then
  export BG_STEPS="split phases" SPLIT_TIMEOUT=250 PHASES_MODELS=fp16
fi
