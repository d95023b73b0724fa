"""bfloat16 through ORT's Python API, which can neither feed nor fetch it: bfloat16 graph inputs and
outputs are wrapped in Cast nodes named cast_*, and the parity checks built on that wrapping."""
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from harness import (NO_KERNEL, BF16, EP, assert_close, check_parity, cpu_or_none, float64_on_mlx, numpy_outputs,
                     run_cpu, run_mlx, run_mlx_nodes)


def bf16_wrapped(model):
    """A copy of `model` whose bfloat16 graph inputs are float32 ones + Cast(to=bfloat16) nodes and
    whose bfloat16 outputs get a Cast back to float32; the casts are named cast_<name>."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    pre, post = [], []
    for vi in g.input:
        if vi.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            inner = vi.name + "_bf16"
            for n in g.node:
                n.input[:] = [inner if i == vi.name else i for i in n.input]
            pre.append(helper.make_node("Cast", [vi.name], [inner], name=f"cast_{vi.name}", to=TensorProto.BFLOAT16))
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    for vi in g.output:
        if vi.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            inner = vi.name + "_bf16"
            for n in g.node:
                n.output[:] = [inner if o == vi.name else o for o in n.output]
            post.append(helper.make_node("Cast", [inner], [vi.name], name=f"cast_{vi.name}", to=TensorProto.FLOAT))
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    nodes = pre + list(g.node) + post
    del g.node[:]
    g.node.extend(nodes)
    return m


def feeds_as_float32(feeds):
    """`feeds` with bfloat16 arrays as float32 (what bf16_wrapped's graph inputs take)."""
    return {k: (v.astype(np.float32) if v.dtype == BF16 else v) for k, v in feeds.items()}


def check_bf16(model, feeds, expected, rtol=None, atol=None):
    """Runs the bfloat16 `model` through bf16_wrapped (feeds: bfloat16 or float32 arrays), asserts from
    ORT's profile that every node but the cast_* ones ran on MLX, and compares with `expected`:
    bfloat16 or float32 references are rounded to bfloat16 (bfloat16 tolerance unless rtol/atol)."""
    got, nodes = run_mlx_nodes(bf16_wrapped(model), feeds_as_float32(feeds))
    on_cpu = [name for name, provider in nodes if provider != EP]
    assert any(provider == EP for _, provider in nodes), "nothing ran on MLX"
    assert all(n.startswith("cast_") for n in on_cpu), f"ran on CPU: {on_cpu}"
    for i, (g, r) in enumerate(zip(got, expected)):
        r = np.asarray(r)
        if r.dtype in (BF16, np.float32):
            assert_close(g, r.astype(BF16).astype(np.float32), dtype=BF16, rtol=rtol, atol=atol, what=f"output {i}")
        else:
            assert_close(g, r, rtol=rtol, atol=atol, what=f"output {i}")
    return got


def cpu_bf16_or_none(model, feeds):
    """ORT CPU outputs (as bfloat16) of a bfloat16 model run through bf16_wrapped, or None when ORT
    lacks the kernel."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [r.astype(BF16) for r in run_cpu(bf16_wrapped(model), feeds_as_float32(feeds))]
    except Exception:  # noqa: BLE001 - no bfloat16 kernel (or its function body rejects bfloat16)
        return None


def check_parity_or_numpy(model, feeds, fallback=None, bf16_rtol=None, bf16_atol=None):
    """check_parity against ORT CPU, or against numpy `fallback()` where the CPU EP has no kernel;
    bfloat16 feeds go through check_bf16 (with bf16_rtol/bf16_atol), and where MLX has no float64 a
    model fed float64 must be declined (not all of it on MLX) and still give the reference's
    answer, or, where ORT's CPU EP has no kernel for it either, fail to load (NO_KERNEL)."""
    if any(v.dtype == BF16 for v in feeds.values()):
        return check_bf16(model, feeds, numpy_outputs(fallback), bf16_rtol, bf16_atol)
    ort = cpu_or_none(model, feeds)
    expected = ort or numpy_outputs(fallback)
    if any(v.dtype == np.float64 for v in feeds.values()) and not float64_on_mlx():
        if ort is None:  # declined here, and ORT's CPU EP has no kernel: no session can run it
            with pytest.raises(Exception, match=NO_KERNEL):
                run_mlx(model, feeds)
            return None
        got, mlx, total = run_mlx(model, feeds)
        # The float64 nodes are declined; a function body's int64 shape arithmetic may stay on MLX.
        assert mlx < total, f"{mlx}/{total} nodes of a float64 model ran on MLX"
        for g, r in zip(got, expected):
            assert_close(g, r)
        return got
    return check_parity(model, feeds, expected=expected)


def _float32_retyped(model):
    """A copy of `model` whose float16/bfloat16 graph inputs and outputs are float32."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    return m


def check_parity_via_float32(model, feeds, dtype=np.float32):
    """check_parity for ops that only move data: float16/bfloat16 (`dtype`) results are compared with
    the float32 CPU result (exact for these ops); bfloat16 crosses the API through bf16_wrapped, whose
    casts must run on MLX too (check_parity asserts every node did)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float16), BF16):
        return check_parity(model, feeds)
    f32 = {k: (v.astype(np.float32) if v.dtype == dtype else v) for k, v in feeds.items()}
    ref = run_cpu(_float32_retyped(model), f32)
    if dtype == np.dtype(np.float16):
        return check_parity(model, feeds, expected=[r.astype(dtype) if r.dtype == np.float32 else r for r in ref])
    return check_parity(bf16_wrapped(model), f32, expected=ref)
