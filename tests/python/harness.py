"""Parity harness: build single-node models, run them on ORT's CPU EP and on MLX (+ CPU
fallback), compare, and prove from ORT's profile that MLX ran every node."""
import json
import os
import tempfile

import functools

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep

EP = "MLXExecutionProvider"

# Relative / absolute tolerances per dtype (DEVELOPERS.md: fp32 ~1e-5 rel, fp16 ~1e-3, bf16 ~1e-2).
TOLERANCES = {
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-10, 1e-12),
    np.dtype(np.float16): (1e-3, 1e-3),
    np.dtype(ml_dtypes.bfloat16): (1e-2, 1e-2),
}

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(ml_dtypes.bfloat16): TensorProto.BFLOAT16,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.uint64): TensorProto.UINT64,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def onnx_type(dtype):
    """ONNX element type for a numpy dtype."""
    return NP_TO_ONNX[np.dtype(dtype)]


def make_model(op_type, inputs, outputs, attrs=None, opset=17, initializers=None, domain=""):
    """A one-node model. `inputs`: list of (name, numpy dtype, shape or None) — use name "" to
    leave an optional input out; `outputs`: list of (name, dtype or None, shape or None), where
    None lets ONNX shape inference fill the type in; `initializers`: dict name -> numpy array
    (they become constant initializers, not graph inputs)."""
    initializers = initializers or {}
    node = helper.make_node(op_type, [n for n, _, _ in inputs], [n for n, _, _ in outputs],
                            domain=domain, **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, onnx_type(t), s)
                    for n, t, s in inputs if n and n not in initializers]
    graph_outputs = [helper.make_tensor_value_info(n, onnx_type(t) if t is not None else TensorProto.UNDEFINED, s)
                     for n, t, s in outputs]
    inits = [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()]
    graph = helper.make_graph([node], f"{op_type}_test", graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = 8
    if any(t is None for _, t, _ in outputs):
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        inferred = {v.name: v for v in model.graph.value_info}
        for o in model.graph.output:
            if o.type.tensor_type.elem_type == TensorProto.UNDEFINED and o.name in inferred:
                o.CopyFrom(inferred[o.name])
    return model


def run_cpu(model, feeds):
    """Outputs from ORT's CPU EP alone."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_mlx(model, feeds, runs=1):
    """Outputs with MLX + CPU fallback, plus (mlx_nodes, total_nodes) read from ORT's profile
    of the last run."""
    mlx_ep.register_execution_provider_library()
    so = ort.SessionOptions()
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = os.path.join(tmp, "profile")
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=[EP, "CPUExecutionProvider"])
        for _ in range(runs):
            outs = sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    # Each run logs one kernel event per executed node; count those of the last run only.
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    per_run = len(nodes) // runs if runs else 0
    last = nodes[len(nodes) - per_run:]
    mlx = sum(1 for e in last if e["args"].get("provider") == EP)
    return outs, mlx, len(last)


def assert_close(actual, expected, dtype=None, rtol=None, atol=None, what=""):
    """Exact for integers/bools, dtype tolerance for floats; NaNs must match NaNs."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind in "fc" or actual.dtype == np.dtype(ml_dtypes.bfloat16):
        r, a = TOLERANCES.get(np.dtype(dtype or actual.dtype), (1e-5, 1e-6))
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol if rtol is not None else r,
                                   atol=atol if atol is not None else a, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


@functools.lru_cache(maxsize=None)
def mlx_device():
    """"cpu" or "gpu": where the registered EP runs MLX."""
    return mlx_ep.get_ep_devices()[0].ep_metadata.get("mlx_device", "cpu")


def uses_float64(model):
    """True when any graph input, output, initializer or value info is float64."""
    g = model.graph
    infos = list(g.input) + list(g.output) + list(g.value_info)
    return any(v.type.tensor_type.elem_type == TensorProto.DOUBLE for v in infos) or \
        any(t.data_type == TensorProto.DOUBLE for t in g.initializer)


def check_parity(model, feeds, rtol=None, atol=None, expected=None, all_on_mlx=True):
    """Runs `model` on CPU and on MLX, compares every output, and asserts MLX ran every node.
    `expected` overrides the CPU reference (for dtypes ORT's CPU EP lacks, e.g. bfloat16).
    float64 models are skipped on GPUs: MLX has no float64 there, so the EP declines them."""
    if all_on_mlx and mlx_device() != "cpu" and uses_float64(model):
        pytest.skip("float64 runs on MLX's CPU device only; the EP declines it on GPUs")
    ref = expected if expected is not None else run_cpu(model, feeds)
    got, mlx, total = run_mlx(model, feeds)
    if all_on_mlx:
        assert total > 0 and mlx == total, f"only {mlx}/{total} nodes ran on MLX"
    for i, (g, r) in enumerate(zip(got, ref)):
        assert_close(g, r, rtol=rtol, atol=atol, what=f"output {i}")
    return got


def random_array(shape, dtype, rng=None, low=-3.0, high=3.0):
    """Random data of `dtype`: uniform floats in [low, high), integers in [low, high], bools."""
    rng = rng or np.random.default_rng(0)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = max(int(low), np.iinfo(dtype).min)
        return rng.integers(lo, int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)
