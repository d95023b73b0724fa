# The next lease's settings (tools/gpu/README.md, "The next lease"): source this first in every
# park call (each device call is a fresh shell; the background job takes its variables from the
# call that starts it).
#
# Where it stands (thirty-second session): an H100 ran the split of the thirty-first session's GPU
# tests (NBITS_WIDE's parity in six shards and the dequantization's three modes, the grouped and
# heads-last kernels' tests: all passed), the decode A/B (this H100's host was slower: a fp16 step
# 3.6-4.1 ms, host-bound), BERT with the softmax kernel (3.54 against 4.41 ms), the timelines and
# the peers. NBITS_WIDE, the heads-last kernel and the softmax kernel are now defaults (=0 restores
# each); the grouped decode kernel stays opt-in (22 x 34 us against 21.4).
#
# Issue 7's "done when" asks for conformance and the parity files passing on a GPU, last run whole
# in the eleventh (parity) and twenty-sixth (conformance) sessions; the defaults have changed many
# times since. A whole parity run takes more than one lease (>1,500 s with a cold kernel cache,
# seventeenth session), so it runs in two halves, one a lease: PART=0/2 (the files and
# conformance tests k = 0 mod 2), then PART=1/2 in the lease after. Then the few-rows product
# kernel's A/B (ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1, written after this session's lease: a batch-8
# fp16 decode step's 89 products by the EP's kernel instead of cuBLASLt; its GPU test,
# test_matmul.py::test_rows_product_kernel, runs in the parity half that reads test_matmul), then
# BERT against its peers (the softmax kernel's default: the BERT goal) with what is left.
export BG_STEPS="parity rows bert" PART="${PART:-0/2}" BG_BUDGET=1050 BERT_TIMEOUT=240
# A lease with ~1,100-1,400 s: the half of parity alone, a shorter budget.
if [ "${1:-}" = mid ]; then
  export BG_STEPS="parity" BG_BUDGET=900
fi
# Under ~1,100 s: BERT and the LLM peers at the new defaults (the ratios), no parity.
if [ "${1:-}" = short ]; then
  export BG_STEPS="rows bert llm"
fi
