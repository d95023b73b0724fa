"""Parity of the convolution family (Conv, ConvTranspose; src/ops/conv.cc, conv_transpose.cc) against
ORT's CPU EP.

fp32 data are small integers (every product and sum is exact in float32, so any summation order
gives ORT's result bit for bit and a layout or padding mistake cannot hide in a tolerance), plus
positive non-integer data for rounding. float16/bfloat16 are compared with ORT's float32 result
rounded to the narrow type (ORT's CPU EP has no such kernels)."""
import gc
import json
import os
import tempfile

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import onnxruntime_ep_mlx as mlx_ep
from harness import (NO_KERNEL, BF16, EP, assert_mlx_error, census_of_tests, census_total, census_with_and_without,
                     check_parity,
                     make_graph_model, make_model, mlx_device, node_model, run_cpu)
from harness_bf16 import check_bf16

OPSET = 22


def ints(shape, rng, dtype=np.float32, low=-3, high=3):
    return rng.integers(low, high + 1, size=shape).astype(np.float32).astype(dtype)


def conv_model(op, x, w, b=None, attrs=None, opset=OPSET, w_const=True):
    """(model, feeds) of one `op` node; W (and B) are constant initializers or graph inputs."""
    params = [("w", w)] + ([("b", b)] if b is not None else [])
    data = [("x", x)] + ([] if w_const else params)
    return node_model(op, data, attrs or {}, opset, host=params if w_const else None, out_dtype=x.dtype)


def check(op, x, w, b=None, attrs=None, opset=OPSET, w_const=True):
    """check_parity; float16/bfloat16 against ORT's float32 result of the same data."""
    model, feeds = conv_model(op, x, w, b, attrs, opset, w_const)
    if x.dtype == np.float32:
        return check_parity(model, feeds)
    f32 = [None if a is None else a.astype(np.float32) for a in (x, w, b)]
    ref = run_cpu(*conv_model(op, *f32, attrs, opset, w_const))
    if x.dtype == np.float16:
        return check_parity(model, feeds, expected=[r.astype(np.float16) for r in ref])
    return check_bf16(model, feeds, ref)


def case_id(case):
    x, w, attrs = case
    return f"x{'x'.join(map(str, x))}-w{'x'.join(map(str, w))}-" + \
        ("_".join(f"{k}={v}" for k, v in attrs.items()).replace(" ", "") or "default")


# (X shape, W shape, attributes) for Conv: W is (M, C / group, *K).
CONV_CASES = [
    # 2-D
    ((1, 3, 5, 5), (4, 3, 3, 3), {}),
    ((2, 3, 5, 5), (4, 3, 3, 3), {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}),
    ((2, 4, 7, 9), (6, 4, 3, 2), {"strides": [2, 3], "pads": [1, 0, 2, 1]}),
    ((1, 2, 7, 9), (3, 2, 3, 2), {"dilations": [2, 3], "pads": [0, 2, 1, 0]}),
    ((1, 2, 7, 9), (3, 2, 3, 2), {"strides": [2, 2], "dilations": [2, 1], "pads": [2, 1, 0, 1]}),
    ((1, 2, 4, 4), (3, 2, 3, 2), {"pads": [4, 0, 1, 5]}),  # pads larger than the kernel
    ((2, 4, 7, 9), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 6, 7, 9), (9, 2, 3, 3), {"group": 3, "dilations": [1, 2]}),
    ((2, 5, 7, 9), (5, 1, 3, 3), {"group": 5, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 5, 9, 8), (5, 1, 3, 3), {"group": 5, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 7, 9), (6, 1, 3, 2), {"group": 3, "strides": [1, 2]}),  # depthwise, channel multiplier 2
    ((2, 8, 6, 5), (4, 8, 1, 1), {}),  # pointwise: a matrix product
    ((2, 6, 7, 9), (4, 6, 1, 1), {"strides": [2, 3], "kernel_shape": [1, 1]}),
    ((1, 4, 5, 5), (6, 2, 1, 1), {"group": 2}),
    ((1, 4, 5, 5), (6, 4, 1, 1), {"pads": [0, 1, 0, 0]}),
    ((1, 3, 5, 5), (2, 3, 5, 5), {}),  # kernel = input
    ((1, 1, 1, 1), (2, 1, 1, 1), {"pads": [1, 0, 0, 2]}),
    # width-1 kernels spanning whole rows (Im2ColCpu copies the valid rows in one run)
    ((2, 3, 12, 1), (4, 3, 5, 1), {}),  # Magika's layout: a 1-D convolution as (H, 1) planes
    ((1, 3, 12, 1), (4, 3, 3, 1), {"pads": [2, 0, 1, 0], "dilations": [2, 1]}),
    ((1, 2, 9, 3), (3, 2, 3, 1), {"pads": [1, 0, 1, 0]}),
    ((1, 2, 9, 3), (3, 2, 3, 1), {"pads": [1, 1, 1, 1]}),  # padded along W: row by row
    ((1, 2, 9, 1), (3, 2, 3, 1), {"strides": [2, 1], "pads": [1, 0, 0, 0]}),  # strided: value by value
    ((1, 1, 2, 1), (2, 1, 3, 1), {"pads": [3, 0, 3, 0]}),  # taps that read only padding
    # auto_pad: SAME's odd pixel at the end (UPPER) or the beginning (LOWER)
    ((1, 2, 7, 9), (3, 2, 3, 2), {"auto_pad": "SAME_UPPER"}),
    ((1, 2, 7, 9), (3, 2, 3, 2), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 9), (3, 2, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 3]}),
    ((1, 2, 7, 8), (3, 2, 4, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 2, 7, 9), (3, 2, 3, 2), {"auto_pad": "VALID", "strides": [2, 2], "dilations": [2, 3]}),
    ((1, 2, 7, 9), (3, 2, 3, 2), {"auto_pad": "NOTSET", "pads": [1, 1, 0, 0]}),
    ((1, 1, 5, 7), (2, 1, 1, 1), {"auto_pad": "SAME_UPPER", "strides": [3, 3]}),  # SAME pads < 0
    ((1, 1, 7, 7), (2, 1, 2, 1), {"auto_pad": "SAME_LOWER", "strides": [4, 4]}),
    ((1, 4, 9, 9), (4, 2, 3, 3), {"auto_pad": "SAME_UPPER", "group": 2, "strides": [2, 2]}),
    # 1-D
    ((2, 3, 11), (4, 3, 3), {}),
    ((2, 3, 11), (5, 3, 1), {"strides": [2]}),
    ((2, 3, 11), (4, 3, 4), {"strides": [3], "pads": [2, 1], "dilations": [2]}),
    ((1, 4, 10), (6, 2, 3), {"group": 2, "auto_pad": "SAME_LOWER", "strides": [2]}),
    ((1, 4, 10), (4, 1, 5), {"group": 4, "auto_pad": "SAME_UPPER"}),
    # 3-D (groups: one convolution per group)
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), {}),
    ((1, 4, 3, 4, 5), (6, 4, 1, 1, 1), {"strides": [1, 2, 2]}),
    ((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"strides": [2, 1, 2], "pads": [1, 0, 1, 0, 2, 1], "dilations": [1, 2, 1]}),
    ((2, 4, 4, 5, 6), (6, 2, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1, 1, 1]}),
    ((1, 3, 5, 5, 5), (3, 1, 3, 3, 3), {"group": 3, "auto_pad": "SAME_UPPER", "strides": [2, 2, 2]}),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[case_id(c) for c in CONV_CASES])
def test_conv(case):
    x_shape, w_shape, attrs = case
    rng = np.random.default_rng(len(x_shape) * 7 + w_shape[0])
    check("Conv", ints(x_shape, rng), ints(w_shape, rng), ints((w_shape[0],), rng), attrs)


# (X shape, W shape, attributes) for ConvTranspose: W is (C, M / group, *K).
CONV_TRANSPOSE_CASES = [
    # 2-D
    ((1, 3, 3, 3), (3, 2, 3, 3), {}),
    ((2, 3, 4, 5), (3, 2, 3, 2), {"strides": [2, 3], "kernel_shape": [3, 2]}),
    ((1, 2, 4, 5), (2, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 2, 1]}),
    ((1, 2, 4, 5), (2, 3, 3, 2), {"strides": [2, 2], "dilations": [2, 3], "pads": [0, 2, 1, 1]}),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"strides": [2, 2], "pads": [3, 0, 0, 4]}),  # pads > kernel: cropped
    ((1, 2, 4, 5), (2, 2, 3, 2), {"strides": [3, 2], "output_padding": [2, 1]}),
    ((1, 2, 4, 5), (2, 2, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 0]}),
    ((2, 4, 3, 5), (4, 3, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 1]}),
    ((1, 6, 3, 4), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 3, 4, 4), (3, 2, 2, 2), {"group": 3, "strides": [2, 2]}),
    ((1, 3, 1, 1), (3, 2, 3, 3), {"strides": [2, 2]}),
    # output_shape: total padding split with the odd pixel at the beginning, larger ones add zeros
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [3, 2], "output_shape": [8, 6]}),
    ((1, 2, 3, 4), (2, 2, 3, 3), {"strides": [3, 2], "output_shape": [9, 9], "output_padding": [1, 1]}),
    ((1, 2, 3, 4), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [6, 7], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 4), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [6, 7], "auto_pad": "SAME_LOWER"}),
    # auto_pad: target in * stride
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 4), (2, 2, 4, 3), {"strides": [1, 3], "auto_pad": "SAME_UPPER", "dilations": [2, 1]}),
    ((1, 2, 3, 4), (2, 2, 2, 2), {"strides": [3, 3], "auto_pad": "SAME_LOWER"}),  # full < in * stride
    ((1, 2, 3, 4), (2, 2, 3, 2), {"strides": [2, 3], "auto_pad": "VALID", "output_padding": [1, 2]}),
    # 1-D
    ((2, 3, 5), (3, 2, 3), {"strides": [2]}),
    ((1, 4, 6), (4, 3, 4), {"strides": [3], "pads": [2, 1], "dilations": [2], "group": 2, "output_padding": [1]}),
    ((1, 2, 5), (2, 2, 3), {"strides": [2], "auto_pad": "SAME_UPPER"}),
    # 3-D (groups: one convolution per group)
    ((1, 2, 3, 4, 3), (2, 3, 3, 2, 2), {"strides": [2, 1, 2]}),
    ((1, 2, 3, 3, 4), (2, 2, 2, 3, 2),
     {"strides": [2, 2, 1], "pads": [1, 0, 0, 0, 1, 1], "output_padding": [1, 0, 0]}),
    ((1, 4, 3, 3, 3), (4, 2, 3, 3, 3), {"group": 2, "strides": [2, 2, 2], "dilations": [1, 2, 1]}),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES, ids=[case_id(c) for c in CONV_TRANSPOSE_CASES])
def test_conv_transpose(case):
    x_shape, w_shape, attrs = case
    rng = np.random.default_rng(len(x_shape) * 11 + w_shape[1])
    m = w_shape[1] * attrs.get("group", 1)
    check("ConvTranspose", ints(x_shape, rng), ints(w_shape, rng), ints((m,), rng), attrs)


def test_conv_transposes_differing_only_in_strides():
    """ConvTransposes whose X, W, equivalent paddings (lo 1, hi 2) and dilations agree and whose
    strides differ, one after the other in one process: MLX's CUDA convolution caches its cuDNN
    graphs by a key without the input dilation, so with the strides as conv_general's input
    dilation the second ran the first one's graph (the H200 run: SAME_LOWER got the rows of the
    strides [3, 2] output; ops/conv_transpose.cc dilates X itself)."""
    rng = np.random.default_rng(46)
    x, w, b = ints((1, 2, 3, 3), rng), ints((2, 2, 3, 3), rng), ints((2,), rng)
    for attrs in ({"strides": [3, 2], "output_shape": [8, 6]}, {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
                  {"strides": [3, 3], "output_shape": [8, 8]}, {"strides": [3, 2], "output_shape": [8, 6]}):
        check("ConvTranspose", x, w, b, attrs)


@pytest.mark.parametrize("w_const", [True, False], ids=["w_initializer", "w_input"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("op,kernel", [("Conv", 3), ("Conv", 1), ("ConvTranspose", 3)])
def test_weights_and_bias(op, kernel, bias, w_const):
    rng = np.random.default_rng(5)
    x, w = ints((2, 4, 6, 7), rng), ints((4, 4, kernel, kernel), rng)
    b = ints((4,), rng) if bias else None
    pads = [1, 1, 0, 1] if kernel == 3 else [0, 0, 0, 0]
    check(op, x, w, b, {"strides": [2, 1], "pads": pads}, w_const=w_const)


@pytest.mark.parametrize("opset", [1, 11, 22])
@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_opsets(op, opset):
    rng = np.random.default_rng(6)
    x, w, b = ints((1, 2, 5, 6), rng), ints((2, 2, 3, 3), rng), ints((2,), rng)
    check(op, x, w, b, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, opset=opset)


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_non_integer_data(op):
    """Positive data (no cancellation): sums in any order agree to ~1e-7 relative."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.5, (2, 16, 9, 11)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, (16, 8, 3, 3)).astype(np.float32)
    b = rng.uniform(0.5, 1.5, (16,)).astype(np.float32)  # M = 16 both ways with group 2
    check(op, x, w, b, {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2})


LOW_CASES = [
    ("Conv", (2, 4, 7, 9), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ("Conv", (1, 5, 7, 9), (5, 1, 3, 3), {"group": 5, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("Conv", (1, 2, 4, 5, 6), (4, 1, 2, 3, 2), {"group": 2}),
    ("Conv", (2, 16, 7, 9), (8, 16, 1, 1), {"strides": [2, 2]}),
    ("ConvTranspose", (1, 4, 3, 5), (4, 3, 3, 2), {"group": 2, "strides": [2, 3], "pads": [1, 0, 0, 1]}),
    ("ConvTranspose", (1, 2, 4), (2, 3, 3), {"strides": [2], "output_shape": [8]}),
]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", LOW_CASES, ids=[f"{c[0]}-{case_id(c[1:])}" for c in LOW_CASES])
def test_low_precision(case, dtype, bias):
    """Non-integer data: one rounding of the float32 result (conv + bias) to the narrow type."""
    op, x_shape, w_shape, attrs = case
    rng = np.random.default_rng(8)
    m = w_shape[0] if op == "Conv" else w_shape[1] * attrs.get("group", 1)
    x = rng.uniform(0.5, 1.5, x_shape).astype(dtype)
    w = rng.uniform(0.5, 1.5, w_shape).astype(dtype)
    b = rng.uniform(0.5, 1.5, (m,)).astype(dtype) if bias else None
    check(op, x, w, b, attrs)


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_large_channels(op):
    """Many terms per output (C * kH * kW = 1152), positive data."""
    rng = np.random.default_rng(9)
    x = rng.uniform(0.5, 1.5, (1, 128, 12, 12)).astype(np.float32)
    w_shape = (32, 128, 3, 3) if op == "Conv" else (128, 32, 3, 3)
    w = rng.uniform(0.5, 1.5, w_shape).astype(np.float32)
    check(op, x, w, None, {"pads": [1, 1, 1, 1]})


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_empty_batch(op):
    rng = np.random.default_rng(10)
    x, w, b = ints((0, 4, 5, 6), rng), ints((4, 2, 3, 3), rng), ints((4 if op == "Conv" else 4,), rng)
    check(op, x, w, b, {"group": 2, "strides": [2, 1]})


def test_repeated_runs_with_new_weights():
    """Runtime weights are data: one compiled graph serves every run."""
    x = ints((1, 3, 6, 6), np.random.default_rng(11))
    for seed in range(3):
        rng = np.random.default_rng(seed)
        check("Conv", x, ints((4, 3, 3, 3), rng), ints((4,), rng), {"pads": [1, 1, 1, 1]}, w_const=False)


def test_mobilenet_block():
    """Conv 3x3 + Relu + depthwise 3x3 + Relu + pointwise: consecutive convolutions in one partition."""
    rng = np.random.default_rng(12)
    x = ints((2, 8, 12, 12), rng)
    inits = {"w1": ints((16, 8, 3, 3), rng), "w2": ints((16, 1, 3, 3), rng), "w3": ints((8, 16, 1, 1), rng)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="dw", pads=[1, 1, 1, 1], group=16),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="pw")]
    model = make_graph_model(nodes, [("x", np.float32, list(x.shape))], [("y", np.float32, None)], inits, OPSET)
    check_parity(model, {"x": x})


# Depthwise convolutions (one input channel per group; on MLX's CPU device one primitive of the
# EP's, src/ops/conv_depthwise_cpu.cc): the geometries where its ranges of valid output positions
# could be off by one.
DEPTHWISE_CASES = [
    ((1, 3, 7, 7), (3, 1, 2, 2), {"group": 3, "auto_pad": "SAME_LOWER", "strides": [4, 4]}),  # pads < 0
    ((1, 3, 7, 8), (3, 1, 2, 3), {"group": 3, "auto_pad": "SAME_UPPER", "strides": [4, 5]}),
    ((2, 6, 9, 10), (6, 1, 3, 3), {"group": 6, "dilations": [2, 3], "pads": [2, 3, 1, 0]}),
    ((1, 2, 4, 4), (2, 1, 3, 2), {"group": 2, "pads": [4, 0, 1, 5]}),  # pads larger than the kernel
    ((1, 2, 8, 9), (6, 1, 3, 3), {"group": 2, "strides": [2, 3], "pads": [0, 1, 2, 0]}),  # multiplier 3
    ((1, 3, 5, 5), (3, 1, 5, 5), {"group": 3}),  # kernel = input
    ((2, 5, 17), (10, 1, 4), {"group": 5, "strides": [2], "dilations": [3], "pads": [2, 4]}),
    ((1, 4, 9), (4, 1, 3), {"group": 4, "strides": [3], "pads": [0, 2]}),
    ((2, 32, 24, 24), (32, 1, 5, 5), {"group": 32, "pads": [2, 2, 2, 2]}),  # split over threads
    ((1, 16, 15, 13), (16, 1, 3, 3), {"group": 16, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    # 3x3 / 5x5 with column stride 1 or 2 and no column dilation: the padded-plane loops
    ((1, 4, 11, 12), (4, 1, 3, 3), {"group": 4, "strides": [3, 2], "dilations": [2, 1], "pads": [2, 1, 0, 2]}),
    ((2, 3, 9, 10), (6, 1, 5, 5), {"group": 3, "strides": [1, 2], "pads": [0, 3, 2, 1]}),
    ((1, 2, 4, 3), (2, 1, 5, 5), {"group": 2, "pads": [2, 2, 2, 2]}),  # windows larger than the input
    ((1, 2, 9, 9), (2, 1, 3, 3), {"group": 2, "dilations": [1, 2], "pads": [1, 2, 1, 2]}),  # column dilation
]


@pytest.mark.parametrize("data", ["ints", "uniform"])
@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=[case_id(c) for c in DEPTHWISE_CASES])
def test_depthwise(case, data):
    """Small integers (exact: a wrong position cannot hide) and positive non-integer data (rounding)."""
    x_shape, w_shape, attrs = case
    rng = np.random.default_rng(sum(x_shape) + len(w_shape))
    if data == "ints":
        x, w, b = ints(x_shape, rng), ints(w_shape, rng), ints((w_shape[0],), rng)
    else:
        x, w, b = (rng.uniform(0.5, 1.5, shape).astype(np.float32) for shape in (x_shape, w_shape, (w_shape[0],)))
    check("Conv", x, w, b, attrs)


def test_depthwise_non_finite_weights():
    """A weight of inf or NaN at a kernel position that reaches into the padding: ORT multiplies
    the padding's zeros too (0 * inf = NaN), and so does the EP."""
    x = np.ones((1, 3, 4, 5), np.float32)
    w = np.ones((3, 1, 3, 3), np.float32)
    w[0, 0, 0, 0], w[1, 0, 2, 1], w[2, 0, 1, 1] = np.inf, np.nan, -np.inf
    model, feeds = conv_model("Conv", x, w, None, {"group": 3, "pads": [1, 1, 1, 1]})
    expected = run_cpu(model, feeds)
    assert np.isnan(expected[0][0, 0, 0, 0]) and np.isinf(expected[0][0, 0, 1, 1])  # the case is what it says
    check_parity(model, feeds)


@pytest.mark.skipif(mlx_device() != "cpu", reason="the depthwise primitive is MLX's CPU device's")
def test_conv_primitives():
    """On MLX's CPU device a 1-D or 2-D depthwise convolution is one DepthwiseConvCpu, where the
    composed sum (ONNXRUNTIME_EP_MLX_CONV_CPU_KERNEL=0, which must pass the same cases) takes a
    Slice and an ExpandDims per kernel position, and a dense one (the block's first and its
    pointwise convolution) is one ConvGemmCpu, the column matrix and the product, where the
    composed form pads, views and copies, broadcasts W and reshapes: the primitive count drops."""
    cases = ["test_depthwise[x2x5x17-w10x1x4-group=5_strides=[2]_dilations=[3]_pads=[2,4]-uniform]",
             "test_depthwise[x1x3x7x7-w3x1x2x2-group=3_auto_pad=SAME_LOWER_strides=[4,4]-ints]",
             "test_mobilenet_block"]
    kernel, composed = census_with_and_without(__file__, cases, "ONNXRUNTIME_EP_MLX_CONV_CPU_KERNEL")
    assert sum("DepthwiseConvCpu" in line for line in kernel) == len(cases), kernel
    assert sum("ConvGemmCpu 2" in line for line in kernel) == 1, kernel  # test_mobilenet_block's
    assert not any(p in line for line in composed for p in ("DepthwiseConvCpu", "Im2ColCpu", "ConvGemmCpu")), composed
    assert sum(map(census_total, kernel)) + 10 < sum(map(census_total, composed)), (kernel, composed)


# A Conv whose output only an activation reads: on MLX's CPU device the activation runs in the
# convolution's task (src/ops/conv_activation.h), the values the composed forms give.
CONV_ACTIVATIONS = {
    "relu": ([("Relu", ["c"], {})], {}),
    "leaky_relu": ([("LeakyRelu", ["c"], {"alpha": 0.1})], {}),
    "hard_sigmoid": ([("HardSigmoid", ["c"], {"alpha": 0.3, "beta": 0.4})], {}),
    "hard_swish": ([("HardSwish", ["c"], {})], {}),
    "clip": ([("Clip", ["c", "lo", "hi"], {})], {"lo": np.float32(0), "hi": np.float32(6)}),
    "clip_min": ([("Clip", ["c", "lo"], {})], {"lo": np.float32(-1.5)}),
    "silu": ([("Sigmoid", ["c"], {}), ("Mul", ["c", "t0"], {})], {}),
}
# (X shape, W shape, bias, attributes): the column matrix's path, a pointwise product, two groups,
# a depthwise convolution (DepthwiseConvCpu applies the activation to each finished plane).
CONV_FORMS = {"3x3": ((2, 4, 9, 8), (6, 4, 3, 3), True, {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
              "1x1": ((1, 6, 5, 7), (8, 6, 1, 1), True, {}),
              "grouped": ((1, 4, 6, 6), (6, 2, 3, 3), False, {"group": 2}),
              "depthwise": ((2, 4, 7, 9), (4, 1, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]})}


def conv_activation_model(kind, form, also_output=False):
    """(model, feeds): Conv (`form`) then the activation `kind`; `also_output`: the Conv's output
    is a graph output too (a second reader)."""
    rng = np.random.default_rng(5)
    xs, ws, bias, attrs = CONV_FORMS[form]
    # Signed values, so that the activations see both sides of zero, in eighths: every product and
    # partial sum is exact in float32, so the convolution's values are the same in any summation
    # order (cuDNN's differ from ORT's: signed sums that cancel, 0.04 off by 1.4e-6 in a float32
    # sum on an H100), and the comparison is of the activations, at float32's tolerance.
    def eighths(low, high, shape):
        return (rng.integers(low * 8, high * 8 + 1, shape) / 8).astype(np.float32)
    x = eighths(-2, 2, xs)
    inits = {"w": eighths(-1, 1, ws)}
    if bias:
        inits["b"] = eighths(-1, 1, ws[0])
    act_nodes, consts = CONV_ACTIVATIONS[kind]
    inits.update(consts)
    nodes = [helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], **attrs)]
    for i, (op, inputs, a) in enumerate(act_nodes):
        out = "y" if i == len(act_nodes) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, inputs, [out], **a))
    outputs = [("y", np.float32, None)] + ([("c", np.float32, None)] if also_output else [])
    return make_graph_model(nodes, [("x", np.float32, list(xs))], outputs, inits, OPSET), {"x": x}


@pytest.mark.parametrize("form", CONV_FORMS)
@pytest.mark.parametrize("kind", CONV_ACTIVATIONS)
def test_conv_activation(kind, form):
    check_parity(*conv_activation_model(kind, form))


@pytest.mark.parametrize("kind", ["relu", "silu"])
def test_conv_activation_with_another_reader(kind):
    """The Conv's output is also a graph output: it stays a value of its own, the activation too."""
    check_parity(*conv_activation_model(kind, "3x3", also_output=True))


def test_conv_activation_primitives():
    """On MLX's CPU device each Conv + activation above is one ConvGemmCpu (or DepthwiseConvCpu) a
    run and nothing else (but the graph output's Contiguous, which the runner puts on every
    output); with a second reader of the Conv's output the activation is a primitive of its own."""
    if mlx_device() != "cpu":
        pytest.skip("MLX's CPU device only (GPUs take mx::conv_general)")
    cases = [f"test_conv_activation[{k}-{f}]" for k in CONV_ACTIVATIONS for f in CONV_FORMS]
    census, _ = census_of_tests(__file__, cases)
    alone = [f"total 2: Contiguous 1, {p} 1" for p in ("ConvGemmCpu", "DepthwiseConvCpu")]
    assert len(census) == len(cases) and all(line.endswith(tuple(alone)) for line in census), census
    assert sum(line.endswith(alone[1]) for line in census) == len(CONV_ACTIVATIONS), census
    shared = [f"test_conv_activation_with_another_reader[{k}]" for k in ("relu", "silu")]
    census, _ = census_of_tests(__file__, shared)
    assert len(census) == 2 and all("ConvGemmCpu 1" in line and census_total(line) > 3 for line in census), census


# ---- declined and failing nodes ------------------------------------------------------------------

def declined_reasons(model):
    """The EP's decline reasons for `model`'s nodes (asserting it claimed none), from its claim
    report, written when the EP is released."""
    mlx_ep.register_execution_provider_library()
    gc.collect()  # an EP of an earlier session, released now, would write its report to our path
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        os.environ["ONNXRUNTIME_EP_MLX_REPORT"] = path
        try:
            sess = ort.InferenceSession(model.SerializeToString(), providers=[EP, "CPUExecutionProvider"])
            del sess
            gc.collect()
        finally:
            del os.environ["ONNXRUNTIME_EP_MLX_REPORT"]
        with open(path) as f:
            graph = json.load(f)["graphs"][0]
    assert graph["nodes_claimed"] == 0
    return [d["reason"] for d in graph["declined"]]


def assert_cpu_kernel_rejects(model, message):
    """Creating a session with the EP fails in ORT's CPU kernel for the node: proof that the EP
    declined it (a claimed node would never reach that kernel)."""
    mlx_ep.register_execution_provider_library()
    with pytest.raises(Exception, match=message):
        ort.InferenceSession(model.SerializeToString(), providers=[EP, "CPUExecutionProvider"])


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_float64_is_declined(op):
    """MLX's convolution has no float64 kernel (nor has ORT's CPU EP)."""
    rng = np.random.default_rng(13)
    model, _ = conv_model(op, ints((1, 2, 5, 5), rng, np.float64), ints((2, 2, 3, 3), rng, np.float64))
    assert_cpu_kernel_rejects(model, NO_KERNEL)


def test_pads_with_auto_pad_are_declined():
    """(ORT's shape inference already refuses this for ConvTranspose.)"""
    rng = np.random.default_rng(15)
    model, _ = conv_model("Conv", ints((1, 2, 5, 5), rng), ints((2, 2, 3, 3), rng), None,
                          {"auto_pad": "VALID", "pads": [0, 0, 0, 0]})
    assert_cpu_kernel_rejects(model, "both 'auto_pad' and 'pads'")


@pytest.mark.parametrize("op,attrs,reason", [
    ("Conv", {"auto_pad": "SAME_UPPER", "dilations": [2, 2]}, "dilations"),
    ("ConvTranspose", {"strides": [2, 2], "output_padding": [2, 0]}, "output_padding"),
    ("ConvTranspose", {"output_padding": [0, 1]}, "output_padding"),
], ids=["conv_same_dilated", "convT_output_padding_ge_stride", "convT_output_padding_stride1"])
def test_ort_rejected_attributes_are_declined(op, attrs, reason):
    """ORT's CPU kernel fails on these nodes when it runs them; declined, they fail as without the EP."""
    rng = np.random.default_rng(14)
    model, feeds = conv_model(op, ints((1, 2, 5, 5), rng), ints((2, 2, 3, 3), rng), None, attrs)
    assert_mlx_error(model, feeds)
    reasons = declined_reasons(model)
    assert len(reasons) == 1 and reason in reasons[0], reasons


def unshaped(op, x, w, attrs):
    """(model, feeds) whose inputs have no static shapes, so that only the kernels can check them."""
    m = make_model(op, [("x", x.dtype, None), ("w", w.dtype, None)], [("y0", x.dtype, None)], attrs, opset=OPSET)
    return m, {"x": x, "w": w}


@pytest.mark.parametrize("op,x_shape,w_shape,attrs", [
    ("Conv", (1, 3, 5, 5), (2, 2, 3, 3), {}),                          # channels differ
    ("Conv", (1, 4, 5, 5), (3, 2, 3, 3), {"group": 2}),                # M not divisible by group
    ("Conv", (1, 2, 5, 5), (2, 2, 3, 3), {"kernel_shape": [3, 2]}),    # kernel_shape differs from W
    ("Conv", (1, 2, 2, 5), (2, 2, 3, 3), {}),                          # kernel larger than the input
    ("ConvTranspose", (1, 3, 5, 5), (2, 2, 3, 3), {}),                 # channels differ
    ("ConvTranspose", (1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [12, 7]}),  # too large
    ("ConvTranspose", (1, 2, 3, 3), (2, 2, 3, 3), {"pads": [3, 3, 2, 2]}),  # no output left
], ids=["conv_channels", "conv_group", "conv_kernel_shape", "conv_small_input", "convT_channels",
        "convT_output_shape", "convT_pads"])
def test_invalid_inputs_error(op, x_shape, w_shape, attrs):
    """ORT's kernel rejects these; the MLX run must fail too rather than make up an output."""
    rng = np.random.default_rng(16)
    assert_mlx_error(*unshaped(op, ints(x_shape, rng), ints(w_shape, rng), attrs))
