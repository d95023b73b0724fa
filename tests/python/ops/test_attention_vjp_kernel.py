"""The tiled AttentionVJP pullback as MLX custom CUDA kernels (src/ops/attention_vjp_cuda.cc).

Over the score budget on the GPU of a CUDA MLX, the pullback runs as two kernels: per query row the
logsumexp, delta = G . Y (Y recomputed for the Recompute form) and dQ, streaming over the keys; per
key row dK and dV, streaming over the query rows of every query head of its group. On the CPU the
kernels never run, so:

  - `emulate` is the kernels' algorithm transcribed to float32 numpy (the same passes, the same
    online softmax and skipping of masked keys, the same mask indexing), checked against the float64
    pullback on every case: the maths is tested everywhere, only the CUDA transcription needs a GPU;
  - on a Linux GPU (MLX's CUDA backend) the EP runs each case with a 1-byte score budget, once with
    the kernels (ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL=1: its verbose log line proves they
    ran) and once with the composed query-blocked ops (unset, the default), each against ORT's CPU EP running the
    function body and the float64 pullback (test_attention_vjp's tolerances);
  - on the CPU the kernel path must not be taken (no such log line);
  - the kernels' CUDA source itself, wrapped as MLX's cuda_kernel wraps it, is compiled for the host
    with attention_vjp_simt.h (each warp as 32 threads, shuffles through a barrier) and run on the
    same cases: only what is CUDA's own (the device compiler, real shuffles, the launch) is left
    to the GPU run.

The kernels' source does not depend on the shapes, so MLX compiles them once per process."""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import attention_vjp_models as avm
from harness import BF16, mlx_device, run_mlx, run_mlx_with_report, scaled_difference
from harness_bf16 import bf16_wrapped, check_bf16, feeds_as_float32
from test_attention_vjp import F64_TOLERANCE, check, config_id, parity, scale_of

LIMIT = "ONNXRUNTIME_EP_MLX_ATTENTION_VJP_DENSE_LIMIT_BYTES"
KERNEL = "ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL"
VERBOSE = "ONNXRUNTIME_EP_MLX_VERBOSE"
KERNEL_LINE = "tiled pullback through the CUDA kernels"
ON_CUDA = mlx_device() == "gpu" and sys.platform.startswith("linux")
needs_cuda = pytest.mark.skipif(not ON_CUDA, reason="the AttentionVJP kernels run on MLX's CUDA backend only "
                                "(the EP's MLX device here: " + mlx_device() + ")")


# (config, case keywords): ranks 3 / 4, GQA and not, D 8..256, each mask kind (broadcast, short in
# the last axis, rows fully masked), causal with Sq < Sk and Sq > Sk, both forms, odd lengths.
CASES = [
    (avm.Config(rank=4, hq=2, hk=2, d=8), dict(batch=2, sq=37, sk=53)),
    (avm.Config(rank=3, hq=4, hk=2, d=64, causal=True), dict(batch=1, sq=37, sk=53)),
    (avm.Config(rank=4, hq=4, hk=2, d=128, causal=True, mask=1),
     dict(batch=2, sq=53, sk=37, mask_shape=(53, 30), mask_rows_off=(5,))),
    (avm.Config(rank=3, hq=2, hk=2, d=256, mask=2), dict(batch=1, sq=37, sk=53, mask_shape=(1, 2, 37, 41),
                                                         mask_rows_off=(0, 36))),
    (avm.Config(rank=4, hq=4, hk=1, d=16, causal=True, mask=1),
     dict(batch=2, sq=9, sk=5, mask_shape=(2, 4, 9, 5), mask_rows_off=(0, 4))),
    (avm.Config(rank=4, hq=4, hk=2, d=64, causal=True, mask=2, recompute=True),
     dict(batch=2, sq=37, sk=53, mask_shape=(2, 1, 1, 53))),
    (avm.Config(rank=3, hq=4, hk=4, d=32, mask=1, recompute=True),
     dict(batch=1, sq=37, sk=53, mask_shape=(37, 50), mask_rows_off=(3,))),
    (avm.Config(rank=3, hq=4, hk=2, d=256, causal=True, recompute=True), dict(batch=1, sq=53, sk=37)),
]


def case_id(v):
    return config_id(v) if isinstance(v, avm.Config) else "-".join(f"{k}{v[k]}" for k in ("batch", "sq", "sk"))


def bias_of(c, mask):
    """The kernels' mask: 4-D float32, -inf where masked (0 everywhere for mask kind 0)."""
    if c.mask == 0:
        return np.zeros((1, 1, 1, 1), np.float32)
    m = np.asarray(mask)
    bias = np.where(m, np.float32(0), np.float32(-np.inf)) if c.mask == 1 else m.astype(np.float32)
    return bias.reshape((1,) * (4 - bias.ndim) + bias.shape)


def mask_bias(bias, b, h, i, j):
    """The kernels' mask_bias at broadcast index arrays: a dim of 1 broadcasts, keys past a short
    last axis are masked."""
    mb, mh, mq, mk = bias.shape
    j = np.asarray(j)
    idx = bias[b if mb > 1 else 0, h if mh > 1 else 0, i if mq > 1 else 0, np.minimum(j, mk - 1) if mk > 1 else 0]
    return np.where((mk != 1) & (j >= mk), np.float32(-np.inf), idx)


def emulate(c, feeds):
    """{output index: gradient} of the kernels' algorithm in float32 (attention_vjp_cuda.cc)."""
    heads = [("Q", c.hq), ("K", c.hk), ("V", c.hk), ("G", c.hq)]
    q, k, v, g = (avm.to_heads(c, feeds[n], h).astype(np.float32) for n, h in heads)
    batch, hq, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    groups, scale, neg_inf = hq // hk, np.float32(c.scale), np.float32(-np.inf)
    bias = bias_of(c, feeds.get("Mask"))
    kr, vr = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)  # a query row's kv head
    b, h, i = np.meshgrid(np.arange(batch), np.arange(hq), np.arange(sq), indexing="ij")

    def allowed_scores(j):  # rows kernel: key j for every query row
        bias_j = mask_bias(bias, b, h, i, j)
        s = scale * np.einsum("bhid,bhd->bhi", q, kr[:, :, j]) + bias_j
        return s, (bias_j != neg_inf) & ((not c.causal) | (j <= i))

    with np.errstate(invalid="ignore", divide="ignore"):
        # Pass A: online max and sum (and Y), masked keys skipped.
        m, l, y_acc = np.full(b.shape, neg_inf), np.zeros(b.shape, np.float32), np.zeros(q.shape, np.float32)
        for j in range(sk):
            s, ok = allowed_scores(j)
            m_new = np.maximum(m, s)
            correction, p = np.exp(m - m_new), np.exp(s - m_new)
            l = np.where(ok, l * correction + p, l)
            y_acc = np.where(ok[..., None], y_acc * correction[..., None] + p[..., None] * vr[:, :, j, None], y_acc)
            m = np.where(ok, m_new, m)
        attends = l > 0
        lse = np.where(attends, m + np.log(l), neg_inf).astype(np.float32)
        y = avm.to_heads(c, feeds["Y"], c.hq).astype(np.float32) if not c.recompute else \
            np.where(attends[..., None], y_acc / np.where(attends, l, 1)[..., None], 0).astype(np.float32)
        delta = np.where(attends, (g * y).sum(-1), 0).astype(np.float32)
        # Pass B: dQ.
        dq = np.zeros(q.shape, np.float32)
        for j in range(sk):
            s, ok = allowed_scores(j)
            p = np.exp(s - lse)
            ds = p * (np.einsum("bhid,bhd->bhi", g, vr[:, :, j]) - delta)
            dq += np.where((ok & attends)[..., None], ds[..., None] * kr[:, :, j, None], 0)
        dq *= scale
        # Keys kernel: every key row (b, kv head, j) over its group's query rows.
        dk, dv = np.zeros(k.shape, np.float32), np.zeros(k.shape, np.float32)
        kb, kh, kj = np.meshgrid(np.arange(batch), np.arange(hk), np.arange(sk), indexing="ij")
        for r in range(groups):
            hh = kh * groups + r
            for qi in range(sq):
                qrow, grow = q[kb, hh, qi], g[kb, hh, qi]  # [B, Hk, Sk, D]
                row_lse = lse[kb, hh, qi]
                bias_i = mask_bias(bias, kb, hh, qi, kj)
                s = scale * (k * qrow).sum(-1) + bias_i
                ok = (row_lse != neg_inf) & (bias_i != neg_inf) & ((not c.causal) | (qi >= kj))
                p = np.where(ok, np.exp(s - row_lse), 0)
                ds = p * ((v * grow).sum(-1) - delta[kb, hh, qi])
                dv += p[..., None] * grow
                dk += ds[..., None] * qrow
        dk *= scale
    grads = [dq, dk, dv]
    return {o: avm.from_heads(c, grads[o]) for o in c.outputs}


@pytest.mark.parametrize("c,kw", CASES, ids=case_id)
def test_emulated_kernel_algorithm(c, kw):
    _, feeds = avm.case(c, **kw)
    got, expected = emulate(c, feeds), avm.reference(c, feeds)[1]
    for o in c.outputs:
        assert np.isfinite(got[o]).all()
        err = scaled_difference(got[o], expected[o])
        assert err < F64_TOLERANCE, f"gradient {o}: {err:.2e} of its scale from float64"
    rows_off = kw.get("mask_rows_off", ())
    if rows_off and 0 in c.outputs:
        dq = avm.to_heads(c, got[0], c.hq)
        assert not dq[:, :, list(rows_off)].any(), "fully masked rows must have zero dQ"


@pytest.mark.skipif(ON_CUDA, reason="on CUDA the kernel path is the one tested")
def test_kernel_path_not_taken_without_cuda(capfd):
    c, kw = CASES[4]
    capfd.readouterr()
    with avm.scoped_env(**{VERBOSE: "1", KERNEL: "1"}):
        check(c, limit=1, **kw)
    assert KERNEL_LINE not in capfd.readouterr().err


@pytest.mark.skipif(ON_CUDA, reason="on CUDA the kernels build")
def test_kernel_build_failure_fails_the_node():
    # ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL=force tries the kernels where MLX has no CUDA: their
    # build fails, and the run fails with an error naming the node (no crash, no made-up output).
    c, kw = CASES[4]
    model, feeds = avm.case(c, **kw)
    with avm.scoped_env(**{KERNEL: "force", LIMIT: "1"}), pytest.raises(Exception) as failure:
        run_mlx(model, feeds)
    message = str(failure.value)
    assert f"[{c.op_type()}] vjp: the CUDA AttentionVJP kernels failed to build" in message, message
    assert "to run composed MLX ops instead" in message, message


def kernel_check(c, kw, capfd, kernel):
    """test_attention_vjp.check over the 1-byte budget with the kernels on ("1") or off (None),
    and whether the verbose log says they ran."""
    capfd.readouterr()
    with avm.scoped_env(**{VERBOSE: "1", KERNEL: kernel}):
        got = check(c, limit=1, **kw)
    ran = KERNEL_LINE in capfd.readouterr().err
    assert ran == (kernel == "1"), f"kernel path taken: {ran}, ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL={kernel}"
    return got


@needs_cuda
@pytest.mark.parametrize("c,kw", CASES, ids=case_id)
def test_kernel(c, kw, capfd):
    got = kernel_check(c, kw, capfd, "1")
    composed = kernel_check(c, kw, capfd, None)
    for a, b in zip(got, composed):  # both within F64_TOLERANCE of float64 (check): close to each other
        assert scaled_difference(a, b) < 2 * F64_TOLERANCE
    rows_off = kw.get("mask_rows_off", ())
    if rows_off and 0 in c.outputs:
        assert not avm.to_heads(c, got[0], c.hq)[:, :, list(rows_off)].any()


@needs_cuda
@pytest.mark.parametrize("outputs", [(0,), (1,), (2,), (0, 2), (1, 2)], ids=str)
@pytest.mark.parametrize("recompute", [False, True], ids=["y", "recompute"])
def test_kernel_output_subsets(outputs, recompute, capfd):
    c = avm.Config(rank=3, hq=4, hk=2, d=32, causal=True, mask=1, outputs=outputs, recompute=recompute)
    kernel_check(c, dict(batch=2, sq=21, sk=19, mask_shape=(21, 17), mask_rows_off=(2,)), capfd, "1")


@needs_cuda
@pytest.mark.parametrize("dtype,tol", [(np.float16, 1e-3), (BF16, 1e-2)], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("c", [avm.Config(rank=3, hq=4, hk=2, d=64, causal=True, mask=2),
                               avm.Config(rank=4, hq=2, hk=1, d=128, mask=1, causal=True, recompute=True)],
                         ids=config_id)
def test_kernel_half_precision(c, dtype, tol, capfd):
    # As test_attention_vjp.test_half_precision, over the 1-byte budget.
    model, feeds = avm.retype(*avm.case(c, batch=2, sq=23, sk=31, mask_shape=(23, 29), mask_rows_off=(3,)), dtype)
    reference = avm.reference(c, {n: a if a.dtype == np.bool_ else a.astype(np.float64) for n, a in feeds.items()})[1]
    expected = [reference[i].astype(np.float32) for i in c.outputs]
    atol = tol * scale_of(expected)
    capfd.readouterr()
    with avm.scoped_env(**{VERBOSE: "1", KERNEL: "1", LIMIT: "1"}):
        if dtype == BF16:
            got = check_bf16(model, feeds, expected, rtol=tol, atol=atol)
            _, report, _ = run_mlx_with_report(bf16_wrapped(model), [feeds_as_float32(feeds)])
            claimed = {n["op_type"] for g in report["graphs"] for p in g["partitions"] for n in p["nodes"]}
            assert c.op_type() in claimed
        else:
            got = parity(model, feeds, [e.astype(dtype) for e in expected], rtol=tol, atol=atol)
    assert KERNEL_LINE in capfd.readouterr().err
    for out, i in zip(got, c.outputs):
        err = scaled_difference(np.asarray(out, np.float64), reference[i])
        assert err < tol, f"gradient {i}: {err:.2e} of its scale from float64"


# The kernels' source as MLX's cuda_kernel wraps it (mlx/backend/cuda/custom_kernel.cpp,
# build_kernel): the body inside a __global__ function whose parameters are each input's pointer,
# then `<name>_shape` when the body mentions it, then the outputs.
KERNELS = {
    "rows": ("kRowsSource", ["q", "k", "v", "g", "y", "mask", "params"], ["dq", "lse_out", "delta_out"]),
    "keys": ("kKeysSource", ["q", "k", "v", "g", "mask", "lse", "delta", "params"], ["dk", "dv"]),
}
SOURCE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "src", "ops", "attention_vjp_cuda.cc")


def host_source():
    text = open(SOURCE).read()
    raw = dict(re.findall(r'constexpr const char\* (k\w+) = R"\((.*?)\)";', text, re.S))
    out = ['#include "attention_vjp_simt.h"', raw["kHeader"], "namespace mlx::core::cu {",
           "namespace cg = cooperative_groups;"]
    wrappers = []
    for name, (body_name, inputs, outputs) in KERNELS.items():
        body = raw[body_name]
        params, args, wrapper_params, copies = [], [], [], []
        for n in inputs:
            ctype = "int32_t" if n == "params" else "float"
            params.append(f"const {ctype}* {n}")
            wrapper_params.append(f"const {ctype}* {n}")
            args.append(n)
            if n + "_shape" in body:
                params.append(f"const Shape {n}_shape")
                wrapper_params.append(f"const int* {n}_dims")
                copies.append(f"mlx::core::cu::Shape {n}_shape{{}};\n"
                              f"std::copy({n}_dims, {n}_dims + 10, {n}_shape.begin());")
                args.append(f"{n}_shape")
        params += [f"float* {n}" for n in outputs]
        wrapper_params += [f"float* {n}" for n in outputs]
        args += outputs
        out.append(f"void {name}_kernel({', '.join(params)}) {{\n{body}\n}}")
        call = f"mlx::core::cu::{name}_kernel({', '.join(args)});"
        wrappers.append(f'extern "C" void run_{name}({", ".join(wrapper_params)}, int grid, int threadgroup) {{\n'
                        + "\n".join(copies) + f"\nLaunch(grid, threadgroup, [&] {{ {call} }});\n}}")
    return "\n".join(out) + "\n}  // namespace mlx::core::cu\n" + "\n".join(wrappers) + "\n"


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("clang++")
    if not compiler:
        pytest.skip("no C++ compiler to build the kernels' source for the host")
    tmp = tmp_path_factory.mktemp("vjp_kernels")
    (tmp / "kernels.cc").write_text(host_source())
    lib = tmp / "kernels.so"
    subprocess.run([compiler, "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-Wno-unknown-pragmas",
                    "-I", os.path.dirname(os.path.abspath(__file__)), str(tmp / "kernels.cc"), "-o", str(lib)],
                   check=True)
    return ctypes.CDLL(str(lib))


def run_host_kernels(lib, c, feeds):
    """{output index: gradient} of the kernels' source run on the host as KernelPullback runs it."""
    f32 = lambda x: np.ascontiguousarray(x, np.float32)
    q, k, v, g = (f32(avm.to_heads(c, feeds[n], h)) for n, h in [("Q", c.hq), ("K", c.hk), ("V", c.hk), ("G", c.hq)])
    y = f32(avm.to_heads(c, feeds["Y"], c.hq)) if not c.recompute else np.zeros(1, np.float32)
    mask = f32(bias_of(c, feeds.get("Mask")))
    scale_bits = int(np.float32(c.scale).view(np.int32))
    params = np.array([int(c.causal), int(not c.recompute), int(0 in c.outputs), scale_bits], np.int32)
    dims = lambda x: np.array(list(x.shape) + [0] * (10 - x.ndim), np.int32)
    rows = q.shape[0] * q.shape[1] * q.shape[2]
    dq, lse, delta = np.zeros(q.shape, np.float32), np.zeros(q.shape[:3], np.float32), np.zeros(q.shape[:3], np.float32)
    dk, dv = np.zeros(k.shape, np.float32), np.zeros(k.shape, np.float32)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
    keep = [dims(q), dims(k), dims(mask)]
    lib.run_rows(ptr(q), ptr(keep[0]), ptr(k), ptr(keep[1]), ptr(v), ptr(g), ptr(y), ptr(mask), ptr(keep[2]),
                 ptr(params), ptr(dq), ptr(lse), ptr(delta), rows * 32, 128)
    lib.run_keys(ptr(q), ptr(keep[0]), ptr(k), ptr(keep[1]), ptr(v), ptr(g), ptr(mask), ptr(keep[2]), ptr(lse),
                 ptr(delta), ptr(params), ptr(dk), ptr(dv), k.shape[0] * k.shape[1] * k.shape[2] * 32, 128)
    grads = [dq, dk, dv]
    return {o: avm.from_heads(c, grads[o]) for o in c.outputs}


# CASES at sizes the host's barrier-exchanging warps run in well under a second.
HOST_CASES = [
    (avm.Config(rank=4, hq=2, hk=2, d=8), dict(batch=2, sq=5, sk=7)),
    (avm.Config(rank=3, hq=4, hk=2, d=64, causal=True), dict(batch=1, sq=5, sk=7)),
    (avm.Config(rank=4, hq=4, hk=2, d=128, causal=True, mask=1),
     dict(batch=1, sq=7, sk=5, mask_shape=(7, 4), mask_rows_off=(2,))),
    (avm.Config(rank=3, hq=2, hk=2, d=256, mask=2), dict(batch=1, sq=5, sk=7, mask_shape=(1, 2, 5, 6),
                                                         mask_rows_off=(0, 4))),
    (avm.Config(rank=4, hq=4, hk=1, d=16, causal=True, mask=1),
     dict(batch=2, sq=6, sk=4, mask_shape=(2, 4, 6, 4), mask_rows_off=(0, 4))),
    (avm.Config(rank=4, hq=4, hk=2, d=64, causal=True, mask=2, recompute=True),
     dict(batch=2, sq=5, sk=7, mask_shape=(2, 1, 1, 7))),
    (avm.Config(rank=3, hq=4, hk=4, d=32, mask=1, recompute=True, outputs=(1, 2)),
     dict(batch=1, sq=5, sk=7, mask_shape=(5, 6), mask_rows_off=(3,))),
    (avm.Config(rank=3, hq=4, hk=2, d=256, causal=True, recompute=True, outputs=(0,)), dict(batch=1, sq=7, sk=5)),
]


@pytest.mark.parametrize("c,kw", HOST_CASES, ids=case_id)
def test_kernel_source_on_host(c, kw, host_kernels):
    _, feeds = avm.case(c, **kw)
    got, expected = run_host_kernels(host_kernels, c, feeds), avm.reference(c, feeds)[1]
    for o in c.outputs:
        assert np.isfinite(got[o]).all()
        err = scaled_difference(got[o], expected[o])
        assert err < F64_TOLERANCE, f"gradient {o}: {err:.2e} of its scale from float64"
