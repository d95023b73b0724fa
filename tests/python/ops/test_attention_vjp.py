"""Parity tests of the pkg.onnax AttentionVJP contract (src/ops/attention_vjp*.cc).

The reference is ORT's CPU EP running each node's model-local function body (attention_vjp_models);
the gradients are also measured against a float64 numpy pullback."""
import os
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import attention_vjp_models as avm
from harness import (BF16, assert_close_to_scale, check_parity, float64_on_mlx, mlx_session, run_cpu,
                     run_mlx_with_report, scaled_difference)
from harness_bf16 import bf16_wrapped, check_bf16, feeds_as_float32

LIMIT = "ONNXRUNTIME_EP_MLX_ATTENTION_VJP_DENSE_LIMIT_BYTES"
CLAIM_DEBUG = "ONNXRUNTIME_EP_MLX_CLAIM_DEBUG"
# float32 gradients against float64, relative to each gradient's largest magnitude (measured: MLX
# <= 1.3e-6 at D = 256, <= 3e-7 elsewhere; ORT's CPU EP running the function body up to 1.5e-6).
F64_TOLERANCE = 2e-6
# Against ORT CPU, the harness's fp32 rtol applies per element and, as an absolute term, times the
# smallest gradient scale of the node (assert_close_to_scale's measure): dS = P * (dP - rowsum(G * Y))
# cancels, so elements near zero carry rounding of the size of the terms that cancelled (ORT's CPU
# result is up to 50% per element away from float64 there, while within 1.5e-6 of the scale).
RTOL = 1e-5


def scale_of(arrays):
    return min((float(np.abs(a).max()) for a in arrays if a.size), default=0.0)


def parity(model, feeds, expected=None, rtol=RTOL, atol=None):
    """check_parity (every node on MLX), and the contract node claimed as itself: were it declined,
    ORT would inline its function body, whose plain ONNX nodes MLX would run too."""
    ref = expected if expected is not None else run_cpu(model, feeds)
    got = check_parity(model, feeds, rtol=rtol, atol=rtol * scale_of(ref) if atol is None else atol, expected=ref)
    _, report, _ = run_mlx_with_report(model, [feeds])
    claimed = {n["op_type"] for g in report["graphs"] for p in g["partitions"] for n in p["nodes"]}
    contract = [n.op_type for n in model.graph.node if n.domain == avm.DOMAIN]
    assert contract and set(contract) <= claimed, f"{contract} not claimed: {sorted(claimed)}"
    return got


def check(c, limit=None, cpu_reference=True, **kw):
    """Parity with ORT CPU (every node on MLX, through check_parity) and closeness to the float64
    pullback (`cpu_reference` False: compared with the float64 pullback rounded to float32)."""
    model, feeds = avm.case(c, **kw)
    expected = avm.reference(c, feeds)[1]
    ref = run_cpu(model, feeds) if cpu_reference else [expected[i].astype(np.float32) for i in c.outputs]
    old = os.environ.get(LIMIT)
    if limit is not None:
        os.environ[LIMIT] = str(limit)
    try:
        got = parity(model, feeds, expected=ref)
    finally:
        if limit is not None:
            if old is None:
                del os.environ[LIMIT]
            else:
                os.environ[LIMIT] = old
    for out, i in zip(got, c.outputs):
        assert np.isfinite(out).all()
        err = scaled_difference(out, expected[i])
        assert err < F64_TOLERANCE, f"gradient {i}: {err:.2e} of its scale from float64"
    return got


# Every field value: ranks 3/4, GQA ratios 1/2/3/4, widths 8..256, causal with Sq <, =, > Sk, each
# mask kind, both forms. (config, batch, sq, sk)
FIELDS = [
    (avm.Config(rank=4, hq=2, hk=2, d=8), 2, 5, 5),
    (avm.Config(rank=3, hq=4, hk=2, d=16, causal=True), 2, 6, 9),
    (avm.Config(rank=4, hq=4, hk=1, d=32, causal=True, mask=1), 1, 7, 4),
    (avm.Config(rank=3, hq=6, hk=2, d=24, mask=2), 2, 3, 8),
    (avm.Config(rank=4, hq=3, hk=3, d=256, causal=True, mask=2), 1, 4, 4),
    (avm.Config(rank=3, hq=2, hk=1, d=40, causal=True, recompute=True), 2, 5, 5),
    (avm.Config(rank=4, hq=4, hk=2, d=32, causal=True, recompute=True), 1, 7, 3),
    (avm.Config(rank=4, hq=2, hk=2, d=64, causal=True, mask=1, recompute=True), 2, 3, 6),
    (avm.Config(rank=3, hq=3, hk=1, d=256, mask=2, recompute=True), 1, 4, 5),
    (avm.Config(rank=4, hq=2, hk=1, d=48, mask=2, causal=True, recompute=True), 1, 6, 6),
]


def config_id(v):
    """A pytest id: the op type without its 16-digit tag."""
    return v.op_type()[:-17] if isinstance(v, avm.Config) else str(v)


@pytest.mark.parametrize("c,batch,sq,sk", FIELDS, ids=config_id)
def test_fields(c, batch, sq, sk):
    check(c, batch=batch, sq=sq, sk=sk)


# Mask shapes broadcasting to [B, Hq, Sq, Sk], short in the last axis, rows fully masked.
MASKS = [((5,), ()), ((2, 1, 1, 5), ()), ((4, 3), ()), ((1, 2, 4, 1), ()), ((2, 2, 4, 5), (0, 2)),
         ((4, 5), (3,))]


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("kind", [1, 2])
@pytest.mark.parametrize("shape,rows_off", MASKS, ids=lambda v: "x".join(map(str, v)) or "-")
def test_masks(shape, rows_off, kind, recompute):
    c = avm.Config(rank=4, hq=2, hk=1, d=32, mask=kind, recompute=recompute)
    check(c, batch=2, sq=4, sk=5, mask_shape=shape, mask_rows_off=rows_off)


@pytest.mark.parametrize("recompute", [False, True])
def test_fully_masked_rows_with_causal(recompute):
    # Rows 1 and 4 masked; with causal Sq > Sk the mask also removes row 0's only key.
    c = avm.Config(rank=3, hq=2, hk=2, d=32, causal=True, mask=1, recompute=recompute)
    got = check(c, batch=1, sq=6, sk=4, mask_shape=(6, 4), mask_rows_off=(1, 4))
    assert not got[0].reshape(6, 2, 32)[[1, 4]].any()


@pytest.mark.parametrize("outputs", [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2)], ids=str)
@pytest.mark.parametrize("recompute", [False, True])
def test_output_subsets(outputs, recompute):
    check(avm.Config(rank=3, hq=4, hk=2, d=32, mask=1, outputs=outputs, recompute=recompute), sq=4, sk=6)


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("batch,sq,sk", [(0, 4, 4), (2, 0, 3), (2, 3, 0)], ids=str)
def test_empty(batch, sq, sk, recompute):
    # ORT's CPU EP fails on the function body of the recompute form and of empty key sequences
    # (empty MatMul / Reshape shapes), and its MatMul over an empty inner axis (dK, dV = dS^T Q,
    # P^T G with Sq = 0) returns uninitialised memory: those compare with the float64 pullback only.
    got = check(avm.Config(rank=3, hq=2, hk=1, d=32, mask=2, causal=True, recompute=recompute),
                cpu_reference=batch == 0 and not recompute, batch=batch, sq=sq, sk=sk)
    assert all(g.size == 0 or not g.any() for g in got)


@pytest.mark.parametrize("recompute", [False, True])
def test_symbolic_batch_and_sequence(recompute):
    # Only the widths (and rank-4 head counts) need to be static; batch and sequence lengths not.
    c = avm.Config(rank=3, hq=4, hk=2, d=32, causal=True, mask=1, recompute=recompute)
    model, feeds = avm.case(c, batch=2, sq=5, sk=6, mask_shape=(2, 1, 5, 4))
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        for i, name in ([(0, "B"), (1, "Sq" if vi.name in "QYG" else "Sk")] if vi.name != "Mask" else [(0, "B")]):
            dims[i].dim_param = name
    got = parity(model, feeds)
    expected = avm.reference(c, feeds)[1]
    assert all(scaled_difference(g, expected[i]) < F64_TOLERANCE for g, i in zip(got, c.outputs))


@pytest.mark.parametrize("slot", ["empty", "dropped"])
def test_absent_mask_without_mask_kind(slot):
    # Mask kind 0 ignores the Mask input, which may then be left out (an empty name, or no slot).
    c = avm.Config(rank=4, hq=2, hk=1, d=16, causal=True)
    model, feeds = avm.case(c, batch=2, sq=4, sk=6)
    if slot == "empty":
        model.graph.node[0].input[-1] = ""
    else:
        model.graph.node[0].input.pop(-1)
    model.graph.input.pop(-1)
    del feeds["Mask"]
    got = parity(model, feeds)
    expected = avm.reference(c, feeds)[1]
    assert all(scaled_difference(g, expected[i]) < F64_TOLERANCE for g, i in zip(got, c.outputs))


# The score budget: 4 * B * Hq * Sq * Sk = 4 * 2 * 4 * 9 * 7 = 2016 bytes. Over it the pullback runs
# query blocks of budget // (bytes of one query row) rows (9 blocks of 1 row at a budget of 1 byte,
# 8 + 1 rows at 2015), at 2016 the whole matrix at once; the recompute form follows the budget
# only when the variable is set (over it: Y through fused SDPA, then the blocked pullback).
@pytest.mark.parametrize("limit", [1, 2015, 2016], ids=str)
@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("rank,causal,mask", [(4, True, 2), (3, False, 1)], ids=str)
def test_score_budget(limit, recompute, rank, causal, mask):
    c = avm.Config(rank=rank, hq=4, hk=2, d=32, causal=causal, mask=mask, recompute=recompute)
    check(c, limit=limit, batch=2, sq=9, sk=7, mask_shape=(9, 5), mask_rows_off=(2,))


VALID = avm.Config(rank=3, hq=4, hk=2, d=32, causal=True, mask=1)
MALFORMED = [
    ("_r3_", "_r5_"), ("_q4_", "_q3_"), ("_q4_", "_q0_"), ("_d32_", "_d12_"), ("_d32_", "_d264_"),
    ("_s3eb33333_", "_s7f800000_"), ("_s3eb33333_", "_sbf800000_"), ("_s3eb33333_", "_s3eb3333_"),
    ("_c1_", "_c2_"), ("_o012_", "_o210_"), ("_o012_", "_o013_"), ("_o012_", "_o_"), ("_m1_", "_m3_"),
    ("_0123456789abcdef", "_0123456789abcdeg"), ("_0123456789abcdef", "_0123456789abcdef_extra"),
    ("AttentionVJP_", "AttentionVJP_v1_"), ("AttentionVJP_", "AttentionVJPX_"),
]


def declined(model, feeds, reason, capfd, rtol=RTOL):
    """The contract node is declined with `reason` (the EP's claim debug log): ORT then inlines its
    function body, whose plain ONNX nodes MLX runs (so assert_declined's "nothing on MLX" does not
    apply); the outputs still match ORT CPU."""
    name = model.graph.node[0].op_type
    ref = run_cpu(model, feeds)
    capfd.readouterr()
    os.environ[CLAIM_DEBUG] = "1"
    try:
        (got,), report, _ = run_mlx_with_report(model, [feeds])
    finally:
        del os.environ[CLAIM_DEBUG]
    log = capfd.readouterr().err
    claimed = {n["op_type"] for g in report["graphs"] for p in g["partitions"] for n in p["nodes"]}
    assert name not in claimed
    assert f"declined vjp ({avm.DOMAIN}::{name}): " in log, log[-2000:]
    line = next(x for x in log.splitlines() if f"declined vjp ({avm.DOMAIN}::{name}): " in x)
    assert reason in line, line
    for g, r in zip(got, ref):
        assert_close_to_scale(g, r, rtol)


@pytest.mark.parametrize("old,new", MALFORMED, ids=lambda v: v.strip("_"))
def test_malformed_names_declined(old, new, capfd):
    c = replace(VALID, scale=0.35)
    name = c.op_type().replace(old, new)
    assert name != c.op_type()
    _, feeds = avm.case(c, batch=1, sq=3, sk=3, mask_shape=(3, 3))
    model = avm.model(c, feeds, (2, 0), 3, 3, op_type=name)
    declined(model, feeds, "unsupported AttentionVJP function contract", capfd)


def test_recompute_width_below_32_declined(capfd):
    c = avm.Config(rank=4, d=24, recompute=True)
    model, feeds = avm.case(c, batch=1, sq=3, sk=3)
    declined(model, feeds, "head width must be a multiple of 8 in 32..256", capfd)


def test_interface_mismatches_declined(capfd):
    c = avm.Config(rank=4, hq=2, hk=2, d=16, mask=1)
    _, feeds = avm.case(c, batch=1, sq=3, sk=3)
    # The name says 3-D / recompute / width 8 / additive mask; the tensors are 4-D, with Y, width 16, bool.
    for name, reason in [(replace(c, rank=3).op_type(), "does not have the op type's rank"),
                         (replace(c, recompute=True, d=32).op_type(), "interface mismatch"),
                         (replace(c, d=8).op_type(), "has not the static width"),
                         (replace(c, hq=4, hk=4).op_type(), "has not the static head count"),
                         (replace(c, mask=2).op_type(), "mask type mismatch")]:
        declined(avm.model(c, feeds, (4, 0), 3, 3, op_type=name), feeds, reason, capfd)


def test_float64_declined(capfd):
    c = avm.Config(rank=4, hq=2, hk=2, d=16, mask=2)
    model, feeds = avm.retype(*avm.case(c, batch=1, sq=3, sk=3), np.float64)
    # Where MLX has no float64 (its GPU devices), the generic type check declines it first.
    reason = "not float32, float16 or bfloat16" if float64_on_mlx() else "has type double, which MLX does not support"
    declined(model, feeds, reason, capfd)


# float16 / bfloat16 compute in float32 and round once: against the float64 pullback of the rounded
# inputs, within the harness's per-dtype tolerance per element plus that tolerance times the
# gradient's scale (as for float32 above).
@pytest.mark.parametrize("dtype,tol", [(np.float16, 1e-3), (BF16, 1e-2)], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("c", [avm.Config(rank=3, hq=4, hk=2, d=32, causal=True, mask=2),
                               avm.Config(rank=4, hq=2, hk=1, d=64, mask=1, causal=True, recompute=True)],
                         ids=config_id)
def test_half_precision(c, dtype, tol):
    model, feeds = avm.retype(*avm.case(c, batch=2, sq=5, sk=7, mask_shape=(5, 6), mask_rows_off=(3,)), dtype)
    reference = avm.reference(c, {n: a if a.dtype == np.bool_ else a.astype(np.float64) for n, a in feeds.items()})[1]
    expected = [reference[i].astype(np.float32) for i in c.outputs]
    atol = tol * scale_of(expected)
    if dtype == BF16:
        got = check_bf16(model, feeds, expected, rtol=tol, atol=atol)
        _, report, _ = run_mlx_with_report(bf16_wrapped(model), [feeds_as_float32(feeds)])
        assert c.op_type() in {n["op_type"] for g in report["graphs"] for p in g["partitions"] for n in p["nodes"]}
    else:
        got = parity(model, feeds, [e.astype(dtype) for e in expected], rtol=tol, atol=atol)
    for out, i in zip(got, c.outputs):
        err = scaled_difference(np.asarray(out, np.float64), reference[i])
        assert err < tol, f"gradient {i}: {err:.2e} of its scale from float64"


def test_mask_shape_not_broadcasting_declined(capfd):
    # A mask with 2 query rows for 3 queries. (The function body ignores the mask: one that used
    # it would make ORT reject the model before any EP sees it.)
    c = avm.Config(rank=4, hq=2, hk=2, d=32, mask=1, recompute=True)
    _, feeds = avm.case(c, batch=1, sq=3, sk=3, mask_shape=(2, 3))
    model = avm.model(c, feeds, (2, 0), 3, 3, body=replace(c, mask=0))
    declined(model, feeds, "AttentionVJP mask dim 2 does not broadcast to 3 in [B, Hq, Sq, Sk]", capfd)


TRAINING_OUTPUTS = ["loss", "dWq", "dWk", "dWv", "dWo", "Wq_new", "Wk_new", "Wv_new", "Wo_new"]


def training_step_reference(c, feeds):
    """float64 loss and weight gradients of training_step_model."""
    f = {n: a if a.dtype == np.bool_ else a.astype(np.float64) for n, a in feeds.items()}
    x, mask = f["x"], np.broadcast_to(f["mask"], f["mask"].shape[:2] + (f["x"].shape[1], f["x"].shape[1]))
    qkv = {"Q": x @ f["Wq"], "K": x @ f["Wk"], "V": x @ f["Wv"], "Mask": mask}
    recompute = replace(c, recompute=True)
    y = avm.reference(recompute, {**qkv, "G": qkv["Q"]})[0]
    dout = y @ f["Wo"] - f["target"]
    grads = avm.reference(recompute, {**qkv, "G": dout @ f["Wo"].T})[1]
    rows = x.reshape(-1, x.shape[-1])
    flat = [g.reshape(rows.shape[0], -1) for g in (grads[0], grads[1], grads[2])]
    dwo = y.reshape(rows.shape[0], -1).T @ dout.reshape(rows.shape[0], -1)
    return [0.5 * (dout ** 2).sum(), rows.T @ flat[0], rows.T @ flat[1], rows.T @ flat[2], dwo]


def training_step_model(batch, seq, embed, c, lr=0.1):
    """One SGD step of a causal self-attention block (x -> Attention(x Wq, x Wk, x Wv) Wo, loss
    0.5 * sum((out - target)^2)) with a key-padding mask: the forward through ONNX Attention-23,
    the backward through matmuls and one AttentionVJP node (dQ, dK, dV), then the weight
    gradients and updates. Outputs: loss and the four updated weights."""
    hq, hk, d = c.hq, c.hk, c.d
    nodes = []

    def op(op_type, inputs, output, domain="", **attrs):
        nodes.append(helper.make_node(op_type, inputs, [output], domain=domain, name=output, **attrs))
        return output

    for w, width in [("Wq", hq * d), ("Wk", hk * d), ("Wv", hk * d)]:
        op("MatMul", ["x", w], w[1].lower())  # q, k, v [B, S, heads * D]
    # ORT's CPU Attention wants the mask's query axis spelled out.
    op("Expand", ["mask", "mask_shape"], "mask_rows")
    op("Attention", ["q", "k", "v", "mask_rows"], "y", q_num_heads=hq, kv_num_heads=hk, is_causal=1, scale=c.scale)
    op("MatMul", ["y", "Wo"], "out")
    op("Sub", ["out", "target"], "dout")
    op("Mul", [op("ReduceSum", [op("Mul", ["dout", "dout"], "sq"), ""], "sum", keepdims=0), "half"], "loss")
    op("MatMul", ["dout", op("Transpose", ["Wo"], "Wo_t")], "dy")
    nodes.append(helper.make_node(c.op_type(), ["q", "k", "v", "y", "dy", "mask"], ["dq", "dk", "dv"],
                                  domain=avm.DOMAIN, name="attention_vjp"))
    flat = {x: op("Reshape", [x, f"shape{width}"], f"{x}_flat")
            for x, width in [("x", "E"), ("y", "A"), ("dq", "A"), ("dk", "KV"), ("dv", "KV"), ("dout", "E")]}
    xt, yt = op("Transpose", [flat["x"]], "x_t"), op("Transpose", [flat["y"]], "y_t")
    grads = {w: op("MatMul", [t, flat[g]], f"d{w}")
             for w, t, g in [("Wq", xt, "dq"), ("Wk", xt, "dk"), ("Wv", xt, "dv"), ("Wo", yt, "dout")]}
    for w, g in grads.items():
        op("Sub", [w, op("Mul", [g, "lr"], f"{w}_step")], f"{w}_new")
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n, t, s) for n, t, s in [
        ("x", f32, [batch, seq, embed]), ("target", f32, [batch, seq, embed]),
        ("mask", TensorProto.BOOL, [batch, 1, 1, seq]), ("Wq", f32, [embed, hq * d]),
        ("Wk", f32, [embed, hk * d]), ("Wv", f32, [embed, hk * d]), ("Wo", f32, [hq * d, embed])]]
    outputs = [helper.make_tensor_value_info(n, f32, None) for n in TRAINING_OUTPUTS]
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in [
        ("shapeE", np.array([-1, embed], np.int64)), ("shapeA", np.array([-1, hq * d], np.int64)),
        ("shapeKV", np.array([-1, hk * d], np.int64)), ("half", np.float32(0.5)),
        ("mask_shape", np.array([batch, 1, seq, seq], np.int64)), ("lr", np.float32(lr))]]
    graph = helper.make_graph(nodes, "training_step", inputs, outputs, inits)
    function = avm.function(c, (4, 0), seq, seq)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid(avm.DOMAIN, 1)],
                              functions=[function])
    model.ir_version = 10
    return model


def test_training_step_one_partition():
    batch, seq, embed = 2, 6, 24
    c = avm.Config(rank=3, hq=4, hk=2, d=16, scale=0.25, causal=True, mask=1)
    model = training_step_model(batch, seq, embed, c)
    rng = np.random.default_rng(3)
    mask = np.ones((batch, 1, 1, seq), np.bool_)
    mask[1, ..., 4:] = False  # padded keys of the second sequence
    feeds = {"x": rng.uniform(-1, 1, (batch, seq, embed)), "target": rng.uniform(-1, 1, (batch, seq, embed)),
             "mask": mask, "Wq": rng.uniform(-0.5, 0.5, (embed, c.hq * c.d)),
             "Wk": rng.uniform(-0.5, 0.5, (embed, c.hk * c.d)), "Wv": rng.uniform(-0.5, 0.5, (embed, c.hk * c.d)),
             "Wo": rng.uniform(-0.5, 0.5, (c.hq * c.d, embed))}
    feeds = {n: a if a.dtype == np.bool_ else a.astype(np.float32) for n, a in feeds.items()}
    got = parity(model, feeds)
    for name, g, r in zip(TRAINING_OUTPUTS, got, training_step_reference(c, feeds)):
        assert scaled_difference(g, r) < F64_TOLERANCE, f"{name}: {scaled_difference(g, r):.2e} from float64"
    _, report, _ = run_mlx_with_report(model, [feeds])
    (graph,) = report["graphs"]
    assert len(graph["partitions"]) == 1 and not graph["declined"], graph["declined"]
    assert any(n["op_type"] == c.op_type() for n in graph["partitions"][0]["nodes"])
