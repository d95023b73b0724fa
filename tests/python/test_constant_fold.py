"""Constant subgraphs of a trace evaluated once (src/runtime/constant_fold.h): those that read
at least 4 KiB of initializers.

Translations build MLX ops on initializers (Conv's weight reshaped for its GEMM, MatMulNBits'
words, scales and biases on a GPU); without folding, mx::compile keeps them in the compiled
function and every run evaluates them again. Here: the same results as ORT's CPU EP, bit for bit
the same as without folding, fewer primitives per run, and the fold reused when a trace repeats."""
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness import assert_close, run_cpu, run_mlx_with_report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def conv_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((32,)).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32, 16, 16])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def feeds(runs):
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((2, 16, 16, 16)).astype(np.float32)} for _ in range(runs)]


def run_with(env, runs=3):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        outs, report, providers = run_mlx_with_report(conv_model(), feeds(runs))
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert set(providers) == {"MLXExecutionProvider"}, providers
    (part,) = report["runtime"]["partitions"]
    return [o[0] for o in outs], part


def test_folded_constants_give_the_same_results():
    folded, part = run_with({})
    unfolded, part_off = run_with({"ONNXRUNTIME_EP_MLX_NO_CONSTANT_FOLD": "1"})
    assert part["traces"] == 1 and part["constant_primitives_folded"] > 0, part
    assert part_off["constant_primitives_folded"] == 0, part_off
    for got, ref, feed in zip(folded, unfolded, feeds(3)):
        np.testing.assert_array_equal(got, ref)  # the same ops, evaluated earlier
        assert_close(got, run_cpu(conv_model(), feed)[0], rtol=1e-5, atol=1e-5)


def test_an_equal_subgraph_of_a_later_trace_reuses_the_fold():
    # Without mx::compile every run traces: each trace's constants are the first trace's.
    _, once = run_with({})
    _, part = run_with({"ONNXRUNTIME_EP_MLX_NO_COMPILE": "1"})
    assert part["traces"] == 3, part
    assert part["constant_primitives_folded"] == 3 * once["constant_primitives_folded"], part


def census(env):
    code = ("import sys; sys.path[:0] = [{p!r}, {t!r}]\n"
            "import test_constant_fold as t\n"
            "t.run_with({{}}, runs=2)\n").format(p=os.path.join(ROOT, "python"), t=os.path.dirname(__file__))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ONNXRUNTIME_EP_MLX_GRAPH_CENSUS": "1", **env})
    assert proc.returncode == 0, proc.stderr
    # The census logs again when a run's graph changes: the second run's function takes the
    # scalar leaves as inputs (src/runtime/scalars.h), without their Contiguous primitives.
    lines = [line for line in proc.stderr.splitlines() if "MLX primitives per run" in line]
    assert 1 <= len(lines) <= 2, lines
    return int(lines[-1].split("total ")[1].split(":")[0])


def test_a_run_evaluates_fewer_primitives():
    assert census({}) < census({"ONNXRUNTIME_EP_MLX_NO_CONSTANT_FOLD": "1"})
