"""Prompt buckets (ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS, docs/dynamic_shapes.md "Bucketing the
prompt", src/runtime/runner_buckets.cc and rows.cc): once some input dims have varied between
runs, a run where they all hold one length S >= 2 has that token axis zero-padded to a bucket (a
power of two, at least the variable's value), traced once per bucket, and its outputs cut back to
S rows -- only where the trace proves every output row reads only its own input rows. Every run
must match ORT's CPU EP on the unpadded inputs; the EP's report gives the bucketed runs, the
traces and the refusals with their reason. genai's layout (GroupQueryAttention writing a shared
KV buffer in place) is tested in test_llm.py."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness import EP, assert_close, run_cpu
from test_dynamic_shapes import run_with_report

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
VOCAB, HIDDEN, OUT = 11, 8, 6


def init(name, values, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def token_model(tail):
    """ids [1, S] -> embedding Gather -> LayerNormalization -> MatMul -> SiLU (x * Sigmoid(x)), and
    count = ReduceSum(mask [1, S]) (an integer sum over the zero padding); `tail` appends nodes
    reading "h" [1, S, OUT] and writing "y"."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [
        n("Gather", ["embed", "ids"], ["x"], axis=0),
        n("LayerNormalization", ["x", "gamma", "beta"], ["normed"], axis=-1, epsilon=1e-5),
        n("MatMul", ["normed", "w"], ["proj"]),
        n("Sigmoid", ["proj"], ["gate"]),
        n("Mul", ["proj", "gate"], ["h"]),
        *tail,
        n("ReduceSum", ["mask", "axis1"], ["count"], keepdims=0),
    ]
    inits = [init("embed", rng.standard_normal((VOCAB, HIDDEN))), init("gamma", rng.random(HIDDEN) + 0.5),
             init("beta", rng.standard_normal(HIDDEN)), init("w", rng.standard_normal((HIDDEN, OUT))),
             init("axis1", [1], np.int64), init("axis_tokens", [1], np.int64), init("zero", 0, np.int64),
             init("axis0", [0], np.int64), init("one1", [1], np.int64), init("two1", [2], np.int64),
             init("heads", [2, 3], np.int64)]
    graph = helper.make_graph(
        nodes, "tokens",
        [helper.make_tensor_value_info("ids", I64, [1, "s"]), helper.make_tensor_value_info("mask", I64, [1, "s"])],
        [helper.make_tensor_value_info("y", F32, None), helper.make_tensor_value_info("count", I64, [1])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


ROW_LOCAL = [helper.make_node("Identity", ["h"], ["y"])]
# torch's exporters build Reshape targets from Shape: h [1, S, 6] -> [1, S, 2, 3] with the batch
# from Gather(Shape), the length from Slice(Shape) and the rest constant; then heads first and
# back (Transpose), and a softmax over the last axis.
_n = helper.make_node
TORCH_STYLE = [
    _n("Shape", ["h"], ["shape"]),
    _n("Gather", ["shape", "zero"], ["batch"], axis=0),
    _n("Unsqueeze", ["batch", "axis0"], ["batch1"]),
    _n("Slice", ["shape", "one1", "two1"], ["length1"]),
    _n("Concat", ["batch1", "length1", "heads"], ["target"], axis=0),
    _n("Reshape", ["h", "target"], ["split"]),
    _n("Transpose", ["split"], ["heads_first"], perm=[0, 2, 1, 3]),
    _n("Softmax", ["heads_first"], ["soft"], axis=-1),
    _n("Transpose", ["soft"], ["back"], perm=[0, 2, 1, 3]),
    _n("Flatten", ["back"], ["y"], axis=2),
]
# Each reads across the token axis: padding would change the first S rows, so it is refused.
NOT_ROW_LOCAL = {
    "Softmax": [helper.make_node("Softmax", ["h"], ["y"], axis=1)],
    "ReduceSum": [helper.make_node("ReduceSum", ["h", "axis_tokens"], ["y"], keepdims=1)],  # a float sum
    "CumSum": [helper.make_node("CumSum", ["h", "axis_tokens"], ["y"])],
}


def feeds_of(lengths):
    rng = np.random.default_rng(1)
    feeds = []
    for s in lengths:
        mask = np.ones((1, s), np.int64)
        mask[0, s // 2] = 0  # the count is not just the length
        feeds.append({"ids": rng.integers(0, VOCAB, (1, s)), "mask": mask})
    return feeds


def check(model, feeds_list):
    outs, report, providers = run_with_report(model, feeds_list)
    assert providers and all(p == EP for p in providers), providers
    for feeds, got in zip(feeds_list, outs):
        for g, r in zip(got, run_cpu(model, feeds)):
            assert_close(g, r, what=f"S={feeds['ids'].shape[1]}")
    (part,) = report["runtime"]["partitions"]
    return part


def test_row_local_prompts_share_a_function_per_bucket(monkeypatch):
    """Lengths 3, then 5 and 7 (bucket 8), 9 and 12 (16), 17 (32), 3 again (8): the first run
    traces for its shape (nothing has varied yet), each bucket once; the outputs are the CPU EP's."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", "8")
    lengths = [3, 5, 7, 9, 12, 17, 3]
    part = check(token_model(ROW_LOCAL), feeds_of(lengths))
    assert part["bucketed_runs"] == len(lengths) - 1, part
    assert (part["traces"], part["bucket_refusals"]) == (4, 0), part


def test_reshape_targets_from_shapes_keep_the_rows(monkeypatch):
    """A torch-style Reshape whose target is built from the input's shape (Shape, Gather, Slice,
    Unsqueeze, Concat) keeps the token axis whole: the padded length reaches the target on that
    axis only, so the prompts are bucketed, and match the CPU EP."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", "8")
    lengths = [3, 5, 7, 9, 12]
    part = check(token_model(TORCH_STYLE), feeds_of(lengths))
    assert part["bucketed_runs"] == len(lengths) - 1, part
    assert (part["traces"], part["bucket_refusals"]) == (3, 0), part


def test_buckets_are_off_by_default(monkeypatch):
    monkeypatch.delenv("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", raising=False)
    lengths = [3, 5, 7]
    part = check(token_model(ROW_LOCAL), feeds_of(lengths))
    assert (part["bucketed_runs"], part["traces"]) == (0, 3), part


@pytest.mark.parametrize("op", sorted(NOT_ROW_LOCAL))
def test_reading_across_tokens_is_refused(monkeypatch, op):
    """The padded trace is refused at the node that reads across the token axis (one trace per
    bucket, kept off the cache), and every length then traces for its own shape."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", "8")
    lengths = [3, 5, 7, 9]
    part = check(token_model(NOT_ROW_LOCAL[op]), feeds_of(lengths))
    assert part["bucketed_runs"] == 0, part
    assert part["bucket_refusals"] == 2, part  # buckets 8 and 16
    assert f"({op})" in part["bucket_refusal"], part
    assert part["traces"] == len(lengths) + 2, part


def test_a_padded_trace_that_fails_runs_unpadded(monkeypatch):
    """A Reshape to the constant target [5, -1] takes 5, 10 and 15 tokens of 6 values but not 16:
    that trace fails, is refused, and the runs trace unpadded (as without buckets)."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", "8")
    model = token_model([helper.make_node("Reshape", ["h", "target"], ["y"])])
    model.graph.initializer.append(init("target", [5, -1], np.int64))
    lengths = [5, 10, 15]
    part = check(model, feeds_of(lengths))
    assert part["bucketed_runs"] == 0 and part["bucket_refusals"] == 1, part
    assert "trace failed" in part["bucket_refusal"], part
    assert part["traces"] == len(lengths), part


def test_a_target_that_only_equals_the_bucket_is_refused(monkeypatch):
    """Reshape [1, S, 6] to the constant [1, 8, -1]: padded to 8 rows the target's 8 sits on the
    token axis, but unpadded it splits the rows differently (S = 4: [1, 8, 3]), so the padding is
    refused; every run is the CPU EP's."""
    monkeypatch.setenv("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", "8")
    model = token_model([helper.make_node("Reshape", ["h", "target"], ["y"])])
    model.graph.initializer.append(init("target", [1, 8, -1], np.int64))
    part = check(model, feeds_of([8, 4, 12]))
    assert part["bucketed_runs"] == 0 and part["bucket_refusals"] == 2, part
    assert "(Reshape) its target" in part["bucket_refusal"], part
