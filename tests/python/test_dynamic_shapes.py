"""Dynamic dims (docs/dynamic_shapes.md, src/runtime/plan.cc FindPrologue/TracePlan): an input
dim that changes between runs is tried as dynamic, so one compiled function serves every size of
it, when the partition reads it only through Shape/Size (as data) and cheap elementwise ops and
reductions (an uncompiled prologue). Anything that needs a value computed from it on the host (a
Reshape target) or reads the input itself in another op falls back to one trace per shape. Both
must match ORT's CPU EP at every size; the EP's report gives the traces."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness import EP, assert_close, run_cpu, run_mlx_with_report

I64 = TensorProto.INT64
F32 = TensorProto.FLOAT


def model_of(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "dynamic", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def const(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def run_with_report(model, feeds_list):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return run_mlx_with_report(model, feeds_list, so)


def mask_length_model(length="gather"):
    """genai's attention-mask subgraph in small: y = x * ReduceSum(m) + Shape(m)[1] - 1, the
    length taken as Gather(Shape(m), 1), Shape(m, start=-1)[0] or Size(m) (batch 1)."""
    n = helper.make_node
    total = {
        "gather": [n("Shape", ["m"], ["shape"]), n("Gather", ["shape", "one"], ["total"], axis=0)],
        "start": [n("Shape", ["m"], ["shape"], start=-1), n("Gather", ["shape", "zero"], ["total"], axis=0)],
        "size": [n("Size", ["m"], ["total"])],
    }[length]
    nodes = [
        n("ReduceSum", ["m", "axis1"], ["sum"], keepdims=0),
        n("Cast", ["sum"], ["sum_f"], to=F32),
        *total,
        n("Sub", ["total", "one"], ["last"]),
        n("Cast", ["last"], ["last_f"], to=F32),
        n("Mul", ["x", "sum_f"], ["scaled"]),
        n("Add", ["scaled", "last_f"], ["y"]),
    ]
    return model_of(nodes,
                    [helper.make_tensor_value_info("x", F32, [3]),
                     helper.make_tensor_value_info("m", I64, [1, "total"])],
                    [helper.make_tensor_value_info("y", F32, [3])],
                    [const("axis1", [1]), const("one", 1), const("zero", 0)])


def reshape_target_model():
    """The mask's length is a Reshape target: a [12] -> [T, 12 / T]."""
    n = helper.make_node
    nodes = [
        n("Shape", ["m"], ["shape"]),
        n("Gather", ["shape", "one"], ["total"], axis=0),
        n("Unsqueeze", ["total", "axis0"], ["total1"]),
        n("Concat", ["total1", "minus1"], ["target"], axis=0),
        n("Reshape", ["a", "target"], ["y"]),
    ]
    return model_of(nodes,
                    [helper.make_tensor_value_info("a", F32, [12]),
                     helper.make_tensor_value_info("m", I64, [1, "total"])],
                    [helper.make_tensor_value_info("y", F32, ["t", "u"])],
                    [const("one", 1), const("axis0", [0]), const("minus1", [-1])])


def softmax_model():
    """The varying input itself feeds an op that is no prologue op: x [1, T] -> Softmax."""
    return model_of([helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                    [helper.make_tensor_value_info("x", F32, [1, "t"])],
                    [helper.make_tensor_value_info("y", F32, [1, "t"])])


def check(model, feeds_list):
    outs, report, providers = run_with_report(model, feeds_list)
    assert providers and all(p == EP for p in providers), providers
    for feeds, got in zip(feeds_list, outs):
        for g, r in zip(got, run_cpu(model, feeds)):
            assert_close(g, r, what=str({k: v.shape for k, v in feeds.items()}))
    (part,) = report["runtime"]["partitions"]
    return part


@pytest.mark.parametrize("length", ["gather", "start", "size"])
def test_mask_length_is_dynamic(length):
    """Six mask lengths (zeros in the mask too), twice: the first length traces for its shape,
    the second once with the length dynamic, and every later run reuses that function."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(3).astype(np.float32)
    feeds = []
    for _ in range(2):
        for t in (2, 3, 5, 8, 13, 21):
            m = (rng.random((1, t)) < 0.7).astype(np.int64)
            feeds.append({"x": x, "m": m})
    part = check(mask_length_model(length), feeds)
    assert part["runs"] == len(feeds)
    assert part["traces"] == 2, part
    assert part["cache_hits"] == len(feeds) - 2, part


def test_reshape_target_from_a_varying_dim_traces_per_shape():
    """Falls back: a Reshape target needs the length on the host, so every length is traced for
    its shape (the failed dynamic attempt adds none), and every length again is a cache hit."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal(12).astype(np.float32)
    lengths = (2, 3, 4, 6)
    feeds = [{"a": a, "m": np.ones((1, t), np.int64)} for t in lengths * 2]
    part = check(reshape_target_model(), feeds)
    assert (part["traces"], part["cache_hits"]) == (len(lengths), len(lengths)), part


def test_varying_input_read_as_data_traces_per_shape():
    rng = np.random.default_rng(2)
    lengths = (1, 4, 7)
    feeds = [{"x": rng.standard_normal((1, t)).astype(np.float32)} for t in lengths * 2]
    part = check(softmax_model(), feeds)
    assert (part["traces"], part["cache_hits"]) == (len(lengths), len(lengths)), part
