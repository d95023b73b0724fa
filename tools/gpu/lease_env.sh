# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (twenty-eighth session): its first H100 lease made CUDA graphs of 25 operations
# the default (fp16 decode 4.00 -> 3.67 ms) and showed the GQA decode kernel at ~20 us a layer
# (32 blocks at batch 1), a prefill's 44 rotations at ~24 us each and int4's MatMulNBits kernel
# at 0.6 TB/s. A second lease never came (no machine twice, then too little budget). Not yet run
# on a GPU, so first their GPU tests, then one A/B of all of them against the default:
#   - a known first prompt's attention without the past buffer (the default now; test_llm's
#     growing-mask tokens with the GPU's graphs forced onto the CPU pass);
#   - ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=N: the decode kernel's past rows split among blocks;
#   - ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS=copy: host inputs copied into the EP's memory by the driver;
#   - ONNXRUNTIME_EP_MLX_NBITS_WIDE=1: MatMulNBits' decode kernel reading 16 bytes of B a lane and
#     x a word's values at a time (twenty-ninth session; and, by default now, B's integers to
#     float without I2F, in both MatMulNBits kernels);
#   - ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL=1: a prompt's rotation and V's layout in one kernel.
# The A/B: the default against all of them and the norm kernel (NORM_KERNEL=1, opt-in since the
# twenty-second session: 90 fewer primitives a decode step; its one A/B, in the twenty-seventh
# session, ran it only beside other changes). The LLM peers and the kernel timelines run with all
# of them (LLM_ENV, KERNELS_ENV): the twenty-eighth session's ran the default.
# After the background run, one `run pytest` call with ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=16
# exported and PYTEST_FILES=tests/python/test_llm.py: test_llm's 64-row caches in 4 blocks a head.
S=ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS P=ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS W=ONNXRUNTIME_EP_MLX_NBITS_WIDE
R=ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL N=ONNXRUNTIME_EP_MLX_NORM_KERNEL F=tests/python/ops/test_fused_gpu_paths.py
ALL="$S=256 $P=copy $W=1 $R=1 $N=1"
export BG_STEPS="split phases llm kernels" LLM_ENV="$ALL" \
  SPLIT_TESTS="$F::test_decode_step_kernel_splits $F::test_prefill_rotate_kernel $F::test_gqa_known_first_prompt_reads_no_past $F::test_gqa_known_total_float32 $F::test_gqa_float16 $F::test_decode_step_by_kernel tests/python/ops/test_quantized.py::test_gpu_decode_kernel_wide_loads tests/python/test_device_memory.py::test_host_inputs_prefetched tests/python/test_provider_options.py tests/python/test_llm.py" \
  SPLIT_JOBS=10 SPLIT_TIMEOUT=300 \
  PHASES_MODELS="fp16 int4" PHASES_PROMPT=512 PHASES_ROUNDS=2 PHASES_TIMEOUT=600 PHASES_BERT= \
  PHASES_SETTINGS="default;$ALL" \
  KERNELS_VIA=timeline KERNELS_MODELS="fp16 int4" KERNELS_PROMPT=512 KERNELS_BATCH8= KERNELS_BERT= \
  KERNELS_ENV="$ALL"
export CONF_TIMEOUT=660
# A lease that starts with less than ~1,300 s of device budget left: the tests and one round
# of the decode A/B only (`. tools/gpu/lease_env.sh short`).
if [ "${1:-}" = short ]; then
  export BG_STEPS="split phases" SPLIT_TIMEOUT=150 PHASES_MODELS="fp16 int4" PHASES_ROUNDS=1 PHASES_PROMPT=
fi
