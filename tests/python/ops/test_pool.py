"""Parity of the pooling family (src/ops/pool.cc, pool_global.cc) against ORT's CPU EP: MaxPool (with
Indices), AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool, MaxUnpool."""
import itertools
import math

import numpy as np
import pytest
from onnx import helper

from harness import (BF16, assert_close, assert_declined, assert_mlx_error, census_total, census_with_and_without,
                     check_parity, ids, make_graph_model, mlx_device, node_model, random_array, run_cpu, run_mlx)
from harness_bf16 import check_bf16, check_parity_or_numpy, check_parity_via_float32

OPSET = {"MaxPool": 12, "AveragePool": 19, "LpPool": 18}


def pool_model(op, x, attrs, opset=None, indices=False, symbolic=False):
    """(model, feeds) of one pool node on `x`; `indices` adds MaxPool's Indices output; `symbolic`
    declares the input dims symbolic (then ORT's shape inference declares no output size). The
    default opset is the newest version of the op's attributes, 22 for bfloat16 (added there)."""
    opset = opset or (22 if x.dtype == BF16 else OPSET.get(op, 22))
    return node_model(op, [("x", x)], attrs, opset, outputs=2 if indices else 1, symbolic=symbolic)


# ---- a numpy model of ORT 1.23's CPU pooling kernels (for float64, which ORT lacks for most pools) --

def _axis(n, k, s, d, pb, pe, auto_pad, ceil):
    """ORT's (pad_begin, pad_end, out) along one dim."""
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        need = ((n + s - 1) // s - 1) * s + k - n
        half = need + 1 if auto_pad == "SAME_LOWER" else need
        pb = int(half / 2)  # C++ truncation
        pe = need - pb
    elif auto_pad == "VALID":
        pb = pe = 0
    num = n + pb + pe - d * (k - 1) - 1
    if not ceil:
        return pb, pe, int(num / s) + 1
    out = math.ceil(num / s + 1)
    return pb, pe, out - 1 if (out - 1) * s >= n + pb else out


def reference_pool(op, x, attrs):
    """AveragePool / LpPool / MaxPool (values only) of `x` the way ORT's kernels loop, in float64."""
    k = attrs["kernel_shape"]
    nd = len(k)
    s, d = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    pads = attrs.get("pads", [0] * 2 * nd)
    geo = [_axis(x.shape[2 + i], k[i], s[i], d[i], pads[i], pads[i + nd], attrs.get("auto_pad", "NOTSET"),
                 attrs.get("ceil_mode", 0)) for i in range(nd)]
    y = np.zeros(x.shape[:2] + tuple(g[2] for g in geo))
    xf = x.astype(np.float64)
    for o in itertools.product(*[range(g[2]) for g in geo]):
        starts = [o[i] * s[i] - geo[i][0] for i in range(nd)]
        # AveragePool stops at in + pad_end; every pool skips elements outside the input.
        limit = [min(starts[i] + k[i] * d[i], x.shape[2 + i] + geo[i][1]) if op == "AveragePool"
                 else starts[i] + k[i] * d[i] for i in range(nd)]
        pos = [[q for q in range(starts[i], limit[i], d[i]) if 0 <= q < x.shape[2 + i]] for i in range(nd)]
        vals = np.stack([xf[(slice(None), slice(None)) + q] for q in itertools.product(*pos)], -1) \
            if all(pos) else np.zeros(x.shape[:2] + (0,))
        at = (slice(None), slice(None)) + o
        if op == "LpPool":
            y[at] = (np.abs(vals) ** attrs.get("p", 2)).sum(-1) ** (1.0 / attrs.get("p", 2))
        elif op == "MaxPool":
            y[at] = vals.max(-1) if vals.shape[-1] else np.finfo(x.dtype).min
        elif vals.shape[-1]:
            div = vals.shape[-1]
            if attrs.get("count_include_pad", 0):
                div = np.prod([1 + (limit[i] - starts[i] - 1) // d[i] for i in range(nd)])
            y[at] = vals.sum(-1) / div
    return y.astype(x.dtype)


def parity(op, x, attrs, opset=None, indices=False, symbolic=False):
    """check_parity of one pool node; bfloat16 against ORT's float32 result on the same values (ORT has
    no bfloat16 pools; they compute in float32 and round once, as ORT does for float16); float64
    against the numpy model where ORT has no float64 kernel."""
    m, feeds = pool_model(op, x, attrs, opset, indices, symbolic)
    if x.dtype == BF16:
        ref = run_cpu(*pool_model(op, x.astype(np.float32), attrs, opset, indices, symbolic))
        return check_bf16(m, feeds, ref)
    if x.dtype == np.float64 and op != "MaxPool":
        return check_parity_or_numpy(m, feeds, lambda: reference_pool(op, x, attrs))
    return check_parity(m, feeds)


def data(shape, dtype=np.float32, seed=0):
    """Distinct-ish random values (ties only where a test wants them)."""
    x = random_array(shape, np.float32, np.random.default_rng(seed), low=-4, high=4)
    return x.astype(dtype)


# (input shape, attributes): 1-3 spatial dims, odd sizes, stride > kernel, asymmetric pads,
# dilations, auto_pad, ceil_mode where ORT's shape inference agrees with its kernel.
CASES = [
    ((2, 3, 9), dict(kernel_shape=[3])),
    ((1, 2, 10), dict(kernel_shape=[2], strides=[3])),
    ((1, 2, 11), dict(kernel_shape=[3], strides=[2], pads=[2, 1], dilations=[2])),
    ((2, 3, 7, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 8, 7), dict(kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 2])),
    ((1, 2, 9, 9), dict(kernel_shape=[3, 2], strides=[1, 2], dilations=[2, 3])),
    ((1, 2, 10, 11), dict(kernel_shape=[3, 3], strides=[2, 3], pads=[2, 1, 2, 1], dilations=[2, 2])),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="SAME_UPPER")),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 4], strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="VALID")),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 6, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ((1, 1, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 1, 0, 0, 1, 1])),
    ((1, 2, 6, 7, 5), dict(kernel_shape=[3, 2, 2], dilations=[2, 1, 2], strides=[1, 2, 1])),
]
CASE_IDS = [f"{ids(s)}-{ids(a)}" for s, a in CASES]


@pytest.mark.parametrize("variant", ["values", "indices", "indices_col_major"])
@pytest.mark.parametrize("shape,attrs", CASES, ids=CASE_IDS)
def test_maxpool(shape, attrs, variant):
    attrs = dict(attrs, storage_order=1) if variant == "indices_col_major" else attrs
    parity("MaxPool", data(shape), attrs, indices=variant != "values")


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("shape,attrs", CASES, ids=CASE_IDS)
def test_averagepool(shape, attrs, include_pad):
    parity("AveragePool", data(shape), dict(attrs, count_include_pad=include_pad))


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("shape,attrs", CASES[::2], ids=CASE_IDS[::2])
def test_lppool(shape, attrs, p):
    parity("LpPool", data(shape), dict(attrs, p=p))


# ORT's kernel and its shape inference disagree on these output sizes (a ceil_mode window that would
# start in the end padding is dropped; SAME_* pads from the undilated kernel). With static input dims the node is declined (test_declined_where_inference_disagrees);
# with symbolic dims nothing is declared and MLX follows the kernel.
KERNEL_ONLY = [
    ((1, 2, 5, 6), dict(kernel_shape=[1, 2], strides=[3, 2], ceil_mode=1)),
    ((1, 2, 7, 6), dict(kernel_shape=[3, 3], strides=[3, 2], pads=[2, 1, 1, 2], ceil_mode=1)),
    ((1, 2, 9, 8), dict(kernel_shape=[3, 2], strides=[1, 2], dilations=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 9, 7), dict(kernel_shape=[3, 2], strides=[3, 2], dilations=[1, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 8, 7), dict(kernel_shape=[2, 2], strides=[2, 1], dilations=[2, 3], auto_pad="SAME_LOWER", ceil_mode=1)),
    ((1, 2, 1, 5), dict(kernel_shape=[2, 2], pads=[1, 0, 1, 0], dilations=[2, 1])),  # empty windows
    ((1, 1, 5, 4, 6), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 3], pads=[1, 1, 1, 1, 2, 1], ceil_mode=1)),
]
KERNEL_IDS = [f"{ids(s)}-{ids(a)}" for s, a in KERNEL_ONLY]


@pytest.mark.parametrize("op", ["MaxPool", "MaxPool+indices", "AveragePool", "AveragePool+pad", "LpPool"])
@pytest.mark.parametrize("shape,attrs", KERNEL_ONLY, ids=KERNEL_IDS)
def test_kernel_semantics_with_symbolic_dims(shape, attrs, op):
    name = op.split("+")[0]
    attrs = dict(attrs, count_include_pad=1) if op == "AveragePool+pad" else attrs
    parity(name, data(shape), attrs, indices=op.endswith("indices"), symbolic=True)


@pytest.mark.parametrize("op,shape,attrs", [
    ("MaxPool", *KERNEL_ONLY[0]), ("AveragePool", *KERNEL_ONLY[1]), ("LpPool", *KERNEL_ONLY[2]),
    ("MaxPool", *KERNEL_ONLY[4])], ids=["maxpool-ceil", "avgpool-ceil", "lppool-same-dilated", "maxpool-same-ceil"])
def test_declined_where_inference_disagrees(op, shape, attrs):
    """The output cannot have ORT's declared static shape: left to ORT's CPU kernel."""
    assert_declined(*pool_model(op, data(shape), attrs))


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64, np.int8, np.uint8], ids=ids)
@pytest.mark.parametrize("shape,attrs", [CASES[3], CASES[12]], ids=[CASE_IDS[3], CASE_IDS[12]])
def test_maxpool_dtypes(shape, attrs, dtype):
    x = data(shape, np.float32, seed=3) * 30
    if np.dtype(dtype).kind in "iu":
        x = np.clip(np.round(x), np.iinfo(dtype).min, np.iinfo(dtype).max)
    parity("MaxPool", x.astype(dtype), attrs, indices=True)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64], ids=ids)
@pytest.mark.parametrize("op", ["AveragePool", "AveragePool+pad", "LpPool"])
def test_float_pool_dtypes(op, dtype):
    name = op.split("+")[0]
    shape, attrs = CASES[6]
    attrs = dict(attrs, count_include_pad=1) if op.endswith("pad") else attrs
    parity(name, data(shape, dtype, seed=4), attrs)


@pytest.mark.parametrize("opset", [1, 8, 10, 11, 12, 22])
def test_maxpool_opsets(opset):
    attrs = dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])
    parity("MaxPool", data((2, 2, 7, 6)), attrs, opset=opset, indices=opset >= 8)


@pytest.mark.parametrize("opset", [7, 10, 11, 19, 22])
def test_averagepool_opsets(opset):
    attrs = dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], count_include_pad=1)
    parity("AveragePool", data((2, 2, 7, 6)), attrs, opset=opset)


@pytest.mark.parametrize("opset", [2, 11, 18, 22])
def test_lppool_opsets(opset):
    parity("LpPool", data((2, 2, 7, 6)), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=3),
           opset=opset)


@pytest.mark.parametrize("dtype", [np.int8, np.float32], ids=ids)
def test_maxpool_ties_take_the_first_element(dtype):
    """Few distinct values and overlapping windows: ORT's index is the first maximum in window order."""
    x = np.random.default_rng(5).integers(-2, 3, size=(2, 2, 7, 8)).astype(dtype)
    for order in (0, 1):
        attrs = dict(kernel_shape=[3, 3], strides=[1, 2], pads=[1, 1, 1, 0], storage_order=order)
        parity("MaxPool", x, attrs, indices=True)
    parity("MaxPool", np.full((1, 2, 4, 5), 7, dtype), dict(kernel_shape=[2, 2], pads=[1, 1, 1, 1]), indices=True)


def test_maxpool_lowest_nan_and_infinity_values():
    """ORT's Indices kernel starts a window at its first element inside the input: a window of -inf
    (or of the lowest value) gives that value and its index, a leading NaN stays, a later NaN is ignored."""
    x = data((1, 2, 4, 6))
    x[0, 0, :2, :3] = -np.inf
    x[0, 0, 2, 2] = np.finfo(np.float32).min
    x[0, 1, 0, 0] = np.nan
    x[0, 1, 2, 3] = np.nan
    for attrs in (dict(kernel_shape=[2, 2]), dict(kernel_shape=[2, 3], pads=[1, 1, 0, 1], strides=[1, 2])):
        parity("MaxPool", x, attrs, indices=True)


def test_maxpool_values_lowest_nan_and_infinity():
    """MaxPool without Indices (on MLX's CPU device the EP's primitive, src/ops/pool_cpu.cc) follows
    the rule of ORT's Indices kernel, as the composed form does: compared with the values output
    of ORT's two-output node (ORT's values-only float32 kernel, MLAS, differs only on such windows,
    and not consistently), including windows with no element inside the input (the lowest value)."""
    x = data((2, 3, 5, 7))
    x[0, 0, :2, :3] = -np.inf
    x[0, 0, 2, 2] = np.finfo(np.float32).min
    x[0, 1, 0, 0] = x[1, 2, 3, 3] = np.nan
    x[0, 1, 2, 3] = np.nan
    x[1, 0, 1:4, 2:5] = np.inf
    for attrs in (dict(kernel_shape=[2, 2]), dict(kernel_shape=[2, 3], pads=[1, 1, 0, 1], strides=[1, 2]),
                  dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2]),
                  dict(kernel_shape=[2, 2], pads=[1, 0, 1, 0], dilations=[3, 1])):  # windows all padding
        expected = run_cpu(*pool_model("MaxPool", x, attrs, indices=True))[0]
        model, feeds = pool_model("MaxPool", x, attrs)
        check_parity(model, feeds, expected=[expected])


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                                   dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1]),
                                   dict(kernel_shape=[2, 3], dilations=[1, 2], pads=[0, 2, 1, 2])], ids=ids)
def test_maxpool_values_nan_in_wide_rows(attrs):
    """Rows wide enough that the primitive takes the windows inside the width together (each window
    element in turn over all of them): a NaN a window starts with stays, a later one is ignored,
    per window as at the edges (against the values output of ORT's Indices kernel, as above)."""
    x = data((2, 2, 7, 41))
    x[0, 0, 0, 5] = x[0, 0, 3, 17] = x[1, 1, 6, 40] = x[1, 0, 2, 0] = np.nan
    x[0, 1, 1, 8:12] = np.inf
    x[1, 1, 4, 20:30] = -np.inf
    expected = run_cpu(*pool_model("MaxPool", x, attrs, indices=True))[0]
    model, feeds = pool_model("MaxPool", x, attrs)
    check_parity(model, feeds, expected=[expected])


@pytest.mark.parametrize("shape,attrs", [
    ((2, 4, 13, 11), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),  # YOLO's SPPF
    ((1, 3, 20), dict(kernel_shape=[4], strides=[3], pads=[1, 2], dilations=[2])),
    ((3, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1)),
    ((1, 64, 40, 40), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # split over threads
], ids=["sppf", "1d-dilated", "ceil", "threads"])
def test_maxpool_values(shape, attrs):
    parity("MaxPool", data(shape), attrs)


@pytest.mark.skipif(mlx_device() != "cpu", reason="the MaxPool primitive is MLX's CPU device's")
def test_maxpool_primitive():
    """On MLX's CPU device a float32 MaxPool without Indices over 1 or 2 dims is one MaxPoolCpu,
    where the composed scan (ONNXRUNTIME_EP_MLX_POOL_CPU_KERNEL=0, which passes the same cases)
    takes a Slice and its comparisons per window element."""
    import os
    cases = ["test_maxpool_values_lowest_nan_and_infinity", "test_maxpool_values[sppf]",
             "test_maxpool_values[1d-dilated]",
             "test_maxpool_values_nan_in_wide_rows[kernel_shape=[3, 3]_pads=[1, 1, 1, 1]]"]
    kernel, composed = census_with_and_without(os.path.abspath(__file__), cases, "ONNXRUNTIME_EP_MLX_POOL_CPU_KERNEL")
    assert sum("MaxPoolCpu" in line for line in kernel) >= len(cases), kernel
    assert not any("MaxPoolCpu" in line for line in composed), composed
    assert sum(map(census_total, kernel)) + 20 < sum(map(census_total, composed)), (kernel, composed)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_empty_batch(op):
    parity(op, np.zeros((0, 3, 5, 6), np.float32), dict(kernel_shape=[2, 3], pads=[1, 0, 0, 1]),
           indices=op == "MaxPool")


def test_averagepool_large_window_sums_like_ort():
    """A 7x7 window (49 slices): the sums run in ORT's order."""
    parity("AveragePool", data((1, 4, 14, 14), seed=6) + 100, dict(kernel_shape=[7, 7], strides=[7, 7]))


# ---- global pools ----------------------------------------------------------------------------------

GLOBAL_SHAPES = [(2, 3, 17), (2, 3, 5, 7), (1, 2, 3, 4, 5), (1, 4, 64, 64)]


@pytest.mark.parametrize("shape", GLOBAL_SHAPES, ids=ids)
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pools(op, shape):
    x = data(shape, seed=7) + (50 if op == "GlobalAveragePool" else 0)
    m, feeds = node_model(op, [("x", x)], {}, opset=2 if op == "GlobalLpPool" else 22)
    check_parity(m, feeds)


def global_reference(op, x, p=2):
    xf, axes = x.astype(np.float64), tuple(range(2, x.ndim))
    if op == "GlobalAveragePool":
        return xf.mean(axes, keepdims=True).astype(x.dtype)
    if op == "GlobalMaxPool":
        return xf.max(axes, keepdims=True).astype(x.dtype)
    return ((np.abs(xf) ** p).sum(axes, keepdims=True) ** (1.0 / p)).astype(x.dtype)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64], ids=ids)
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pool_dtypes(op, dtype):
    x = data((2, 3, 6, 7), dtype, seed=8)
    m, feeds = node_model(op, [("x", x)], {}, opset=22)
    if dtype == BF16:
        ref = run_cpu(*node_model(op, [("x", x.astype(np.float32))], {}, opset=2 if op == "GlobalLpPool" else 22))
        check_bf16(m, feeds, ref)
    else:
        check_parity_or_numpy(m, feeds, lambda: global_reference(op, x))


@pytest.mark.parametrize("p", [1, 3])
def test_globallppool_p(p):
    x = data((2, 3, 5, 4), seed=9)
    check_parity(*node_model("GlobalLpPool", [("x", x)], {"p": p}, opset=2))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_empty_batch(op):
    check_parity(*node_model(op, [("x", np.zeros((0, 3, 4, 5), np.float32))], {}, opset=2))


def test_globalmaxpool_of_infinities_is_lowest():
    """ORT's kernel starts from the lowest float: a channel of -inf gives that value, not -inf."""
    x = data((1, 2, 3, 3))
    x[0, 0] = -np.inf
    got = check_parity(*node_model("GlobalMaxPool", [("x", x)], {}, opset=22))
    assert got[0][0, 0, 0, 0] == np.finfo(np.float32).min


# ---- MaxUnpool -------------------------------------------------------------------------------------

def unpool_graph(x, pool_attrs, unpool_attrs=None, output_shape=None):
    """MaxPool (Indices) -> MaxUnpool of `x`, output_shape (if any) a constant."""
    nodes = [helper.make_node("MaxPool", ["x"], ["v", "i"], **pool_attrs)]
    unpool_in = ["v", "i"] + (["s"] if output_shape is not None else [])
    nodes.append(helper.make_node("MaxUnpool", unpool_in, ["y"], **(unpool_attrs or pool_attrs)))
    inits = {"s": np.array(output_shape, np.int64)} if output_shape is not None else None
    m = make_graph_model(nodes, [("x", np.float32, list(x.shape))], [("y", np.float32, None)], inits, opset=12)
    return m, {"x": x}


@pytest.mark.parametrize("shape,attrs,output_shape", [
    ((1, 2, 8), dict(kernel_shape=[2], strides=[2]), None),
    ((2, 3, 6, 8), dict(kernel_shape=[2, 2], strides=[2, 2]), None),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2]), [1, 2, 7, 7]),   # overlapping windows
    ((1, 2, 6, 9), dict(kernel_shape=[2, 3], strides=[2, 3], pads=[1, 0, 1, 0]), None),
    ((1, 1, 4, 6, 4), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), [1, 1, 5, 7, 4]),
], ids=ids)
def test_maxpool_then_maxunpool(shape, attrs, output_shape):
    check_parity(*unpool_graph(data(shape, seed=10), attrs, output_shape=output_shape))


def unpool_model(x, idx, attrs, output_shape=None, at_runtime=False):
    host = [("s", np.array(output_shape, np.int64))] if output_shape is not None else None
    return node_model("MaxUnpool", [("x", x), ("i", idx)], attrs, opset=22 if x.dtype == BF16 else 11, host=host,
                      host_as_input=at_runtime, out_dtype=x.dtype)


def pooled_indices(shape, attrs, dtype=np.float32, seed=11):
    """MaxPool's values and Indices of random data (from ORT)."""
    x = data(shape, np.float32, seed)
    v, i = run_cpu(*pool_model("MaxPool", x, attrs, indices=True))
    return v.astype(dtype), i


@pytest.mark.parametrize("at_runtime", [False, True], ids=["constant", "graph_input"])
@pytest.mark.parametrize("output_shape", [None, [2, 3, 8, 9], [2, 3, 11, 10]], ids=ids)
def test_maxunpool_output_shape(output_shape, at_runtime):
    """output_shape larger than inferred: ORT scatters the flat indices into that shape."""
    attrs = dict(kernel_shape=[2, 3], strides=[2, 3])
    v, i = pooled_indices((2, 3, 8, 9), attrs)
    check_parity(*unpool_model(v, i, attrs, output_shape, at_runtime))


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64], ids=ids)
def test_maxunpool_dtypes(dtype):
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 1, 0, 1])
    v, i = pooled_indices((1, 2, 6, 6), attrs, dtype)
    m, feeds = unpool_model(v, i, attrs, [1, 2, 6, 7])
    if dtype != np.float64:
        check_parity_via_float32(m, feeds, dtype)
        return
    # ORT's MaxUnpool is float32 only; it moves data, so its float32 result is exact.
    ref = run_cpu(*unpool_model(v.astype(np.float32), i, attrs, [1, 2, 6, 7]))
    check_parity(m, feeds, expected=[ref[0].astype(np.float64)])


def test_maxunpool_repeated_index_last_wins():
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    x = data((1, 1, 3, 3), seed=12)
    idx = np.array([[[[5, 0, 5], [35, 5, 2], [0, 9, 5]]]], np.int64)
    check_parity(*unpool_model(x, idx, attrs))


def test_maxunpool_empty_batch():
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    check_parity(*unpool_model(np.zeros((0, 2, 3, 3), np.float32), np.zeros((0, 2, 3, 3), np.int64), attrs))


def test_maxunpool_out_of_range_indices_are_an_error():
    """ORT's kernel fails on an index outside [0, output size); MLX leaves those elements out while
    the graph runs and a runtime check of the compiled graph fails the run, as ORT."""
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    x = data((1, 1, 2, 2), seed=13)
    idx = np.array([[[[3, 16], [-1, 15]]]], np.int64)
    m, feeds = unpool_model(x, idx, attrs)
    with pytest.raises(Exception):
        run_cpu(m, feeds)
    with pytest.raises(Exception, match=r"\[MlxEp\]\[MaxUnpool\].*out of bounds"):
        run_mlx(m, feeds)


@pytest.mark.parametrize("output_shape", [[1, 1, 3, 4], [2, 1, 4, 4], [1, 1, 4]], ids=ids)
def test_maxunpool_bad_output_shape_errors(output_shape):
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2])
    x, idx = data((1, 1, 2, 2)), np.array([[[[0, 3], [9, 15]]]], np.int64)
    assert_mlx_error(*unpool_model(x, idx, attrs, output_shape, at_runtime=True))


# ---- declined and failing cases ----------------------------------------------------------------------

SAME_SMALL_KERNEL = dict(kernel_shape=[1, 2], strides=[3, 3], auto_pad="SAME_LOWER")  # negative pads


@pytest.mark.parametrize("op,attrs,symbolic", [
    ("LpPool", dict(kernel_shape=[2, 2], p=0), False),
    ("LpPool", SAME_SMALL_KERNEL, False),
    ("LpPool", SAME_SMALL_KERNEL, True),
    ("MaxPool", SAME_SMALL_KERNEL, True),  # with Indices: ORT's kernel that takes negative pads
], ids=["p0", "same-negative-pads", "same-maybe-negative-pads", "maxpool-same-negative"])
def test_declined(op, attrs, symbolic):
    assert_declined(*pool_model(op, data((1, 2, 8, 7)), attrs, indices=op == "MaxPool", symbolic=symbolic))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "GlobalMaxPool"])
def test_empty_spatial_dim_errors(op):
    """ORT allows only N to be empty."""
    attrs = {} if op.startswith("Global") else dict(kernel_shape=[1, 1])
    m, feeds = pool_model(op, np.zeros((1, 2, 0, 3), np.float32), attrs, symbolic=True)
    assert_mlx_error(m, feeds)
