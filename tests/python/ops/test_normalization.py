"""Parity of the normalization family (Softmax, LogSoftmax, LayerNormalization) against ORT's CPU EP."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from harness import (BF16, assert_close, check_parity, make_graph_model, make_model, mlx_device, mlx_session,
                     random_array, run_cpu, run_mlx)
from harness_bf16 import check_bf16


def softmax_model(op, dtype, shape, axis=None, opset=13):
    attrs = {} if axis is None else {"axis": axis}
    return make_model(op, [("x", dtype, list(shape))], [("y", None, None)], attrs, opset=opset)


SOFTMAX_CASES = [
    # (shape, axis or None for the default)
    ((3, 4, 5), None),
    ((3, 4, 5), 0),
    ((3, 4, 5), 1),
    ((3, 4, 5), -2),
    ((2, 3, 4, 5), 2),
    ((7,), 0),
    ((1, 1), None),
    ((2, 0, 3), None),
    ((2, 0, 3), 0),
]


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=lambda c: f"{c[0]}-axis{c[1]}")
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_float32(op, case, opset):
    shape, axis = case
    if opset < 11 and axis is not None and axis < 0:
        pytest.skip("negative axis needs opset 11")
    x = random_array(shape, np.float32, np.random.default_rng(0), low=-4, high=4)
    check_parity(softmax_model(op, np.float32, shape, axis, opset), {"x": x})


@pytest.mark.parametrize("dtype", [np.float16, np.float64], ids=["f16", "f64"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_other_floats(op, opset, dtype):
    shape = (3, 4, 50)
    x = random_array(shape, np.float32, np.random.default_rng(1), low=-6, high=6).astype(dtype)
    check_parity(softmax_model(op, dtype, shape, 1, opset), {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_bf16(op):
    x = random_array((3, 40), np.float32, np.random.default_rng(2), low=-4, high=4)
    ref = run_cpu(softmax_model(op, np.float32, x.shape), {"x": x})
    check_bf16(softmax_model(op, BF16, x.shape), {"x": x}, ref)


@pytest.mark.parametrize("shape,axis", [((2, 50257), -1), ((4096, 3), 0)], ids=["vocab", "axis0"])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_long_rows(op, shape, axis):
    """Long rows: the sum of exp() must stay as accurate as ORT's."""
    x = random_array(shape, np.float32, np.random.default_rng(3), low=-5, high=5)
    check_parity(softmax_model(op, np.float32, shape, axis), {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_rows_of_changing_length(op):
    """One session, rows whose length changes from run to run as a growing KV cache's or a new
    prompt's attention rows do (across the GPU kernel's block sizes, which read the length at run
    time): each run ORT's values, on MLX."""
    model = make_model(op, [("x", np.float32, [3, "n"])], [("y", None, None)], opset=13)
    sess = mlx_session(model)
    rng = np.random.default_rng(4)
    for n in (7, 64, 65, 128, 129, 1000, 1024, 1025, 4097):
        x = random_array((3, n), np.float32, rng, low=-6, high=6)
        assert_close(sess.run(None, {"x": x})[0], run_cpu(model, {"x": x})[0], rtol=1e-5, atol=1e-6, what=f"n={n}")
    _, mlx, total = run_mlx(model, {"x": x})
    assert mlx == total == 1


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_special_values(op):
    inf = np.inf
    x = np.array([[-inf, -inf, -inf], [-inf, 1, 2], [inf, 1, 2], [np.nan, 1, 2], [1000, 0, -1000],
                  [3.0, 3.0, 3.0]], dtype=np.float32)
    check_parity(softmax_model(op, np.float32, x.shape), {"x": x})


@pytest.mark.skipif(mlx_device() != "cpu", reason="the softmax primitive is MLX's CPU device's")
def test_softmax_primitive():
    """On MLX's CPU device a float32 Softmax / LogSoftmax over the last axis is one SoftmaxCpu /
    LogSoftmaxCpu (src/ops/unary_cpu.cc: the composed form's steps in one pass a row), which passes
    the cases above (vocabulary-sized rows, infinities, NaN); ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL=0
    composes them again, and passes them too."""
    import os
    from harness import census_with_and_without
    cases = ["test_softmax_long_rows[Softmax-vocab]", "test_softmax_long_rows[LogSoftmax-vocab]",
             "test_softmax_special_values[Softmax]", "test_softmax_special_values[LogSoftmax]"]
    kernel, composed = census_with_and_without(os.path.abspath(__file__), cases, "ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL")
    assert sum("SoftmaxCpu" in line for line in kernel) >= len(cases), kernel
    assert sum("LogSoftmaxCpu" in line for line in kernel) >= 2, kernel
    assert not any("SoftmaxCpu" in line for line in composed), composed


def scores_softmax_model(op, scale, mask_shape, mask_first=False, shape=(2, 3, 5, 7)):
    """`op` over the last axis of attention-like scores: s, then s / k or s * k (`scale`), then
    + mask (`mask_shape`, broadcast; `mask_first`: Add(mask, scores))."""
    nodes, value = [], "s"
    if scale:
        nodes.append(helper.make_node(scale, ["s", "k"], ["scaled"]))
        value = "scaled"
    if mask_shape:
        nodes.append(helper.make_node("Add", ["m", value] if mask_first else [value, "m"], ["masked"]))
        value = "masked"
    nodes.append(helper.make_node(op, [value], ["y"], axis=-1))
    inputs = [("s", np.float32, list(shape))] + ([("m", np.float32, list(mask_shape))] if mask_shape else [])
    inits = {"k": np.array(2.828427, np.float32)} if scale else {}
    return make_graph_model(nodes, inputs, [("y", np.float32, list(shape))], inits)


SCORE_CASES = {
    "div-mask-b11s": ("Div", (2, 1, 1, 7), False),
    "mul-mask-s": ("Mul", (7,), False),
    "div-maskfirst-1hss": ("Div", (1, 3, 5, 7), True),
    "mask-full": (None, (2, 3, 5, 7), False),
    "mask-row-value": (None, (1, 3, 5, 1), False),
    "div": ("Div", None, False),
    "mul": ("Mul", None, False),
}


@pytest.mark.parametrize("case", SCORE_CASES)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_scaled_masked_scores(op, case):
    """Attention's scores: (s / k or s * k) + mask, then Softmax; on MLX's CPU device the scaling and
    the broadcast mask are read by the softmax primitive's pass (test_softmax_scores_in_primitive)."""
    scale, mask_shape, mask_first = SCORE_CASES[case]
    rng = np.random.default_rng(5)
    feeds = {"s": random_array((2, 3, 5, 7), np.float32, rng, low=-8, high=8)}
    if mask_shape:
        mask = np.where(rng.random(mask_shape) < 0.3, -10000.0, 0.0).astype(np.float32)
        mask.reshape(-1)[1::5] = -np.inf  # causal-style entries; never a whole row
        mask[..., 0] = 0.0
        feeds["m"] = mask
    check_parity(scores_softmax_model(op, scale, mask_shape, mask_first), feeds)


def gpt2_scores_model(op, form, shape=(2, 3, 5, 7)):
    """`op` over GPT-2's exported scores (tests/models/build_models.py's gpt2_decoder): "where" is
    older HF's where(causal, s / k, min) + padding mask; "where-min-mask" the same with the mask
    computed from the fill's constant, (1 - keep) * min, as GPT-2 does; "where-row" one condition a
    row; "where-alone" without the mask; "two-masks" newer HF's (s / k + causal) + padding mask. The
    causal condition and masks are inputs, so that nothing folds them at load time."""
    b, h, q, keys = shape
    nodes = [helper.make_node("Div", ["s", "k"], ["scaled"])]
    inputs = [("s", np.float32, list(shape))]
    inits = {"k": np.array(2.828427, np.float32), "fill": np.array(np.finfo(np.float32).min, np.float32)}
    if form.startswith("where"):
        cond_shape = [1, 1, q, 1] if form == "where-row" else [1, 1, q, keys]
        nodes.append(helper.make_node("Where", ["causal", "scaled", "fill"], ["w"]))
        inputs.append(("causal", np.bool_, cond_shape))
    else:
        nodes.append(helper.make_node("Add", ["scaled", "triu"], ["w"]))
        inputs.append(("triu", np.float32, [q, keys]))
    value = "w"
    if form == "where-min-mask":  # the padding mask (1 - attention_mask) * min, of the fill's constant
        nodes += [helper.make_node("Sub", ["one", "keep"], ["dropped"]),
                  helper.make_node("Mul", ["dropped", "fill"], ["m"])]
        inputs.append(("keep", np.float32, [b, 1, 1, keys]))
        inits["one"] = np.array(1.0, np.float32)
    elif form != "where-alone":
        inputs.append(("m", np.float32, [b, 1, 1, keys]))
    if form != "where-alone":
        nodes.append(helper.make_node("Add", [value, "m"], ["masked"]))
        value = "masked"
    nodes.append(helper.make_node(op, [value], ["y"], axis=-1))
    return make_graph_model(nodes, inputs, [("y", np.float32, list(shape))], inits)


GPT2_SCORE_FORMS = ["where", "where-min-mask", "where-row", "where-alone", "two-masks"]


@pytest.mark.parametrize("form", GPT2_SCORE_FORMS)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_gpt2_scores(op, form):
    """GPT-2's causal scores (a where or a second mask) against ORT's CPU EP; on MLX's CPU device
    the softmax primitive reads the condition, fill and masks itself (test_softmax_scores_in_primitive)."""
    b, h, q, keys = 2, 3, 5, 7
    rng = np.random.default_rng(6)
    feeds = {"s": random_array((b, h, q, keys), np.float32, rng, low=-8, high=8)}
    causal = np.tril(np.ones((q, keys), bool), k=keys - q)
    minimum = np.finfo(np.float32).min
    if form == "where-row":
        feeds["causal"] = np.array([True, False, True, True, False])[None, None, :, None]
    elif form.startswith("where"):
        feeds["causal"] = causal[None, None]
    else:
        feeds["triu"] = np.where(causal, 0.0, minimum).astype(np.float32)
    if form == "where-min-mask":
        keep = np.ones((b, 1, 1, keys), np.float32)
        keep[0, ..., :2] = 0.0  # left padding in the first sequence
        feeds["keep"] = keep
    elif form != "where-alone":
        padding = np.zeros((b, 1, 1, keys), np.float32)
        padding[0, ..., :2] = minimum
        feeds["m"] = padding
    model = gpt2_scores_model(op, form)
    first = check_parity(model, feeds)
    # Later runs take the trace's scalar leaves (k, the fill) as inputs of a second compile
    # (src/runtime/scalars.h): the same values as the first run's, which check_parity compared.
    again, _, _ = run_mlx(model, feeds, runs=3)
    np.testing.assert_array_equal(again[0], first[0])


@pytest.mark.skipif(mlx_device() != "cpu", reason="the softmax primitive is MLX's CPU device's")
def test_a_constant_read_by_the_softmax_and_a_fused_op_is_one_input():
    """GPT-2's min constant is the where's fill (read by the softmax primitive) and a factor of the
    padding mask (a Multiply, which mx::compile fuses): the second compile takes the scalar leaves
    as inputs (src/runtime/scalars.h) for both readers, and its runs evaluate fewer Contiguous
    primitives than the first trace's (3 -> 1); where the softmax primitive kept the constant itself,
    that compile threw and every run kept all three."""
    import os
    import re
    from harness import census_of_tests
    census, _ = census_of_tests(os.path.abspath(__file__), ["test_softmax_of_gpt2_scores[Softmax-where-min-mask]"])

    def contiguous(line):
        found = re.search(r"Contiguous (\d+)", line)
        return int(found.group(1)) if found else 0
    assert len(census) >= 2 and all("SoftmaxCpu" in line for line in census), census
    assert contiguous(census[-1]) < contiguous(census[0]), census


@pytest.mark.skipif(mlx_device() != "cpu", reason="the softmax primitive is MLX's CPU device's")
def test_softmax_scores_in_primitive():
    """The scores' scaling, mask, GPT-2's causal where and second mask are inputs of the softmax
    primitive, not passes of their own: its census has no Add, Divide, Multiply or Select (they are,
    with ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL=0)."""
    import os
    from harness import census_with_and_without
    cases = [f"test_softmax_of_scaled_masked_scores[{op}-{case}]" for op in ("Softmax", "LogSoftmax")
             for case in ("div-mask-b11s", "mul-mask-s", "mask-row-value", "div")]
    cases += [f"test_softmax_of_gpt2_scores[{op}-{form}]" for op in ("Softmax", "LogSoftmax")
              for form in GPT2_SCORE_FORMS if form != "where-min-mask"]  # its mask is a Multiply
    kernel, composed = census_with_and_without(os.path.abspath(__file__), cases, "ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL")
    names = ("Add", "Divide", "Multiply", "Select")
    assert len(kernel) >= len(cases) and all("SoftmaxCpu" in line for line in kernel), kernel
    assert not any(any(n in line for n in names) for line in kernel), kernel
    assert sum(any(n in line for n in names) for line in composed) >= len(cases), composed


# float16 Softmax-13+ follows its ONNX function body (rounded to float16 after each step), like the
# ONNX reference that produced the backend tests' data; compared with the backend runner's
# tolerance (rtol 1e-3, atol 1e-7). A fused float32 softmax misses it by up to ~10 ulps.
ONNX_RUNNER_TOL = {"rtol": 1e-3, "atol": 1e-7}


@pytest.mark.parametrize("opset", [13, 18])
def test_softmax13_float16_follows_function_body(opset):
    shape = (3, 4, 50)
    x = random_array(shape, np.float32, np.random.default_rng(1), low=-6, high=6).astype(np.float16)
    model = softmax_model("Softmax", np.float16, shape, -1, opset)
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    got, mlx, total = run_mlx(model, {"x": x})
    assert total > 0 and mlx == total, f"only {mlx}/{total} nodes ran on MLX"
    assert_close(got[0], expected[0], **ONNX_RUNNER_TOL)


def attention_fp16_model():
    """Q @ K^T + causal mask -> Softmax -> @ V, all float16 (test_attention_4d_causal_fp16_expanded)."""
    f16 = np.float16
    mask = np.triu(np.full((4, 6), -np.inf, np.float16), k=1)
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Add", ["s", "mask"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    return make_graph_model(nodes, [("q", f16, [2, 3, 4, 8]), ("kt", f16, [2, 3, 8, 6]), ("v", f16, [2, 3, 6, 8])],
                            [("y", f16, [2, 3, 4, 8])], {"mask": mask}, opset=13)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_attention_float16_matches_onnx_reference(seed):
    """The probabilities' rounding is amplified by P @ V: a once-rounded softmax missed the
    reference by 2 ulps (up to 1.2e-3 rel) for seeds 2 and 3."""
    rng = np.random.default_rng(seed)
    feeds = {"q": rng.random((2, 3, 4, 8)).astype(np.float16),
             "kt": rng.random((2, 3, 8, 6)).astype(np.float16),
             "v": rng.random((2, 3, 6, 8)).astype(np.float16)}
    model = attention_fp16_model()
    expected = ReferenceEvaluator(model).run(None, feeds)
    got, mlx, total = run_mlx(model, feeds)
    assert total > 0 and mlx == total, f"only {mlx}/{total} nodes ran on MLX"
    assert_close(got[0], expected[0], **ONNX_RUNNER_TOL)


def heads_attention_model(dtype, scale, mask, heads=2, head_size=64, seq=37):
    """Attention over heads as torch exports BERT's, from the QKV product's output [B, S, 3E]: split
    in three, each Reshape [B, S, H, D] + Transpose (K's to [B, H, D, S]), Q @ K^T scaled ("div" by
    sqrt(D) or "mul" by its inverse, or none) + a [B, 1, 1, S] padding mask (or none), Softmax,
    @ V, and the heads joined again. On a GPU with ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 the two
    products and the softmax are one kernel reading the head views (src/ops/attention_heads_cuda.cc;
    test_fused_gpu_paths). The values are eighths in [-1, 1]: every score is exact in any summation
    order (float16 too), where a float16 score of ~8 rounded one way or the other moves its
    probability by 0.8% and the output by about the tolerance."""
    e = heads * head_size
    rng = np.random.default_rng(3)
    inits = {"split": np.array([e, e, e], np.int64),
             "heads": np.array([0, 0, heads, head_size], np.int64),
             "joined": np.array([0, 0, e], np.int64)}
    nodes = [helper.make_node("Split", ["qkv", "split"], ["q0", "k0", "v0"], axis=-1)]
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("Reshape", [f"{name}0", "heads"], [f"{name}1"]),
                  helper.make_node("Transpose", [f"{name}1"], [name], perm=perm)]
    nodes.append(helper.make_node("MatMul", ["q", "k"], ["s0"]))
    last = "s0"
    if scale:
        inits["scale"] = np.array(np.sqrt(head_size) if scale == "div" else 1 / np.sqrt(head_size), dtype)
        nodes.append(helper.make_node("Div" if scale == "div" else "Mul", [last, "scale"], ["s1"]))
        last = "s1"
    inputs = [("qkv", dtype, [2, seq, 3 * e])]
    if mask:
        inputs.append(("mask", dtype, [2, 1, 1, seq]))
        nodes.append(helper.make_node("Add", [last, "mask"], ["s2"]))
        last = "s2"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"]),
              helper.make_node("Transpose", ["o"], ["o1"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["o1", "joined"], ["y"])]
    model = make_graph_model(nodes, inputs, [("y", dtype, [2, seq, e])], inits, opset=13)
    feeds = {"qkv": (rng.integers(-8, 9, (2, seq, 3 * e)) / 8).astype(dtype)}
    if mask:  # the second entry's last 5 keys are padding
        m = np.zeros((2, 1, 1, seq), dtype)
        m[1, ..., -5:] = -10000
        feeds["mask"] = m
    return model, feeds


@pytest.mark.parametrize("dtype,scale,mask,head_size", [
    (np.float16, "div", True, 64), (np.float16, "mul", False, 80), (np.float32, "div", True, 64),
    (np.float32, None, True, 32)], ids=["float16-div-mask", "float16-mul-d80", "float32-div-mask", "float32-mask-d32"])
def test_heads_attention_as_exported(dtype, scale, mask, head_size):
    check_parity(*heads_attention_model(dtype, scale, mask, head_size=head_size))


# ---- LayerNormalization ------------------------------------------------------------------------

def layer_norm_model(dtype, shape, axis=-1, bias=True, outputs=("y",), **attrs):
    rank = len(shape)
    norm_shape = list(shape[axis % rank:])
    inputs = [("x", dtype, list(shape)), ("scale", dtype, norm_shape)]
    if bias:
        inputs.append(("bias", dtype, norm_shape))
    model = make_model("LayerNormalization", inputs, [(o or "unused", None, None) for o in outputs],
                       {"axis": axis, **attrs}, opset=17)
    if "" in outputs:  # an optional output left out in the middle: empty name, no graph output
        node = model.graph.node[0]
        node.output[:] = list(outputs)
        keep = [o for o in model.graph.output if o.name != "unused"]
        del model.graph.output[:]
        model.graph.output.extend(keep)
    return model


def residual_norm_model(dtype, sum_is_output):
    """Add (a residual) then LayerNormalization over the last axis, as post-LN BERT's layers end; with
    `sum_is_output` the sum is a graph output too (a second reader, as a pre-LN model's residual
    is). On a GPU with ONNXRUNTIME_EP_MLX_NORM_ADD=1 a sum only the norm reads is the norm kernel's
    skip input, rounded to T as the Add rounds it (test_fused_gpu_paths)."""
    n = 96
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "scale", "bias"], ["y"], axis=-1, epsilon=1e-5)]
    inits = {"scale": rng.uniform(0.5, 1.5, n).astype(dtype), "bias": rng.uniform(-0.5, 0.5, n).astype(dtype)}
    outputs = [("y", dtype, [2, 7, n])] + ([("s", dtype, [2, 7, n])] if sum_is_output else [])
    model = make_graph_model(nodes, [("a", dtype, [2, 7, n]), ("b", dtype, [2, 7, n])], outputs, inits, opset=17)
    feeds = {"a": rng.standard_normal((2, 7, n)).astype(dtype), "b": (rng.standard_normal((2, 7, n)) * 0.5).astype(dtype)}
    return model, feeds


@pytest.mark.parametrize("sum_is_output", [False, True], ids=["norm-only", "sum-also-output"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["float16", "float32"])
def test_layer_norm_of_residual_sum(dtype, sum_is_output):
    check_parity(*residual_norm_model(dtype, sum_is_output))


def layer_norm_feeds(dtype, shape, axis=-1, bias=True, mean=0.0, std=1.0, seed=0):
    rng = np.random.default_rng(seed)
    norm_shape = shape[axis % len(shape):]
    feeds = {"x": (rng.standard_normal(shape) * std + mean).astype(np.float32).astype(dtype),
             "scale": rng.uniform(0.5, 1.5, norm_shape).astype(np.float32).astype(dtype)}
    if bias:
        feeds["bias"] = rng.uniform(-1, 1, norm_shape).astype(np.float32).astype(dtype)
    return feeds


LN_CASES = [
    # (shape, axis, bias)
    ((2, 3, 8), -1, True),
    ((2, 3, 8), -1, False),
    ((2, 3, 8), 1, True),
    ((2, 3, 8), 0, True),
    ((4, 768), -1, True),
    ((2, 5, 1024), -1, True),
    ((8,), 0, True),
    ((3, 1), -1, True),
]


@pytest.mark.parametrize("outputs", [("y",), ("y", "mean", "inv_std"), ("y", "mean"), ("y", "", "inv_std")],
                         ids=["y", "all", "mean", "inv"])
@pytest.mark.parametrize("case", LN_CASES, ids=lambda c: f"{c[0]}-axis{c[1]}-bias{int(c[2])}")
def test_layer_norm_float32(case, outputs):
    shape, axis, bias = case
    model = layer_norm_model(np.float32, shape, axis, bias, outputs)
    check_parity(model, layer_norm_feeds(np.float32, shape, axis, bias))


@pytest.mark.parametrize("mean,std", [(10.0, 0.1), (100.0, 1.0), (-3.0, 0.5)])
def test_layer_norm_offset_rows(mean, std):
    """Rows whose mean is large against their spread: the variance must not lose precision."""
    shape = (4, 768)
    model = layer_norm_model(np.float32, shape, outputs=("y", "mean", "inv_std"))
    check_parity(model, layer_norm_feeds(np.float32, shape, mean=mean, std=std))


def layer_norm_exact(x, scale, bias=None, epsilon=1e-5):
    """LayerNormalization of float32 rows over the last axis in float64 (ONNX's definition, no
    rounding but the last), as float32."""
    x = np.asarray(x, np.float64)
    centered = x - x.mean(-1, keepdims=True)
    y = centered / np.sqrt((centered * centered).mean(-1, keepdims=True) + epsilon) * scale
    return (y if bias is None else y + bias).astype(np.float32)


@pytest.mark.parametrize("mean,std", [(10.0, 0.1), (100.0, 1.0), (-3.0, 0.5)])
def test_layer_norm_offset_rows_output_only(mean, std):
    """The same rows with Y alone. On MLX's CPU device the row-normalization primitive
    (src/ops/normalization_cpu.cc) takes the node with ORT's own arithmetic: parity with ORT.
    On a GPU mx::fast::layer_norm does (recentered, FastLayerNorm), whose arithmetic is not ORT's,
    and ORT's own Y is up to ~5e-6 from the exact rows (measured at mean 10 and 100): there the
    exact rows are the reference, at the same float32 tolerance."""
    shape = (4, 768)
    feeds = layer_norm_feeds(np.float32, shape, mean=mean, std=std)
    exact = None if mlx_device() == "cpu" else [layer_norm_exact(feeds["x"], feeds["scale"], feeds["bias"])]
    check_parity(layer_norm_model(np.float32, shape), feeds, expected=exact)


@pytest.mark.parametrize("epsilon", [1e-12, 1e-3, 0.5])
def test_layer_norm_epsilon(epsilon):
    shape = (3, 16)
    check_parity(layer_norm_model(np.float32, shape, epsilon=epsilon), layer_norm_feeds(np.float32, shape, std=0.05))


@pytest.mark.parametrize("outputs", [("y",), ("y", "mean", "inv_std")], ids=["y", "all"])
@pytest.mark.parametrize("dtype", [np.float16, np.float64], ids=["f16", "f64"])
def test_layer_norm_other_floats(dtype, outputs):
    shape = (2, 3, 64)
    check_parity(layer_norm_model(dtype, shape, outputs=outputs), layer_norm_feeds(dtype, shape))


def test_layer_norm_bf16():
    shape = (3, 32)
    feeds = layer_norm_feeds(np.float32, shape)
    feeds = {k: v.astype(BF16).astype(np.float32) for k, v in feeds.items()}
    ref = run_cpu(layer_norm_model(np.float32, shape), feeds)
    check_bf16(layer_norm_model(BF16, shape), feeds, ref)


@pytest.mark.parametrize("shape,outputs", [((2, 0, 8), ("y",)), ((0, 8), ("y", "mean", "inv_std"))],
                         ids=["empty-y", "empty-all"])
def test_layer_norm_empty(shape, outputs):
    check_parity(layer_norm_model(np.float32, shape, outputs=outputs), layer_norm_feeds(np.float32, shape))


def test_layer_norm_stash_type_declined():
    """stash_type other than 1 (float32) is not claimed: the node runs on CPU."""
    shape = (2, 8)
    model = layer_norm_model(np.float32, shape, stash_type=0)
    feeds = layer_norm_feeds(np.float32, shape)
    got, mlx, total = run_mlx(model, feeds)
    assert mlx == 0 and total == 1
    assert_close(got[0], run_cpu(model, feeds)[0])
