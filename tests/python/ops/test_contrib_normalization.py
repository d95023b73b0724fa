"""Parity of ORT's contrib normalizations (src/ops/normalization_contrib.cc) against ORT's CPU EP:
com.microsoft SkipLayerNormalization / SkipSimplifiedLayerNormalization, ai.onnx
SimplifiedLayerNormalization and the contrib ai.onnx LayerNormalization of opsets 1-16."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from harness import (BF16, assert_declined, assert_mlx_error, check_parity, ids, mlx_device, onnx_type, random_array,
                     run_cpu)
from harness_bf16 import check_bf16

MS = "com.microsoft"


def contrib_model(op, inputs, outputs, attrs=None, domain=MS, opset=17, initializers=None):
    """A one-node model importing ai.onnx `opset` and com.microsoft 1. `inputs`: (name, dtype, shape),
    name "" for an absent optional input; `outputs`: (name, dtype), name "" for an unused slot."""
    initializers = initializers or {}
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _ in outputs], domain=domain, **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, onnx_type(t), list(s)) for n, t, s in inputs
                    if n and n not in initializers]
    graph_outputs = [helper.make_tensor_value_info(n, onnx_type(t), None) for n, t in outputs if n]
    inits = [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()]
    graph = helper.make_graph([node], f"{op}_test", graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def retyped(model, dtype):
    """`model` with every T-typed (non-float32-statistic) value retyped to `dtype`."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    stats = {"mean", "inv"}
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name not in stats:
            vi.type.tensor_type.elem_type = onnx_type(dtype)
    return m


def parity(model, feeds, dtype):
    """check_parity of `model` (built with `dtype`, or float32 for bfloat16) on float32 `feeds` cast
    to `dtype`; bfloat16 (no ORT CPU kernel) against ORT's float32 result on the same
    bfloat16-representable values, rounded to bfloat16."""
    if np.dtype(dtype) != BF16:
        return check_parity(model, {k: v.astype(dtype) for k, v in feeds.items()})
    f32 = {k: v.astype(BF16).astype(np.float32) for k, v in feeds.items()}
    ref = run_cpu(model, f32)
    return check_bf16(retyped(model, BF16), f32, ref)


# ---- SkipLayerNormalization / SkipSimplifiedLayerNormalization ---------------------------------

def skip_case(op, shape, skip_shape, beta=True, bias=True, outputs=("y",), dtype=np.float32, epsilon=None,
              seed=0):
    """(model, float32 feeds) of a Skip*LayerNormalization node. `outputs`: names of the slots output,
    mean, inv_std_var, input_skip_bias_sum ("" leaves one unused)."""
    hidden = shape[-1]
    simplified = op == "SkipSimplifiedLayerNormalization"
    names = ["x", "skip", "gamma"] + ([] if simplified else ["beta" if beta else ""]) + ["bias" if bias else ""]
    shapes = {"x": shape, "skip": skip_shape, "gamma": (hidden,), "beta": (hidden,), "bias": (hidden,)}
    t = np.float32 if dtype == BF16 else dtype  # bfloat16: built as float32, retyped by parity()
    inputs = [(n, t, shapes.get(n, ())) for n in names]
    out_types = [t, np.float32, np.float32, t]
    outs = [(n, out_types[i]) for i, n in enumerate(outputs)]
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    rng = np.random.default_rng(seed)
    feeds = {n: random_array(shapes[n], np.float32, rng) for n in names if n}
    feeds["gamma"] = random_array((hidden,), np.float32, rng, 0.5, 1.5)
    return contrib_model(op, inputs, outs, attrs), feeds


SKIP_OPS = ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"]
# (input shape, skip shape): same shape, skip broadcast over the batch ([S, H], [1, S, H]), 2-D input,
# odd and long hidden sizes.
SKIP_SHAPES = [((2, 5, 8), (2, 5, 8)), ((2, 5, 8), (5, 8)), ((3, 4, 8), (1, 4, 8)), ((7, 12), (7, 12)),
               ((3, 4, 33), (4, 33)), ((2, 3, 1024), (2, 3, 1024)), ((1, 1, 1), (1, 1))]
ALL_OUTPUTS = {"SkipLayerNormalization": ("y", "mean", "inv", "sum"),
               "SkipSimplifiedLayerNormalization": ("y", "", "inv", "sum")}


@pytest.mark.parametrize("shapes", SKIP_SHAPES, ids=lambda s: f"{ids(s[0])}-skip{ids(s[1])}")
@pytest.mark.parametrize("op", SKIP_OPS)
def test_skip_shapes(op, shapes):
    parity(*skip_case(op, *shapes), np.float32)
    parity(*skip_case(op, *shapes, outputs=ALL_OUTPUTS[op]), np.float32)


@pytest.mark.parametrize("outputs", [("y", "mean"), ("y", "", "inv"), ("y", "", "", "sum"), ("y", "mean", "inv", "sum")],
                         ids=lambda o: "-".join(n or "_" for n in o))
@pytest.mark.parametrize("beta,bias", [(True, True), (False, True), (True, False), (False, False)],
                         ids=["beta-bias", "bias", "beta", "none"])
def test_skip_layer_norm_optional_inputs_outputs(beta, bias, outputs):
    parity(*skip_case("SkipLayerNormalization", (2, 3, 16), (3, 16), beta, bias, outputs), np.float32)


@pytest.mark.parametrize("outputs", [("y",), ("y", "", "inv"), ("y", "", "", "sum"), ("y", "", "inv", "sum")],
                         ids=lambda o: "-".join(n or "_" for n in o))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_skip_simplified_optional_inputs_outputs(bias, outputs):
    parity(*skip_case("SkipSimplifiedLayerNormalization", (2, 3, 16), (2, 3, 16), bias=bias, outputs=outputs),
           np.float32)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=ids)
@pytest.mark.parametrize("shapes", [((2, 5, 64), (5, 64)), ((3, 33), (3, 33))], ids=lambda s: ids(s[0]))
@pytest.mark.parametrize("op", SKIP_OPS)
def test_skip_low_precision(op, shapes, dtype):
    """float16/bfloat16 compute in float32: the sum output is rounded once, the statistics stay float32."""
    parity(*skip_case(op, *shapes, outputs=ALL_OUTPUTS[op], dtype=dtype), dtype)
    parity(*skip_case(op, *shapes, dtype=dtype), dtype)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=ids)
@pytest.mark.parametrize("op", SKIP_OPS)
def test_skip_low_precision_with_sum(op, dtype):
    """float16/bfloat16 with the sum as an output and the statistics unused: the form GPUs take as
    one kernel of the EP's (ops/test_fused_gpu_paths.py::test_norm_kernel reads this test's graph;
    test_skip_low_precision's first model outputs the statistics, which that kernel leaves, and its
    skip is broadcast over the batch, which it leaves too: the skip here has the input's shape)."""
    parity(*skip_case(op, (2, 5, 64), (2, 5, 64), outputs=("y", "", "", "sum"), dtype=dtype), dtype)


def as_constants(model, feeds, names):
    """`model` with the inputs `names` turned into initializers holding their feeds (popped)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in [vi for vi in m.graph.input if vi.name in names]:
        value = feeds.pop(vi.name)
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            value = value.astype(np.float16)
        m.graph.initializer.append(onnx.numpy_helper.from_array(value, vi.name))
        m.graph.input.remove(vi)
    return m, feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=ids)
@pytest.mark.parametrize("op", SKIP_OPS)
def test_skip_epsilon_and_constant_weights(op, dtype):
    """A large epsilon; skip, gamma and bias as initializers (ORT's CPU kernel prepacks them)."""
    model, feeds = skip_case(op, (2, 4, 24), (4, 24), epsilon=0.5, outputs=ALL_OUTPUTS[op], dtype=dtype)
    parity(*as_constants(model, feeds, ["skip", "gamma", "bias"]), dtype)


def test_skip_empty_batch():
    parity(*skip_case("SkipLayerNormalization", (0, 3, 8), (3, 8), outputs=("y", "mean", "inv", "sum")),
           np.float32)


def test_skip_simplified_mean_output_declined():
    """ORT's SkipSimplified kernel computes no mean: the output is declined rather than made up."""
    model, feeds = skip_case("SkipSimplifiedLayerNormalization", (2, 3, 8), (2, 3, 8), outputs=("y", "mean"))
    assert_declined(model, feeds)


def test_skip_wrapping_batch_declined():
    """A skip batch neither 1 nor the input's: ORT's kernel wraps rows around (not a broadcast)."""
    assert_declined(*skip_case("SkipLayerNormalization", (4, 3, 8), (2, 3, 8)))


def test_skip_bad_rank_errors():
    """A 4-D input: ORT errors; so does the MLX session (the node is declined and ORT's CPU kernel runs)."""
    assert_mlx_error(*skip_case("SkipLayerNormalization", (2, 2, 3, 8), (2, 2, 3, 8)))


# ---- SimplifiedLayerNormalization, LayerNormalization (contrib, ai.onnx 1-16) -------------------

def norm_case(op, shape, axis, scale_shape, bias=True, outputs=("y",), dtype=np.float32, opset=16, seed=0,
              **attrs):
    """(model, float32 feeds) of a SimplifiedLayerNormalization (opset 17) or LayerNormalization node."""
    names = ["x", "scale"] + (["bias"] if bias and op == "LayerNormalization" else [])
    shapes = {"x": shape, "scale": scale_shape, "bias": scale_shape}
    rng = np.random.default_rng(seed)
    feeds = {"x": random_array(shape, np.float32, rng), "scale": random_array(scale_shape, np.float32, rng, 0.5, 1.5)}
    if "bias" in names:
        feeds["bias"] = random_array(scale_shape, np.float32, rng)
    t = np.float32 if dtype == BF16 else dtype  # bfloat16: built as float32, retyped by parity()
    out_types = [t, np.float32, np.float32]
    model = contrib_model(op, [(n, t, shapes[n]) for n in names], [(n, out_types[i]) for i, n in enumerate(outputs)],
                          {"axis": axis, **attrs}, domain="", opset=opset)
    return model, feeds


NORM_OPS = ["SimplifiedLayerNormalization", "LayerNormalization"]
STAT_OUTPUTS = {"SimplifiedLayerNormalization": ("y", "inv"), "LayerNormalization": ("y", "mean", "inv")}
# (shape, axis, scale shape): X.shape[axis:], numpy-broadcast forms ORT 1.31 takes (leading 1s, a
# per-batch scale, a scale broadcast inside the normalized dims), several axes, odd sizes.
NORM_CASES = [((2, 3, 8), -1, (8,)), ((2, 3, 8), 1, (3, 8)), ((2, 3, 8), 0, (2, 3, 8)), ((2, 3, 8), 1, (8,)),
              ((2, 3, 8), -1, (1, 1, 8)), ((2, 3, 8), -1, (2, 1, 8)), ((2, 3, 8), 1, (3, 1)),
              ((5, 37), -1, (37,)), ((2, 2048), -1, (2048,)), ((3, 1), -1, (1,)), ((2, 3, 4, 5), 2, (4, 5))]


@pytest.mark.parametrize("case", NORM_CASES, ids=lambda c: f"{ids(c[0])}-axis{c[1]}-scale{ids(c[2])}")
@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_shapes(op, case):
    parity(*norm_case(op, *case), np.float32)
    stats = norm_case(op, *case, outputs=STAT_OUTPUTS[op])
    if op == "SimplifiedLayerNormalization" and case[1] % len(case[0]) != len(case[0]) - 1:
        assert_declined(*stats)  # see test_simplified_inv_std_var_axis_declined
    else:
        parity(*stats, np.float32)


def test_simplified_inv_std_var_axis_declined():
    """ORT's shape inference gives SimplifiedLayerNormalization's inv_std_var X's shape with only dim
    `axis` set to 1, its kernel sets every dim from axis on: with axis before the last, the output
    is declined (ORT's CPU kernel itself warns that its result contradicts the inferred shape)."""
    assert_declined(*norm_case("SimplifiedLayerNormalization", (2, 3, 4), 1, (3, 4), outputs=("y", "inv")))


@pytest.mark.parametrize("outputs", [("y", "mean"), ("y", "", "inv"), ("y", "mean", "inv")],
                         ids=lambda o: "-".join(n or "_" for n in o))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("opset", [1, 16])
def test_layer_norm_contrib_optional(opset, bias, outputs):
    parity(*norm_case("LayerNormalization", (3, 4, 10), -1, (10,), bias, outputs, opset=opset), np.float32)


@pytest.mark.parametrize("epsilon", [1e-12, 0.3])
@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_epsilon(op, epsilon):
    parity(*norm_case(op, (4, 16), -1, (16,), outputs=STAT_OUTPUTS[op], epsilon=epsilon), np.float32)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64], ids=ids)
@pytest.mark.parametrize("case", [((3, 5, 64), -1, (64,)), ((2, 3, 7), 1, (3, 7))], ids=lambda c: ids(c[0]))
@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_other_floats(op, case, dtype):
    parity(*norm_case(op, *case, dtype=dtype), dtype)
    if op == "LayerNormalization" or case[1] == -1:
        parity(*norm_case(op, *case, outputs=STAT_OUTPUTS[op], dtype=dtype), dtype)


@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_empty(op):
    parity(*norm_case(op, (0, 3, 8), -1, (8,), outputs=STAT_OUTPUTS[op]), np.float32)


@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_stash_type_declined(op):
    assert_declined(*norm_case(op, (3, 8), -1, (8,), stash_type=0))


def test_simplified_flat_scale_errors():
    """A scale holding prod(X.shape[axis:]) values in another shape: ORT 1.31 errors, so does MLX."""
    assert_mlx_error(*norm_case("SimplifiedLayerNormalization", (2, 3, 4), 1, (12,)))


def test_skip_symbolic_dims_in_a_chain():
    """A BERT-style chain with symbolic batch/sequence dims: FusedMatMul -> BiasGelu -> FusedMatMul ->
    SkipLayerNormalization (skip = the chain's input) -> SimplifiedLayerNormalization, one partition."""
    rng = np.random.default_rng(5)
    h, f = 16, 24
    w1, w2 = random_array((h, f), np.float32, rng, -0.5, 0.5), random_array((f, h), np.float32, rng, -0.5, 0.5)
    consts = {"w1": w1, "w2": w2, "b1": random_array((f,), np.float32, rng), "gamma": np.ones(h, np.float32) * 1.5,
              "beta": random_array((h,), np.float32, rng), "scale": random_array((h,), np.float32, rng, 0.5, 1.5)}
    nodes = [helper.make_node("FusedMatMul", ["x", "w1"], ["m1"], domain=MS, alpha=0.5),
             helper.make_node("BiasGelu", ["m1", "b1"], ["g"], domain=MS),
             helper.make_node("FusedMatMul", ["g", "w2"], ["m2"], domain=MS),
             helper.make_node("SkipLayerNormalization", ["m2", "x", "gamma", "beta"], ["n", "", "", "sum"], domain=MS),
             helper.make_node("SimplifiedLayerNormalization", ["n", "scale"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("sum", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    for shape in [(2, 5, h), (1, 3, h)]:
        check_parity(model, {"x": random_array(shape, np.float32, rng)})


@pytest.mark.parametrize("x_type,v_type", [(np.float16, np.float32), (np.float32, np.float16)], ids=["x16-w32", "x32-w16"])
@pytest.mark.parametrize("op", NORM_OPS)
def test_norm_mixed_types(op, x_type, v_type):
    """X of type T, scale/B (and Y) of type V: ORT computes in float32 and rounds Y to V once."""
    rng = np.random.default_rng(7)
    shape, h = (3, 5, 48), 48
    names = ["x", "scale"] + (["bias"] if op == "LayerNormalization" else [])
    feeds = {"x": random_array(shape, x_type, rng), "scale": random_array((h,), v_type, rng, 0.5, 1.5),
             "bias": random_array((h,), v_type, rng)}
    feeds = {k: feeds[k] for k in names}
    inputs = [("x", x_type, shape)] + [(n, v_type, (h,)) for n in names[1:]]
    outs = [("y", v_type)] + [(n, np.float32) for n in STAT_OUTPUTS[op][1:]]
    check_parity(contrib_model(op, inputs, outs, {"axis": -1}, domain="", opset=16), feeds)


def test_norm_mixed_float64_declined():
    """float64 X with a float32 scale: ORT has no kernel (the session fails), the EP declines it too."""
    rng = np.random.default_rng(8)
    feeds = {"x": random_array((3, 8), np.float64, rng), "scale": random_array((8,), np.float32, rng)}
    model = contrib_model("SimplifiedLayerNormalization", [("x", np.float64, (3, 8)), ("scale", np.float32, (8,))],
                          [("y", np.float32)], domain="")
    assert_mlx_error(model, feeds)


ROW_NORM_CASES = {
    "test_normalization.py": ["test_layer_norm_offset_rows_output_only[100.0-1.0]",
                              "test_layer_norm_offset_rows_output_only[10.0-0.1]"],
    "test_contrib_normalization.py": ["test_skip_shapes[SkipLayerNormalization-2x5x8-skip5x8]",
                                      "test_skip_shapes[SkipSimplifiedLayerNormalization-2x5x8-skip2x5x8]"],
    "test_rms_normalization.py": ["test_float32[2x3x4x5--1-5-False]", "test_float32[2x3x4x5-1-3x4x5-False]"],
}


@pytest.mark.skipif(mlx_device() != "cpu", reason="the row-normalization primitive is MLX's CPU device's")
def test_row_norm_primitive():
    """On MLX's CPU device a row normalization whose statistics no output asks for is one
    RowNormCpu (src/ops/normalization_cpu.cc: float64 statistics) in these cases, which hold
    ORT's values (rows with a large mean among them); ONNXRUNTIME_EP_MLX_NORM_CPU_KERNEL=0 gives
    the composed form back, in more primitives."""
    import os
    from harness import census_of_tests
    here = os.path.dirname(os.path.abspath(__file__))
    total = lambda line: int(line.split("total ")[1].split(":")[0])  # noqa: E731
    for name, cases in ROW_NORM_CASES.items():
        path = os.path.join(here, name)
        kernel, _ = census_of_tests(path, cases)
        composed, _ = census_of_tests(path, cases, env={"ONNXRUNTIME_EP_MLX_NORM_CPU_KERNEL": "0"})
        # A case may run several models (test_skip_shapes: Y alone, then every output, which
        # asks for the statistics and stays composed): one kernel line a case at least.
        assert sum("RowNormCpu" in line for line in kernel) >= len(cases), kernel
        assert not any("RowNormCpu" in line for line in composed), composed
        assert sum(map(total, kernel)) < sum(map(total, composed)), (kernel, composed)
