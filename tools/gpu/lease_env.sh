# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (twenty-ninth session): an H100 (a host whose CPU encoded a decode step in
# 2.3 ms where the twenty-eighth session's took 1.2) ran the GPU tests of what the twenty-eighth
# session wrote: the split decode kernel (SPLIT_ROWS, caches in 1 and 4 blocks), the prompt's
# rotation kernel, the known first prompt, the driver's copy of host inputs, all passed; 62
# float16 MatMulNBits parity cases passed with the new integer-to-float conversion. Not finished:
# test_gpu_decode_kernel_wide_loads (it runs all of test_quantized in one process) and
# test_llm.py (the first split's 150 s were JIT time). One round of the default against every
# opt-in at once: fp16 decode 4.09 / 4.22 ms, int4 4.67 / 4.35, no verdict. So, next:
#   - the split: the rest of test_quantized (the conversion is the default), the wide loads,
#     test_llm, test_matmul (merged MatMuls' columns as one Split primitive, the default since
#     this session, not yet run on a GPU: 44 Slices a decode step become 22 Splits), in 400 s;
#   - the decode A/B per opt-in, two rounds (the second reversed): the default, SPLIT_ROWS=256
#     alone, NORM_KERNEL=1 alone (90 fewer primitives a step, about the GPU time of the three
#     kernels it replaces), every opt-in (NBITS_WIDE=1 for int4, PREFETCH_INPUTS=copy, PREFILL_ROTATE_KERNEL=1 too);
#   - the LLM peers and the kernel timelines with every opt-in (LLM_ENV, KERNELS_ENV): a prefill's
#     timeline shows the rotation kernel and the first prompt without the past buffer.
# Do not read results between the calls of a lease for more than ~20 s: the machine goes back
# 30 s after a call, and a fresh one costs its start and the seven parts again (this session
# lost one so).
S=ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS P=ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS W=ONNXRUNTIME_EP_MLX_NBITS_WIDE
R=ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL N=ONNXRUNTIME_EP_MLX_NORM_KERNEL F=tests/python/ops/test_fused_gpu_paths.py
ALL="$S=256 $P=copy $W=1 $R=1 $N=1"
export BG_STEPS="split phases llm kernels" LLM_ENV="$ALL" \
  SPLIT_TESTS="tests/python/ops/test_quantized.py tests/python/test_llm.py tests/python/test_provider_options.py tests/python/ops/test_matmul.py" \
  SPLIT_JOBS=12 SPLIT_TIMEOUT=400 \
  PHASES_MODELS="fp16 int4" PHASES_PROMPT= PHASES_ROUNDS=2 PHASES_TIMEOUT=600 PHASES_BERT= \
  PHASES_SETTINGS="default;$S=256;$N=1;$ALL" \
  KERNELS_VIA=timeline KERNELS_MODELS="fp16 int4" KERNELS_PROMPT=512 KERNELS_BATCH8= KERNELS_BERT= \
  KERNELS_ENV="$ALL"
export CONF_TIMEOUT=660
# A lease that starts with less than ~1,300 s of device budget left: the tests and one round of
# the decode A/B only (`. tools/gpu/lease_env.sh short`).
# A lease with ~1,100-1,400 s: the timelines first (GPU time a kernel, whatever the host), the
# tests, then the A/B of the default, the norm kernel and every opt-in (`. tools/gpu/lease_env.sh mid`).
if [ "${1:-}" = mid ]; then
  export BG_STEPS="kernels split phases" SPLIT_TIMEOUT=300 PHASES_SETTINGS="default;$N=1;$ALL"
fi
if [ "${1:-}" = short ]; then
  export BG_STEPS="split phases" SPLIT_TIMEOUT=250 PHASES_ROUNDS=1
fi
