"""Trace-time folding of shape arithmetic (src/runtime/plan.cc, HostEval in src/ops/op.h).

Exporters compute reshape targets, masks and positions from the runtime shapes of tensors
(Shape -> Gather -> Unsqueeze -> Concat -> Reshape). With symbolic dims ORT cannot fold them, so
the EP does, while tracing: each model below must run as one MLX partition with no node on CPU,
match ORT's CPU EP, trace once per input shape, and fold the shape nodes (the EP's report)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness import assert_close, run_cpu, run_mlx_with_report

I64 = TensorProto.INT64
F32 = TensorProto.FLOAT


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def model_of(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "folding", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def heads_model():
    """x [B, S, 8] -> split into 2 heads of 4 by runtime shape arithmetic, transpose there and
    back, merge, add x: the TorchScript exporter's multi-head reshape pattern."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "i0"], ["b"], axis=0),
        n("Gather", ["shape", "i1"], ["s"], axis=0),
        n("Unsqueeze", ["b", "ax0"], ["b1"]),
        n("Unsqueeze", ["s", "ax0"], ["s1"]),
        n("Concat", ["b1", "s1", "two", "four"], ["split_shape"], axis=0),
        n("Reshape", ["x", "split_shape"], ["heads"]),
        n("Transpose", ["heads"], ["bhsd"], perm=[0, 2, 1, 3]),
        n("Transpose", ["bhsd"], ["bshd"], perm=[0, 2, 1, 3]),
        n("Concat", ["b1", "s1", "eight"], ["merge_shape"], axis=0),
        n("Reshape", ["bshd", "merge_shape"], ["merged"]),
        n("Add", ["merged", "x"], ["y"]),
    ]
    inits = [const("i0", 0), const("i1", 1), const("ax0", [0]), const("two", [2]), const("four", [4]),
             const("eight", [8])]
    return model_of(nodes, [helper.make_tensor_value_info("x", F32, ["B", "S", 8])],
                    [helper.make_tensor_value_info("y", F32, ["B", "S", 8])], inits)


def causal_mask_model():
    """scores = x @ x^T masked causally with a mask built from Shape/Range/Unsqueeze/Less/Where,
    positions from Range(S): the GPT-2 export pattern."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "i1"], ["s"], axis=0),
        n("Range", ["zero", "s", "one"], ["pos"]),
        n("Unsqueeze", ["pos", "ax0"], ["cols"]),
        n("Unsqueeze", ["pos", "ax1"], ["rows"]),
        n("Less", ["rows", "cols"], ["future"]),
        n("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        n("MatMul", ["x", "xt"], ["scores"]),
        n("Where", ["future", "neg", "scores"], ["masked"]),
        n("Softmax", ["masked"], ["probs"], axis=-1),
        n("Cast", ["pos"], ["posf"], to=F32),
        n("Unsqueeze", ["posf", "ax1"], ["posc"]),
        n("Add", ["probs", "posc"], ["y"]),
    ]
    inits = [const("i1", 1), const("zero", 0), const("one", 1), const("ax0", [0]), const("ax1", [1]),
             const("neg", -1e9, np.float32)]
    return model_of(nodes, [helper.make_tensor_value_info("x", F32, ["B", "S", 4])],
                    [helper.make_tensor_value_info("y", F32, ["B", "S", "S"])], inits)


def shape_outputs_model():
    """Graph outputs computed from shapes alone: Shape(x), Size(x), Concat(Shape, Shape) * 2."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Size", ["x"], ["size"]),
        n("Concat", ["shape", "shape"], ["both"], axis=0),
        n("Mul", ["both", "two"], ["doubled"]),
    ]
    return model_of(nodes, [helper.make_tensor_value_info("x", F32, ["A", "B"])],
                    [helper.make_tensor_value_info("shape", I64, [2]),
                     helper.make_tensor_value_info("size", I64, []),
                     helper.make_tensor_value_info("doubled", I64, [4])], [const("two", 2)])


def run_with_report(model, feeds_list):
    """run_mlx_with_report with ORT's own graph optimizations off: its ReshapeFusion would
    rewrite the simplest of these chains before the EP sees them, and real models hold many it
    cannot rewrite."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return run_mlx_with_report(model, feeds_list, so)


def check_one_partition(model, feeds_list, folded_per_trace):
    outs, report, providers = run_with_report(model, feeds_list)
    graph = report["graphs"][0]
    assert graph["declined"] == [] and graph["boundaries"] == [], graph
    assert graph["nodes_claimed"] == graph["nodes_total"] == len(model.graph.node)
    assert len(graph["partitions"]) == 1, [len(p["nodes"]) for p in graph["partitions"]]
    assert providers == ["MLXExecutionProvider"], providers  # one fused node, nothing on CPU
    for feeds, got in zip(feeds_list, outs):
        for g, r in zip(got, run_cpu(model, feeds)):
            assert_close(g, r)
    (part,) = report["runtime"]["partitions"]
    shapes = len({tuple(a.shape for a in f.values()) for f in feeds_list})
    assert part["cache_misses"] == shapes and part["traces"] == shapes, part
    assert part["folded_nodes"] == folded_per_trace * shapes, part
    return outs


def test_heads_reshape_chain_is_one_partition():
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 5, 8)).astype(np.float32)},
             {"x": rng.standard_normal((2, 5, 8)).astype(np.float32)},
             {"x": rng.standard_normal((3, 7, 8)).astype(np.float32)}]
    # Shape, 2 Gather, 2 Unsqueeze, 2 Concat fold; the Reshapes read x, so they do not.
    check_one_partition(heads_model(), feeds, folded_per_trace=7)


def test_causal_mask_chain_is_one_partition():
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((2, 6, 4)).astype(np.float32)},
             {"x": rng.standard_normal((1, 9, 4)).astype(np.float32)}]
    # Shape, Gather, Range, 2 Unsqueeze, Less, Cast, Unsqueeze fold.
    check_one_partition(causal_mask_model(), feeds, folded_per_trace=8)


def test_shape_derived_graph_outputs():
    feeds = [{"x": np.zeros((3, 5), np.float32)}, {"x": np.zeros((0, 2), np.float32)}]
    outs = check_one_partition(shape_outputs_model(), feeds, folded_per_trace=4)
    np.testing.assert_array_equal(outs[0][0], [3, 5])
    assert outs[0][1] == 15 and outs[1][1] == 0
    np.testing.assert_array_equal(outs[1][2], [0, 4, 0, 4])


def test_shape_from_runtime_data_is_read_at_run_time():
    """A reshape target computed from a graph input's *data* cannot fold: the producer runs in
    its own partition and the value crosses to the Reshape's partition, read on the host."""
    n = helper.make_node
    model = model_of(
        [n("Mul", ["dims", "one"], ["target"]), n("Reshape", ["x", "target"], ["y"])],
        [helper.make_tensor_value_info("x", F32, [2, 6]), helper.make_tensor_value_info("dims", I64, [2])],
        [helper.make_tensor_value_info("y", F32, None)], [const("one", 1)])
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    feeds = [{"x": x, "dims": np.array([3, 4], np.int64)}, {"x": x, "dims": np.array([4, 3], np.int64)}]
    outs, report, providers = run_with_report(model, feeds)
    assert len(report["graphs"][0]["partitions"]) == 2
    (boundary,) = report["graphs"][0]["boundaries"]
    assert boundary["value"] == "target" and "depends on runtime tensor data" in boundary["reason"], boundary
    assert providers == ["MLXExecutionProvider"] * 2, providers
    assert outs[0][0].shape == (3, 4) and outs[1][0].shape == (4, 3)
    np.testing.assert_array_equal(outs[1][0].ravel(), x.ravel())


@pytest.mark.parametrize("compile_env", ["0", "1"])
def test_folding_in_eager_mode(compile_env, monkeypatch):
    """ONNXRUNTIME_EP_MLX_NO_COMPILE runs the same traced graph eagerly: folding works there too."""
    if compile_env == "1":
        monkeypatch.setenv("ONNXRUNTIME_EP_MLX_NO_COMPILE", "1")
    x = np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)
    outs, report, _ = run_with_report(heads_model(), [{"x": x}])
    assert_close(outs[0][0], run_cpu(heads_model(), {"x": x})[0])
    assert report["runtime"]["partitions"][0]["folded_nodes"] == 7
