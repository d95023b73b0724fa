"""Parity tests of TensorScatter (24; src/ops/tensor_scatter.cc), opset 24's KV-cache update, and
BitCast (26; src/ops/tensor_const.cc) against ORT's CPU kernels: TensorScatter with and without
write indices, linear and circular (wrapping past the cache's end), on the sequence axis of
[B, H, S, D] and [B, S, D] caches, several types, and ORT's run-time errors; BitCast between types of
one width, bit for bit."""
import numpy as np
import pytest

from harness import assert_mlx_error, check_parity, ids, node_model


def scatter_model(past, update, write=None, attrs=None):
    data = [("past_cache", past), ("update", update)]
    if write is not None:
        data.append(("write_indices", np.asarray(write, np.int64)))
    return node_model("TensorScatter", data, attrs or {}, 24)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32], ids=ids)
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("case", ["prefill", "decode", "chunk"])
def test_kv_cache_update(case, mode, dtype):
    rng = np.random.default_rng(6)
    past = (rng.standard_normal((3, 2, 10, 4)) * 10).astype(dtype)
    seq = {"prefill": 6, "decode": 1, "chunk": 3}[case]
    update = (rng.standard_normal((3, 2, seq, 4)) * 10).astype(dtype)
    write = None if case == "prefill" else ([2, 9, 0] if mode == "circular" else [2, 10 - seq, 0])
    got = check_parity(*scatter_model(past, update, write, {"mode": mode}))
    assert not np.array_equal(got[0], past)


def test_circular_wraps_and_axis_one():
    """[B, S, D] with axis 1: circular write indices past the cache's length wrap (13 % 5 = 3)."""
    rng = np.random.default_rng(8)
    past = rng.standard_normal((2, 5, 3)).astype(np.float32)
    update = rng.standard_normal((2, 4, 3)).astype(np.float32)
    check_parity(*scatter_model(past, update, [13, 4], {"mode": "circular", "axis": 1}))


def test_run_time_errors_as_ort():
    """A negative write index, and in linear mode an update running past the cache, fail the run."""
    past = np.zeros((2, 1, 6, 2), np.float32)
    update = np.ones((2, 1, 2, 2), np.float32)
    assert_mlx_error(*scatter_model(past, update, [0, -1]))
    assert_mlx_error(*scatter_model(past, update, [5, 0]))


BITCASTS = [(np.float32, np.int32), (np.int32, np.float32), (np.float16, np.int16), (np.uint16, np.float16),
            (np.uint8, np.int8), (np.int64, np.uint64), (np.float64, np.int64)]


@pytest.mark.parametrize("pair", BITCASTS, ids=lambda p: f"{np.dtype(p[0]).name}-{np.dtype(p[1]).name}")
def test_bitcast(pair):
    from onnx import helper
    src, dst = pair
    rng = np.random.default_rng(2)
    x = np.frombuffer(rng.bytes(3 * 8 * np.dtype(src).itemsize), src).reshape(3, 8).copy()
    if np.dtype(src).kind == "f":
        x[~np.isfinite(x)] = 0  # any bits pass through; finite values keep the comparison simple
    model, feeds = node_model("BitCast", [("x", x)], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}, 26,
                              out_dtype=dst)
    got = check_parity(model, feeds, rtol=0, atol=0)
    np.testing.assert_array_equal(got[0].view(np.uint8), x.view(np.uint8))

