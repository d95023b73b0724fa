"""Parity tests of Pad (2-10, 11-12, 13-17, 18, 19+; src/ops/pad.cc) against ORT's CPU kernel, and
against numpy's pad for types ORT's kernel lacks."""
import numpy as np
import pytest

from harness import BF16, assert_mlx_error, check_parity, ids, make_model, node_model, random_array
from harness_bf16 import check_parity_or_numpy, check_parity_via_float32

DTYPES = [np.float32, np.float16, BF16, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
          np.uint16, np.uint32, np.uint64, np.bool_]
NP_MODES = {"constant": "constant", "edge": "edge", "reflect": "reflect", "wrap": "wrap"}


def pad_model(x, pads, mode="constant", value=None, axes=None, opset=19, runtime=False, runtime_value=False):
    """(model, feeds) of one Pad-11+ node: pads/axes are constants (graph inputs if `runtime`),
    constant_value a constant (a graph input if `runtime_value`) or absent."""
    inputs, inits, feeds = [("x", x.dtype, list(x.shape))], {}, {"x": x}
    extra = [("pads", np.asarray(pads, np.int64), runtime), ("value", value, runtime_value),
             ("axes", None if axes is None else np.asarray(axes, np.int64), runtime)]
    while extra and extra[-1][1] is None:
        extra.pop()
    for name, v, as_input in extra:
        if v is None:
            inputs.append(("", None, None))
            continue
        v = np.asarray(v)
        inputs.append((name, v.dtype, list(v.shape)))
        if as_input:
            feeds[name] = v
        else:
            inits[name] = v
    return make_model("Pad", inputs, [("y", x.dtype, None)], {"mode": mode}, opset, inits), feeds


def numpy_pad(x, pads, mode, value=0, axes=None):
    """ONNX Pad with numpy: negative pads crop first, then np.pad."""
    rank = x.ndim
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[len(axes) + i]
    x = x[tuple(slice(max(0, -b), x.shape[d] - max(0, -e)) for d, (b, e) in enumerate(zip(begin, end)))]
    width = [(max(0, b), max(0, e)) for b, e in zip(begin, end)]
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=value)
    return np.pad(x, width, mode=NP_MODES[mode])


CASES = [
    ((3, 4), [1, 2, 2, 1]),
    ((2, 3, 5), [0, 1, 2, 1, 0, 2]),
    ((1, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1]),
    ((2, 5, 4), [0, -1, 2, 1, -2, 0]),   # crop and pad on one axis
    ((7,), [-2, -3]),                     # crop only
    ((3, 4), [0, 0, 0, 0]),
]


@pytest.mark.parametrize("shape,pads", CASES, ids=ids)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_modes(mode, shape, pads):
    x = random_array(shape, np.float32)
    got = check_parity(*pad_model(x, pads, mode, np.float32(1.5) if mode == "constant" else None))
    np.testing.assert_array_equal(got[0], numpy_pad(x, pads, mode, 1.5))


@pytest.mark.parametrize("pads", [[0, 5, 0, 4], [3, 2, 5, 1], [0, -1, 0, 6]], ids=ids)
def test_wrap_wider_than_axis(pads):
    """wrap repeats the (cropped) axis as often as needed."""
    x = random_array((4, 3), np.int32, low=-9, high=9)
    got = check_parity(*pad_model(x, pads, "wrap"))
    np.testing.assert_array_equal(got[0], numpy_pad(x, pads, "wrap"))


@pytest.mark.parametrize("dtype", DTYPES, ids=ids)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_dtypes(mode, dtype):
    x = random_array((3, 4, 2), dtype)
    pads = [1, 0, 1, 2, 1, 0]
    value = None
    if mode == "constant":
        value = np.array(True if dtype == np.bool_ else 3, dtype=dtype)
    model, feeds = pad_model(x, pads, mode, value)
    check_parity_or_numpy(model, feeds, lambda: numpy_pad(x, pads, mode, value if value is not None else 0))


@pytest.mark.parametrize("opset", [11, 13, 18, 19, 21])
def test_opsets(opset):
    x = random_array((2, 3, 4), np.float32)
    check_parity(*pad_model(x, [0, 1, 1, 1, 0, 2], "reflect", opset=opset))
    check_parity(*pad_model(x, [1, 0, 0, 0, 2, 1], "constant", np.float32(-2), opset=opset))


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=ids)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_opset2_attributes(mode, dtype):
    x = random_array((3, 5), dtype)
    attrs = {"mode": mode, "pads": [1, 0, 2, 3]}
    if mode == "constant":
        attrs["value"] = 2.5
    check_parity_via_float32(*node_model("Pad", [("x", x)], attrs, 2), dtype)


@pytest.mark.parametrize("axes,pads", [([1], [2, 1]), ([-1, 0], [1, 0, 2, 1]), ([2, 0], [0, 1, -1, 2])], ids=ids)
@pytest.mark.parametrize("mode", ["constant", "edge", "wrap"])
def test_axes(mode, axes, pads):
    x = random_array((3, 4, 5), np.float32)
    got = check_parity(*pad_model(x, pads, mode, axes=axes))
    np.testing.assert_array_equal(got[0], numpy_pad(x, pads, mode, 0, axes))


def test_runtime_pads_value_and_axes():
    """pads/axes fed at run time are read on the host; constant_value is ordinary data."""
    x = random_array((3, 4), np.float32)
    check_parity(*pad_model(x, [1, 2], "constant", np.float32(7), axes=[1], runtime=True, runtime_value=True))
    check_parity(*pad_model(x, [1, 0, 2, 3], "constant", np.float32(-1), runtime_value=True))
    m, feeds = pad_model(x, [1, 0, 2, 3], "constant", np.float32(-1), runtime_value=True)
    for v in (0.5, 9.0):  # one compiled graph serves every value
        feeds["value"] = np.array(v, np.float32)
        check_parity(m, feeds)


@pytest.mark.parametrize("value", [np.array([5], np.float32), np.array([[5]], np.float32)], ids=["1", "1x1"])
def test_constant_value_of_one_element(value):
    check_parity(*pad_model(random_array((3, 4), np.float32), [0, 1, 0, 1], "constant", value))


@pytest.mark.parametrize("shape,pads,mode", [
    ((0, 3), [1, 0, 1, 0], "constant"),    # pad the empty axis
    ((0, 3), [0, 1, 0, 2], "edge"),        # an empty axis stays empty
    ((0, 3), [0, 1, 0, 0], "reflect"),
    ((3, 4), [0, -4, 0, 0], "constant"),   # cropped to nothing
    ((3, 4), [0, -4, 0, 2], "constant"),   # cropped to nothing, then padded
], ids=ids)
def test_empty(shape, pads, mode):
    x = random_array(shape, np.float32)
    got = check_parity(*pad_model(x, pads, mode))
    np.testing.assert_array_equal(got[0], numpy_pad(x, pads, mode))


@pytest.mark.parametrize("shape,pads,mode", [
    ((1, 3), [0, 3, 0, 0], "reflect"),   # pad as wide as the axis
    ((1, 3), [0, -1, 0, 2], "reflect"),  # wider than the cropped axis
    ((1, 1), [0, 1, 0, 1], "reflect"),   # reflect needs 2 elements
    ((1, 3), [0, -3, 0, 1], "edge"),     # nothing left to repeat
    ((1, 3), [0, -4, 0, 0], "constant"), # crops more than the axis holds
    ((0, 3), [1, 0, 0, 0], "edge"),      # padding an empty axis
    ((0, 3), [0, 1, 0, 0], "wrap"),      # ORT's wrap refuses empty inputs
], ids=ids)
def test_invalid_pads_error(shape, pads, mode):
    """ORT's kernel rejects these pads; the MLX translation must fail too."""
    x = random_array(shape, np.float32)
    assert_mlx_error(*pad_model(x, pads, mode, runtime=True))


@pytest.mark.parametrize("opset", [2, 11, 18])
def test_wrap_before_19(opset):
    """wrap is ONNX's from opset 19, but ORT's kernel takes it at any opset: so does the translation."""
    x = random_array((3, 4), np.float32)
    if opset == 2:
        check_parity(*node_model("Pad", [("x", x)], {"mode": "wrap", "pads": [0, 2, 1, 3]}, 2))
    else:
        check_parity(*pad_model(x, [0, 2, 1, 3], "wrap", opset=opset))


def test_constant_value_of_two_elements_errors():
    assert_mlx_error(*pad_model(random_array((3, 4), np.float32), [0, 1, 0, 1], "constant",
                                np.array([1, 2], np.float32), runtime_value=True))
