# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (thirtieth session): an H200 ran the timelines with every opt-in, the split and
# the decode A/B. Made defaults from it: the norm kernel (eval a run lower in 4 of 4 pairings, 90
# fewer primitives), the driver's copy of host inputs (the mask's Sum 1.7 us, was 183-295), the
# prompt-rotation kernel (201 us a 512-token prompt, was 1,067). Written after it, not yet on a
# GPU: NBITS_WIDE=1 now also stores the prefill's dequantized values 16 bytes at a time (11.5 of an
# int4 prefill's 19.3 ms was that kernel). So, next, in this order:
#   - the split: the parity files the new defaults change on a GPU (the contrib and ai.onnx norms,
#     GQA's prompts, device memory), the tests the last split did not reach (the wide loads, the
#     prefill dequantization, the rest of test_matmul), test_llm;
#   - the timelines of the new defaults (fp16, int4, prompt 512), int4's with NBITS_WIDE=1
#     (KERNELS_ENV: the dequantization's stores, the decode kernel's wide loads);
#   - the LLM peers (genai-cuda, ORT CUDA EP, PyTorch) at the new defaults: no ratio since the
#     twenty-eighth session;
#   - the decode A/B: the new default, NBITS_WIDE=1, SPLIT_ROWS=256, two rounds.
#   - the census (kernel_census.py): which launches the fp16 step's 23 general copies sit between.
# Do not read results between the calls of a lease for more than ~20 s: the machine goes back
# 30 s after a call, and a fresh one costs its start and the seven parts again (this session
# lost one so).
S=ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS W=ONNXRUNTIME_EP_MLX_NBITS_WIDE
F=tests/python/ops/test_fused_gpu_paths.py Q=tests/python/ops/test_quantized.py
export BG_STEPS="split kernels llm phases census" LLM_ENV= \
  SPLIT_TESTS="tests/python/ops/test_contrib_normalization.py tests/python/ops/test_normalization.py tests/python/ops/test_attention_contrib_gqa.py tests/python/test_device_memory.py $F::test_norm_kernel $F::test_prefill_rotate_kernel $Q::test_gpu_decode_kernel_wide_loads $Q::test_gpu_prefill_dequantize_kernel tests/python/ops/test_matmul.py tests/python/test_llm.py" \
  SPLIT_JOBS=12 SPLIT_TIMEOUT=400 \
  PHASES_MODELS="fp16 int4" PHASES_PROMPT= PHASES_ROUNDS=2 PHASES_TIMEOUT=600 PHASES_BERT= \
  PHASES_SETTINGS="default;$W=1;$S=256" \
  KERNELS_VIA=timeline KERNELS_MODELS="fp16 int4" KERNELS_PROMPT=512 KERNELS_BATCH8= KERNELS_BERT= \
  KERNELS_ENV="$W=1"
export CONF_TIMEOUT=660
# A lease with ~1,100-1,400 s: the timelines, the peers and the split (`. tools/gpu/lease_env.sh mid`).
if [ "${1:-}" = mid ]; then
  export BG_STEPS="split kernels llm" SPLIT_TIMEOUT=300
fi
# Under ~1,100 s: the split (the new defaults' parity on a GPU) and the peers
# (`. tools/gpu/lease_env.sh short`).
if [ "${1:-}" = short ]; then
  export BG_STEPS="split llm" SPLIT_TIMEOUT=250
fi
