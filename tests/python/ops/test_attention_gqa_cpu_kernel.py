"""GroupQueryAttention's CPU kernel (src/ops/attention_gqa_cpu.cc) against ORT's CPU EP: on MLX's
CPU device the attention core runs as one primitive that reads seqlens_k when it runs and visits
the attended keys only. Decode into a shared buffer at lengths from 1 to max_length, batches of
different lengths, every scores option, float16/bfloat16, the AVX2 loops (head size a multiple
of 8) and the portable ones, enough work to split over threads; the verbose log proves the kernel
took the node, and ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL=0 gives the composed path back.
(test_attention_contrib_gqa.py's cases take the kernel too on this device.)"""
import os
from contextlib import contextmanager

import numpy as np
import pytest

from harness import BF16, assert_close, check_parity, mlx_device, run_cpu, run_mlx
from harness_bf16 import check_bf16
from test_attention_contrib_gqa import gqa

VERBOSE = "ONNXRUNTIME_EP_MLX_VERBOSE"
KERNEL = "ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL"
KERNEL_LINE = "attention over the attended keys through the CPU kernel"
on_cpu = pytest.mark.skipif(mlx_device() != "cpu", reason="the kernel runs on MLX's CPU device only "
                            "(the EP's MLX device here: " + mlx_device() + ")")


@contextmanager
def scoped_env(**values):
    """Sets (None: unsets) environment variables for the block (read when the EP traces)."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def check(model, feeds, capfd=None):
    dtype = feeds["query"].dtype
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {}
    if capfd is None:
        return check_parity(model, feeds, **tol)
    capfd.readouterr()
    with scoped_env(**{VERBOSE: "1"}):
        check_parity(model, feeds, **tol)
    return KERNEL_LINE in capfd.readouterr().err


@on_cpu
@pytest.mark.parametrize("kernel", ["1", "0"])
def test_kernel_takes_the_node(kernel, capfd):
    model, feeds = gqa(2, 1, 14, 2, 64, seqlens=[7, 30], total=30, past_len=32, rotary=(64, 0))
    with scoped_env(**{KERNEL: kernel}):
        assert check(model, feeds, capfd) == (kernel == "1")


# Qwen2-0.5B's heads (14 / 2, head 64) in a buffer of max_length 64.
@pytest.mark.parametrize("seqlens", [[1], [2], [33], [63], [64], [5, 64], [64, 1], [17, 40]],
                         ids=lambda v: "_".join(map(str, v)))
def test_decode_lengths(seqlens):
    check(*gqa(len(seqlens), 1, 14, 2, 64, seqlens=seqlens, total=max(seqlens), past_len=64))


@pytest.mark.parametrize("head_size", [8, 40, 64])
@pytest.mark.parametrize("loops", ["1", "portable"], ids=["simd", "portable"])
def test_head_sizes_and_loops(head_size, loops):
    """The AVX2 loops (8: one lane group; 40: a tail of 8) and the portable ones (ORT wants a head
    size that is a multiple of 8, so ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL=portable selects them)."""
    extra = {"softcap": 2.0, "sink": True, "bias": True, "local_window_size": 6}
    for dtype in (np.float32, np.float16):
        with scoped_env(**{KERNEL: loops}):
            check(*gqa(2, 1, 4, 2, head_size, seqlens=[9, 20], total=20, past_len=24, dtype=dtype, **extra))
            check(*gqa(1, 3, 4, 2, head_size, seqlens=[20], total=20, past_len=24, dtype=dtype, **extra))


OPTIONS = [{"local_window_size": 1}, {"local_window_size": 16}, {"softcap": 2.0}, {"sink": True},
           {"smooth_softmax": 1}, {"bias": True}, {"scale": 0.05},
           {"softcap": 1.5, "bias": True, "sink": True, "local_window_size": 5, "rotary": (64, 1)}]


@pytest.mark.parametrize("extra", OPTIONS, ids=lambda d: "_".join(f"{k}{v}" for k, v in d.items()))
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_decode_options(extra, dtype):
    check(*gqa(2, 1, 14, 2, 64, seqlens=[3, 47], total=47, past_len=48, dtype=dtype, **extra))


@pytest.mark.parametrize("extra", [{}, {"local_window_size": 4, "softcap": 3.0, "sink": True}],
                         ids=["plain", "window_softcap_sink"])
def test_bfloat16_decode(extra):
    """ORT's CPU EP has no bfloat16 GroupQueryAttention: its float32 result rounded is the reference."""
    args = dict(seqlens=[5, 31], total=31, past_len=32, rotary=(64, 0), **extra)
    model, feeds = gqa(2, 1, 14, 2, 64, dtype=np.float32, **args)
    feeds = {k: (v.astype(BF16).astype(np.float32) if v.dtype == np.float32 else v) for k, v in feeds.items()}
    expected = run_cpu(model, feeds)
    bf16_model, _ = gqa(2, 1, 14, 2, 64, dtype=BF16, **args)
    check_bf16(bf16_model, {k: (v.astype(BF16) if v.dtype == np.float32 else v) for k, v in feeds.items()},
               expected)


@pytest.mark.parametrize("seqlens", [[300, 512], [512, 1]], ids=lambda v: "_".join(map(str, v)))
def test_threads(seqlens):
    """Enough keys (14 heads x 64 x ~800) that the (batch, head) tasks go to the worker pool."""
    check(*gqa(2, 1, 14, 2, 64, seqlens=seqlens, total=max(seqlens), past_len=512, rotary=(64, 0)))


@pytest.mark.parametrize("case", ["prompt_padded", "chunk_after_past", "chunk_window"])
def test_several_rows(case):
    """Rows s > 0 in one task: a right-padded prompt in the buffer, a chunk of 5 after a past."""
    if case == "prompt_padded":
        check(*gqa(2, 21, 14, 2, 64, seqlens=[21, 9], total=21, past_len=40))
    else:
        window = {"local_window_size": 3} if case == "chunk_window" else {}
        check(*gqa(1, 5, 14, 2, 64, seqlens=[30], total=30, past_len=40, rotary=(64, 0), **window))


# (seqlens, total, S): lengths ORT's CPU EP rejects or never sees (an entry of length 0, a total
# below an entry's length, a chunk longer than an entry's length). A total past the buffer fails
# the run with or without the kernel (test_attention_contrib_gqa's non-shared layout test).
ODD_LENGTHS = [([0, 5], 5, 1), ([3, 5], 4, 1), ([1], 6, 3)]


@on_cpu
@pytest.mark.parametrize("extra", [{}, {"local_window_size": 3}, {"local_window_size": 3, "sink": True}],
                         ids=["plain", "window", "window_sink"])
@pytest.mark.parametrize("lengths", ODD_LENGTHS, ids=lambda v: "_".join(map(str, v[0])) + f"_t{v[1]}_s{v[2]}")
def test_odd_lengths_as_composed(lengths, extra):
    """Where there is no ORT reference the kernel gives what the composed ops give, NaNs (a row
    whose window holds no key) and zeros alike."""
    seqlens, total, seq = lengths
    model, feeds = gqa(len(seqlens), seq, 4, 2, 8, seqlens=[5] * len(seqlens), total=total, past_len=8, **extra)
    feeds["seqlens_k"] = np.asarray(seqlens, np.int32) - 1
    outs = {}
    for kernel in ("0", "1"):
        with scoped_env(**{KERNEL: kernel}):
            outs[kernel], mlx, total_nodes = run_mlx(model, feeds)
        assert mlx == total_nodes == 1
    for composed, kernel in zip(outs["0"], outs["1"]):
        np.testing.assert_array_equal(np.isnan(kernel), np.isnan(composed))
        assert_close(np.nan_to_num(kernel), np.nan_to_num(composed), rtol=1e-5, atol=1e-5)


# Decode cases of test_attention_contrib_gqa.py that the whole-step primitive takes: separate and
# packed QKV, full / partial / interleaved rotation, position_ids, a window, float16, and an entry
# whose new row lies at the buffer's end.
STEP_CASES = ["test_decode_shared_buffer[4-2-packed-12_7]", "test_decode_shared_buffer[2-2-separate-4_9]",
              "test_rotary[decode-partial-1]", "test_rotary[decode-full-0]", "test_rotary_packed_decode[packed]",
              "test_position_ids[1-decode]", "test_local_window[decode-3]", "test_float16[plain-decode]",
              "test_scores_options[decode-scale]"]


@on_cpu
def test_decode_step_primitive():
    """A decode step's node is one GqaDecodeStepCpu (src/ops/attention_gqa_step_cpu.cc: the split,
    the rotation, attention through this kernel's loops, the output's layout and the new K / V
    rows) in those cases, which hold ORT's CPU EP's values; ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL=core
    gives the composed rest around the attention kernel back, in more primitives."""
    from harness import census_of_tests
    test_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_attention_contrib_gqa.py")
    step, _ = census_of_tests(test_file, STEP_CASES)
    core, _ = census_of_tests(test_file, STEP_CASES, env={KERNEL: "core"})
    assert len(step) == len(core) >= len(STEP_CASES), (step, core)
    assert all("GqaDecodeStepCpu" in line and "GqaAttentionCpu" not in line for line in step), step
    assert all("GqaAttentionCpu" in line and "GqaDecodeStepCpu" not in line for line in core), core
    total = lambda line: int(line.split("total ")[1].split(":")[0])  # noqa: E731
    assert all(total(a) + 5 < total(b) for a, b in zip(step, core)), list(zip(step, core))
