"""Parity harness: build test models, run them on ORT's CPU EP and on MLX (+ CPU fallback),
compare, and prove from ORT's profile that MLX ran every node. MLX sessions are created so that
they fail rather than silently becoming CPU-only (mlx_session). (bfloat16 helpers: harness_bf16.)"""
import atexit
import functools
import gc
import json
import os
import shutil
import tempfile
import warnings

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep

EP = "MLXExecutionProvider"
BF16 = np.dtype(ml_dtypes.bfloat16)

# Relative / absolute tolerances per dtype (DEVELOPERS.md: fp32 ~1e-5 rel, fp16 ~1e-3, bf16 ~1e-2).
TOLERANCES = {
    np.dtype(np.float32): (1e-5, 1e-6),
    np.dtype(np.float64): (1e-10, 1e-12),
    np.dtype(np.float16): (1e-3, 1e-3),
    BF16: (1e-2, 1e-2),
}

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float64): TensorProto.DOUBLE,
    BF16: TensorProto.BFLOAT16,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.uint64): TensorProto.UINT64,
    np.dtype(np.bool_): TensorProto.BOOL,
    np.dtype(object): TensorProto.STRING,  # numpy holds ONNX strings in object arrays
}


# (shape of A, shape of B) for binary ops: same shape, numpy broadcasting, scalars, an empty dim, rank 1..4.
BINARY_SHAPES = [
    ((3, 4), (3, 4)),
    ((2, 3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((), (2, 3)),
    ((5,), ()),
    ((0, 3), (1, 3)),
    ((2, 3, 4, 5), (3, 1, 5)),
]


def onnx_type(dtype):
    """ONNX element type for a numpy dtype."""
    return NP_TO_ONNX[np.dtype(dtype)]


def make_graph_model(nodes, inputs, outputs, initializers=None, opset=17, domain="", name="test"):
    """A model of `nodes`. `inputs`: list of (name, numpy dtype, shape or None) — use name "" to
    leave an optional input out; `outputs`: list of (name, dtype or None, shape or None), where
    None lets ONNX shape inference fill the type in; `initializers`: dict name -> numpy array
    (they become constant initializers, not graph inputs)."""
    initializers = initializers or {}
    graph_inputs = [helper.make_tensor_value_info(n, onnx_type(t), s)
                    for n, t, s in inputs if n and n not in initializers]
    graph_outputs = [helper.make_tensor_value_info(n, onnx_type(t) if t is not None else TensorProto.UNDEFINED, s)
                     for n, t, s in outputs]
    inits = [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()]
    graph = helper.make_graph(nodes, name, graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = 8
    if any(t is None for _, t, _ in outputs):
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        inferred = {v.name: v for v in model.graph.value_info}
        for o in model.graph.output:
            if o.type.tensor_type.elem_type == TensorProto.UNDEFINED and o.name in inferred:
                o.CopyFrom(inferred[o.name])
    return model


def make_model(op_type, inputs, outputs, attrs=None, opset=17, initializers=None, domain=""):
    """A one-node model; arguments as make_graph_model's."""
    node = helper.make_node(op_type, [n for n, _, _ in inputs], [n for n, _, _ in outputs],
                            domain=domain, **(attrs or {}))
    return make_graph_model([node], inputs, outputs, initializers, opset, domain, f"{op_type}_test")


def make_multi_model(ops, inputs, out_dtype, opset=17, attrs=None):
    """One node per op (named <op>_<i>, attributes attrs[i]), each reading every input in `inputs`
    ((name, dtype, shape) triples) and writing y<i> of `out_dtype` (a dtype, or a list, one per op)."""
    attrs = attrs or [{}] * len(ops)
    out_types = out_dtype if isinstance(out_dtype, list) else [out_dtype] * len(ops)
    names = [n for n, _, _ in inputs]
    nodes = [helper.make_node(op, names, [f"y{i}"], name=f"{op}_{i}", **a)
             for i, (op, a) in enumerate(zip(ops, attrs))]
    return make_graph_model(nodes, [(n, t, list(s)) for n, t, s in inputs],
                            [(f"y{i}", t, None) for i, t in enumerate(out_types)], opset=opset)


def node_model(op, data, attrs=None, opset=17, host=None, host_as_input=False, outputs=1, out_dtype=None,
               symbolic=False):
    """(model, feeds) of one `op` node on data inputs `data` (list of (name, array)) and host-value
    inputs `host` (list of (name, array or None for an absent optional input)); host values are
    constant initializers, or graph inputs fed at run time. Outputs y0, y1, ... have `out_dtype`
    (None: inferred). `symbolic` declares the data dims symbolic, d0, d1, ... (so ORT cannot
    constant-fold Shape/Size)."""
    inputs, inits, feeds = [], {}, {}
    for name, value in data:
        value = np.asarray(value)
        dims = ([f"d{i}" for i in range(value.ndim)] or None) if symbolic else list(value.shape)
        inputs.append((name, value.dtype, dims))
        feeds[name] = value
    for name, value in host or []:
        if value is None:
            inputs.append(("", None, None))
            continue
        inputs.append((name, value.dtype, list(value.shape)))
        if host_as_input:
            feeds[name] = value
        else:
            inits[name] = value
    outs = [(f"y{i}", out_dtype, None) for i in range(outputs)]
    return make_model(op, inputs, outs, attrs, opset, inits), feeds


def run_cpu(model, feeds):
    """Outputs from ORT's CPU EP alone."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_mlx_session(sess):
    """`sess` has the MLX EP and cannot be silently recreated on CPU alone. onnxruntime's Python
    InferenceSession retries on CPU only when creation raises RuntimeError/ValueError (GetCapability
    or Compile failing, the EP unknown to ORT), and again when a run raises EPFail, unless it was
    created with enable_fallback=0."""
    providers = sess.get_providers()
    assert EP in providers, f"the session runs on {providers}, without {EP}"
    assert not getattr(sess, "_enable_fallback", True), "the session can still fall back to CPU silently"


def mlx_session(model, so=None, profile=False):
    """An InferenceSession on MLX + CPU that fails instead of falling back to CPU silently.
    `model`: a ModelProto, serialized bytes or a path. `profile`: enable ORT's profiler (read the
    nodes back with profiled_nodes)."""
    mlx_ep.register_execution_provider_library()
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    so = so or ort.SessionOptions()
    profile_dir = None
    if profile:
        profile_dir = tempfile.mkdtemp(prefix="ep_mlx_profile_")
        # profiled_node_events removes it; a session never read back (a test that failed first)
        # leaves it to the end of the process.
        atexit.register(shutil.rmtree, profile_dir, True)
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, "profile")
    sess = ort.InferenceSession(data, so, providers=[EP, "CPUExecutionProvider"], enable_fallback=0)
    sess.disable_fallback()
    assert_mlx_session(sess)
    sess.profile_dir = profile_dir
    return sess


def profiled_node_events(sess):
    """Ends `sess`'s profiling (see mlx_session) and returns every node kernel event it logged,
    in order, as (event name, op type, provider)."""
    path = sess.end_profiling()
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        shutil.rmtree(sess.profile_dir, ignore_errors=True)
    return [(e["name"], e["args"].get("op_name"), e["args"].get("provider")) for e in events
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]


def profiled_nodes(sess):
    """profiled_node_events as (event name, provider) pairs."""
    return [(name, provider) for name, _, provider in profiled_node_events(sess)]


def assert_ran_on_mlx(nodes, what="session"):
    """Every node event of a profile ran on MLX (and there was at least one)."""
    off = [n for n, provider in nodes if provider != EP]
    assert nodes and not off, f"{what}: {len(off)}/{len(nodes)} node runs were not on {EP}: {off[:5]}"


def run_mlx_nodes(model, feeds, runs=1):
    """Outputs with MLX + CPU fallback (never silently CPU alone), plus the last run's nodes as
    (profile event name, provider) pairs read from ORT's profile."""
    sess = mlx_session(model, profile=True)
    for _ in range(runs):
        outs = sess.run(None, feeds)
    nodes = profiled_nodes(sess)
    # Each run logs one kernel event per executed node; keep those of the last run only.
    per_run = len(nodes) // runs if runs else 0
    return outs, nodes[len(nodes) - per_run:]


def run_mlx_with_report(model, feeds_list, so=None):
    """Runs each feed dict through one MLX session (see mlx_session) and returns (outputs per
    run, the EP's claim report with its run counters, the providers of the last run's nodes from
    ORT's profile). The EP reads ONNXRUNTIME_EP_MLX_REPORT when the session is created and
    writes the report when it is released."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        os.environ["ONNXRUNTIME_EP_MLX_REPORT"] = path
        try:
            sess = mlx_session(model, so, profile=True)
        finally:
            del os.environ["ONNXRUNTIME_EP_MLX_REPORT"]
        outs = [sess.run(None, f) for f in feeds_list]
        nodes = profiled_nodes(sess)
        del sess
        gc.collect()
        with open(path) as f:
            report = json.load(f)
    last_run = nodes[len(nodes) - len(nodes) // len(feeds_list):]
    return outs, report, [provider for _, provider in last_run]


def run_mlx(model, feeds, runs=1):
    """Outputs with MLX + CPU fallback, plus (mlx_nodes, total_nodes) of the last run."""
    outs, nodes = run_mlx_nodes(model, feeds, runs)
    return outs, sum(1 for _, provider in nodes if provider == EP), len(nodes)


# ORT's refusal of a node no EP took: "no kernel" from the CPU EP, or, when the session also has an
# EP with device memory (MLX on a GPU), the memcpy transformer's "provider type not set" that ORT
# raises first for such a node. Either proves that the EP declined it.
NO_KERNEL = r"NOT_IMPLEMENTED|Could not find an implementation|transformer_memcpy"


def cpu_or_none(model, feeds):
    """ORT CPU outputs, or None where ORT's CPU EP has no kernel for this node/types."""
    try:
        return run_cpu(model, feeds)
    except Exception as e:  # noqa: BLE001 - only "no kernel" is tolerated
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            return None
        raise


def numpy_outputs(fn):
    """`fn()`'s output(s) as a list of arrays, numpy's overflow/divide warnings silenced."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = fn()
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


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


def assert_close_to_scale(actual, expected, rtol=1e-5, what=""):
    """Whole-model comparison of float outputs: |actual - expected| <= rtol * (|expected| +
    max|expected|), i.e. the harness's fp32 relative tolerance measured against the output's own
    scale as well as per element. After dozens of nodes, elements that pass near zero through
    cancellation carry absolute rounding differences of the size of the values that cancelled, so
    per-element relative error is no measure there: ORT's CPU EP differs from itself by ~3e-7 of
    the output scale (and by up to 4e-4 per element) between optimization levels on the models
    of tests/models. Integers and bools compare exactly."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if actual.dtype.kind not in "fc":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale, equal_nan=True, err_msg=what)


def scaled_difference(actual, expected):
    """max|actual - expected| / max|expected|: the measure assert_close_to_scale bounds."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    scale = np.abs(expected).max() if expected.size else 0.0
    diff = np.abs(actual - expected).max() if expected.size else 0.0
    return float(diff / scale) if scale else float(diff)


@functools.lru_cache(maxsize=None)
def mlx_device():
    """"cpu" or "gpu": where the registered EP runs MLX."""
    return mlx_ep.get_ep_devices()[0].ep_metadata.get("mlx_device", "cpu")


def float64_on_mlx():
    """True when the EP claims float64 nodes: MLX computes float64 on its CPU device only."""
    return mlx_device() == "cpu"


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
    if all_on_mlx and not float64_on_mlx() and uses_float64(model):
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


def assert_declined(model, feeds):
    """The node must fall back to CPU (0 nodes on MLX) and still give CPU's answer, exactly."""
    ref = run_cpu(model, feeds)
    got, mlx, total = run_mlx(model, feeds)
    assert mlx == 0 and total >= 1, f"{mlx}/{total} nodes ran on MLX"
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


def assert_mlx_error(model, feeds):
    """ORT's CPU EP errors on this input; the MLX run must error too (no made-up output)."""
    with pytest.raises(Exception):
        run_cpu(model, feeds)
    with pytest.raises(Exception):
        run_mlx(model, feeds)


def ids(v):
    """A pytest id: shapes as 2x3 ("scalar" for ()), attribute dicts as k=v pairs, dtypes by name."""
    if isinstance(v, tuple):
        return "x".join(map(str, v)) or "scalar"
    if isinstance(v, dict):
        return "_".join(f"{k}={a}" for k, a in v.items()) or "default"
    if isinstance(v, (list, str, int)):
        return str(v)
    return np.dtype(v).name


def census_of_tests(test_file, cases, env=None, timeout=300):
    """The EP's "MLX primitives per run" lines (ONNXRUNTIME_EP_MLX_GRAPH_CENSUS=1, read once per
    process, hence a fresh one) of the tests `cases` (node ids in `test_file`), which must pass,
    and the process's other stderr lines (the EP's warnings: why a kernel turned itself off)."""
    import subprocess
    import sys
    # A value of None in `env` unsets the variable (a default under test).
    run_env = {**os.environ, "ONNXRUNTIME_EP_MLX_GRAPH_CENSUS": "1", **(env or {})}
    run_env = {k: v for k, v in run_env.items() if v is not None}
    # -s: the EP's census lines reach this process's stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"] +
                       [f"{test_file}::{case}" for case in cases], env=run_env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0 and f"{len(cases)} passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    lines = r.stderr.splitlines()
    census = [line for line in lines if "MLX primitives per run" in line]
    return census, [line for line in lines if "MLX primitives per run" not in line]


def census_total(line):
    """The primitive count of one census line ("MLX primitives per run, total N: ...")."""
    return int(line.split("total ")[1].split(":")[0])


def census_with_and_without(test_file, cases, switch):
    """census_of_tests of `cases` with the EP's `switch` (an ONNXRUNTIME_EP_MLX_*_CPU_KERNEL) on
    and off: (on, off). The cases must pass both ways."""
    on, _ = census_of_tests(test_file, cases, env={switch: "1"})
    off, _ = census_of_tests(test_file, cases, env={switch: "0"})
    return on, off
