"""Parity of the matmul family (MatMul, Gemm) against ORT's CPU EP.

fp32 products are summed in a different order than ORT's MLAS; both are accurate to ~1e-7 of
sum(|a||b|), but an output that cancels (signed data, large K) can differ by more than 1e-5 of its
own value. Float tests therefore use positive data (no cancellation: the comparison is meaningful
at 1e-5 rel) or small integer-valued data (exact in any order)."""
import numpy as np
import pytest

from harness import NO_KERNEL, BF16, check_parity, make_model, mlx_device, random_array, run_cpu, run_mlx
from harness_bf16 import check_bf16


def data(shape, dtype, rng, kind="positive"):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -5
        return random_array(shape, dtype, rng, low=lo, high=5)
    if kind == "int":  # integer-valued floats: sums are exact in any order
        return random_array(shape, np.float32, rng, low=-4, high=4).round().astype(dtype)
    return random_array(shape, np.float32, rng, low=0.5, high=1.5).astype(dtype)


def matmul_model(dtype, sa, sb, opset=13):
    return make_model("MatMul", [("a", dtype, list(sa)), ("b", dtype, list(sb))], [("y", None, None)],
                      opset=opset)


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((1, 7), (7, 1)),
    ((4,), (4, 5)),          # 1-D a
    ((3, 4), (4,)),          # 1-D b
    ((4,), (4,)),            # both 1-D: a scalar
    ((2, 3, 4), (4, 5)),     # batch x matrix
    ((1, 1, 4), (4, 5)),     # batch dims of 1 (a decode step): b broadcast, not a flattened
    ((1, 1, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),  # batch broadcasting
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((0, 4), (4, 5)),        # empty M
    ((3, 0), (0, 5)),        # K = 0: zeros
    ((2, 0, 3), (3, 4)),
]


@pytest.mark.parametrize("kind", ["positive", "int"])
@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[f"{a}x{b}" for a, b in MATMUL_SHAPES])
def test_matmul_float32_shapes(sa, sb, kind):
    rng = np.random.default_rng(0)
    check_parity(matmul_model(np.float32, sa, sb), {"a": data(sa, np.float32, rng, kind),
                                                     "b": data(sb, np.float32, rng, kind)})


@pytest.mark.parametrize("k", [64, 512, 2048])
def test_matmul_float32_large_k(k):
    rng = np.random.default_rng(1)
    sa, sb = (2, 16, k), (k, 24)
    check_parity(matmul_model(np.float32, sa, sb), {"a": data(sa, np.float32, rng), "b": data(sb, np.float32, rng)})


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64],
                         ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("sa,sb", [((2, 3, 8), (8, 5)), ((6,), (3, 6, 2)), ((3, 0), (0, 2))],
                         ids=["batch", "vec", "k0"])
def test_matmul_dtypes(dtype, sa, sb):
    rng = np.random.default_rng(2)
    a, b = data(sa, dtype, rng), data(sb, dtype, rng)
    expected = None
    if np.dtype(dtype).kind == "u" and sa[-1] == 0:
        expected = [np.matmul(a, b)]  # ORT's CPU kernel errors on unsigned K = 0 (a type-check bug)
    check_parity(matmul_model(dtype, sa, sb), {"a": a, "b": b}, expected=expected)


def test_matmul_float16_large_k():
    rng = np.random.default_rng(3)
    sa, sb = (32, 1024), (1024, 16)
    check_parity(matmul_model(np.float16, sa, sb), {"a": data(sa, np.float16, rng), "b": data(sb, np.float16, rng)})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_matmul_int_wraps_like_ort(dtype):
    """Integer products overflow with two's-complement wrap-around, like ORT."""
    info = np.iinfo(dtype)
    a = np.array([[info.max // 2, 3, -7], [info.min // 3, 5, 1]], dtype=dtype)
    b = np.array([[3, 1], [info.max // 5, -2], [4, info.min // 2]], dtype=dtype)
    check_parity(matmul_model(dtype, a.shape, b.shape), {"a": a, "b": b})


def test_matmul_int_chunked():
    """A K large enough that the exact integer path runs in several chunks."""
    rng = np.random.default_rng(4)
    sa, sb = (64, 600), (600, 512)
    check_parity(matmul_model(np.int32, sa, sb), {"a": data(sa, np.int32, rng), "b": data(sb, np.int32, rng)})


@pytest.mark.parametrize("opset", [1, 9, 13])
def test_matmul_opsets(opset):
    rng = np.random.default_rng(5)
    sa, sb = (2, 3, 4), (4, 5)
    check_parity(matmul_model(np.float32, sa, sb, opset), {"a": data(sa, np.float32, rng),
                                                            "b": data(sb, np.float32, rng)})


def test_matmul_bf16():
    rng = np.random.default_rng(6)
    sa, sb = (2, 5, 16), (16, 3)
    a, b = data(sa, np.float32, rng, "int"), data(sb, np.float32, rng, "int")
    ref = run_cpu(matmul_model(np.float32, sa, sb), {"a": a, "b": b})
    check_bf16(matmul_model(BF16, sa, sb), {"a": a, "b": b}, ref)


def test_matmul_nan_inf():
    a = np.array([[1.0, np.nan], [np.inf, 1.0], [1.0, 2.0]], dtype=np.float32)
    b = np.array([[1.0, 0.5], [2.0, -1.0]], dtype=np.float32)
    check_parity(matmul_model(np.float32, a.shape, b.shape), {"a": a, "b": b})


# ---- Gemm --------------------------------------------------------------------------------------

def gemm_model(dtype, sa, sb, sc, opset=13, c_const=None, **attrs):
    inputs = [("a", dtype, list(sa)), ("b", dtype, list(sb))]
    inits = {}
    if sc is not None:
        inputs.append(("c", dtype, list(sc)))
        if c_const is not None:
            inits["c"] = c_const
    return make_model("Gemm", inputs, [("y", None, None)], attrs, opset=opset, initializers=inits)


GEMM_CASES = [
    # (sa, sb, sc, attrs)
    ((3, 4), (4, 5), (3, 5), {}),
    ((4, 3), (4, 5), (5,), {"transA": 1}),
    ((3, 4), (5, 4), (1, 5), {"transB": 1, "alpha": 0.5}),
    ((4, 3), (5, 4), (3, 1), {"transA": 1, "transB": 1, "alpha": 2.0, "beta": 0.25}),
    ((3, 4), (4, 5), (), {"beta": -1.5}),
    ((3, 4), (4, 5), (1, 1), {"alpha": -1.0}),
    ((3, 4), (4, 5), None, {}),
    ((3, 4), (4, 5), None, {"alpha": 3.0, "beta": 7.0}),
    ((1, 8), (8, 1), (1,), {}),
    ((0, 4), (4, 5), (5,), {}),
    ((3, 0), (0, 5), (5,), {"beta": 0.5}),   # K = 0: ORT returns C unscaled
    ((3, 0), (0, 5), (5,), {"beta": 0.0}),
    ((3, 0), (0, 5), None, {}),
]


@pytest.mark.parametrize("opset", [7, 9, 11, 13])
@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: f"{c[0]}x{c[1]}+{c[2]}-{c[3]}")
def test_gemm_float32(case, opset):
    sa, sb, sc, attrs = case
    if sc is None and opset < 11:
        pytest.skip("C is required before opset 11")
    rng = np.random.default_rng(7)
    feeds = {"a": data(sa, np.float32, rng), "b": data(sb, np.float32, rng)}
    if sc is not None:
        feeds["c"] = random_array(sc, np.float32, rng, low=-2, high=2)
    check_parity(gemm_model(np.float32, sa, sb, sc, opset, **attrs), feeds)


@pytest.mark.parametrize("dtype", [np.float16, np.float64], ids=["f16", "f64"])
@pytest.mark.parametrize("case", GEMM_CASES[:8], ids=lambda c: f"{c[0]}x{c[1]}+{c[2]}-{c[3]}")
def test_gemm_other_floats(case, dtype):
    sa, sb, sc, attrs = case
    rng = np.random.default_rng(8)
    feeds = {"a": data(sa, dtype, rng), "b": data(sb, dtype, rng)}
    if sc is not None:
        feeds["c"] = random_array(sc, np.float32, rng, low=-2, high=2).astype(dtype)
    check_parity(gemm_model(dtype, sa, sb, sc, **attrs), feeds)


def test_gemm_large_k_constant_weights():
    """The usual Linear-layer shape: constant B and C, transB=1."""
    rng = np.random.default_rng(9)
    a = data((8, 768), np.float32, rng)
    w = data((256, 768), np.float32, rng)
    bias = random_array((256,), np.float32, rng)
    model = make_model("Gemm", [("a", np.float32, [8, 768]), ("w", np.float32, [256, 768]),
                                ("bias", np.float32, [256])], [("y", None, None)], {"transB": 1},
                       opset=13, initializers={"w": w, "bias": bias})
    check_parity(model, {"a": a})


def test_gemm_beta_zero_ignores_nan_c():
    rng = np.random.default_rng(10)
    a, b = data((3, 4), np.float32, rng), data((4, 5), np.float32, rng)
    c = np.full((3, 5), np.nan, dtype=np.float32)
    check_parity(gemm_model(np.float32, (3, 4), (4, 5), (3, 5), beta=0.0), {"a": a, "b": b, "c": c})


def test_gemm_bf16():
    rng = np.random.default_rng(11)
    a, b, c = data((4, 16), np.float32, rng, "int"), data((16, 3), np.float32, rng, "int"), data((3,), np.float32, rng, "int")
    ref = run_cpu(gemm_model(np.float32, (4, 16), (16, 3), (3,), alpha=0.5, beta=2.0), {"a": a, "b": b, "c": c})
    check_bf16(gemm_model(BF16, (4, 16), (16, 3), (3,), alpha=0.5, beta=2.0), {"a": a, "b": b, "c": c}, ref)


def test_gemm_int_declined():
    """ONNX allows integer Gemm but ORT's CPU EP has no kernel; we don't claim it either."""
    a = np.ones((2, 3), dtype=np.int32)
    b = np.ones((3, 2), dtype=np.int32)
    model = gemm_model(np.int32, (2, 3), (3, 2), None, opset=13)
    with pytest.raises(Exception, match=NO_KERNEL):
        run_mlx(model, {"a": a, "b": b})


def test_gemm_opset6_declined():
    """Gemm-6 (legacy `broadcast` attribute) is not claimed; ORT's CPU EP has no kernel either."""
    a = np.ones((2, 3), dtype=np.float32)
    b = np.ones((3, 2), dtype=np.float32)
    c = np.ones((2, 2), dtype=np.float32)
    model = gemm_model(np.float32, (2, 3), (3, 2), (2, 2), opset=6, broadcast=1)
    with pytest.raises(Exception, match=NO_KERNEL):
        run_mlx(model, {"a": a, "b": b, "c": c})


def stderr_of_fresh_process(code, env, *args):
    """Runs `code` (python -c) in a fresh process, the EP's environment variables `env` set (read
    once per process) and the tests' modules on the path; it must succeed. Returns its stderr (the
    EP's census lines)."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join([os.path.dirname(here), os.path.join(os.path.dirname(os.path.dirname(
        os.path.dirname(here))), "python"), os.environ.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code, *args], env=dict(os.environ, **env, PYTHONPATH=path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stderr


def census_counts(code, env, *primitives):
    """How many of each of `primitives` each census line of `code` (run once by
    stderr_of_fresh_process with the EP's `env` and its census on) counts, 0 where the line has
    none: a list for one primitive, else a list a primitive by name."""
    import re
    stderr = stderr_of_fresh_process(code, {"ONNXRUNTIME_EP_MLX_GRAPH_CENSUS": "1", **env})
    lines = [line for line in stderr.splitlines() if "MLX primitives per run" in line]
    assert lines, stderr[-2000:]

    def counts(primitive):
        found = [re.search(rf"[:,] {primitive} (\d+)", line) for line in lines]
        return [int(c.group(1)) if c else 0 for c in found]
    return counts(primitives[0]) if len(primitives) == 1 else {p: counts(p) for p in primitives}


def test_matmul_on_a_unit_batch_is_one_primitive_a_run():
    """A decode step's [1, 1, K] @ W (an initializer): no Flatten/Unflatten around the Matmul (W
    broadcast to [1, K, N] once, by ConstantFolder); a batch of 3 keeps them on MLX's CPU device."""
    import textwrap
    code = textwrap.dedent("""
        import sys, numpy as np
        from onnx import TensorProto, helper, numpy_helper
        from harness import run_mlx, run_cpu, assert_close
        batch = int(sys.argv[1])
        w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32), "W")
        g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1, 48])], [w])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        x = np.random.default_rng(1).standard_normal((batch, 1, 64)).astype(np.float32)
        outs, on_mlx, total = run_mlx(m, {"x": x}, runs=2)
        assert on_mlx == total == 1, (on_mlx, total)
        assert_close(outs[0], run_cpu(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    """)
    census = {}
    for batch in (1, 3):
        stderr = stderr_of_fresh_process(code, {"ONNXRUNTIME_EP_MLX_GRAPH_CENSUS": "1"}, str(batch))
        lines = [line for line in stderr.splitlines() if "MLX primitives per run" in line]
        assert lines, stderr[-2000:]
        census[batch] = lines[-1].split("total ")[1]
    # (a Contiguous of the bound input is there in both)
    assert "Matmul 1" in census[1] and not any(p in census[1] for p in ("Flatten", "Broadcast")), census
    if mlx_device() == "cpu":
        assert "Flatten 1" in census[3] and "Unflatten 1" in census[3], census
        assert int(census[3].split(":")[0]) == int(census[1].split(":")[0]) + 2, census


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_weights_held_in_the_gemv_layout(dtype):
    """A constant B read only by MatMuls is held as [N, K] and read as its [K, N] view (MLX's CUDA
    gemv takes a one-row product then, not cuBLASLt: runtime/weight_layout.h), forced onto MLX's
    CPU device here: the run's leaf has the transposed strides, no Transpose runs, and the values
    match ORT's for one row and for several. A weight another op reads too keeps its layout."""
    import textwrap
    code = textwrap.dedent(f"""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
        from harness import run_mlx, run_cpu, assert_close
        t = np.dtype("{np.dtype(dtype).name}")
        elem = TensorProto.FLOAT16 if t == np.float16 else TensorProto.FLOAT
        rng = np.random.default_rng(0)
        w = numpy_helper.from_array((rng.standard_normal((64, 48)) * 0.1).astype(t), "W")
        v = numpy_helper.from_array((rng.standard_normal((48, 48)) * 0.1).astype(t), "V")  # also gathered
        nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("MatMul", ["h", "V"], ["p"]),
                 helper.make_node("Gather", ["V", "i"], ["m"]), helper.make_node("Add", ["p", "m"], ["y"])]
        for rows in (1, 5):
            g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", elem, [1, rows, 64]),
                                               helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
                                  [helper.make_tensor_value_info("y", elem, [1, rows, 48])], [w, v])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            m.ir_version = 8
            x = rng.standard_normal((1, rows, 64)).astype(t)
            feeds = {{"x": x, "i": np.array([3], np.int64)}}
            outs, on_mlx, total = run_mlx(m, feeds, runs=2)
            assert on_mlx == total == 1, (on_mlx, total)  # one fused node, on MLX
            tol = 1e-3 if t == np.float16 else 1e-5
            assert_close(outs[0], run_cpu(m, feeds)[0], rtol=tol, atol=tol)
    """)
    stderr = {layout: stderr_of_fresh_process(code, {"ONNXRUNTIME_EP_MLX_GRAPH_CENSUS": "graph",
                                                     "ONNXRUNTIME_EP_MLX_GEMV_WEIGHTS": layout})
              for layout in ("force", "0")}
    # W [64, 48] broadcast to the batch: held [48, 64], so the view's strides are (0, 1, 64).
    assert "Strided leaf (1,64,48) strides (0,1,64)" in stderr["force"], stderr["force"][-3000:]
    assert "Strided leaf" not in stderr["0"], stderr["0"][-3000:]
    # V is read by the Gather too: it stays [48, 48] row-major. No Transpose is evaluated per run.
    assert "strides (0,1,48)" not in stderr["force"]
    censuses = [line for line in stderr["force"].splitlines() if "MLX primitives per run" in line]
    assert censuses and not any("Transpose" in line for line in censuses), censuses


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmuls_on_one_input_are_one_product(dtype):
    """MatMuls of one input by constant weights with the same K (BERT's Q, K and V projections)
    run as one product over the weights side by side, each output its columns
    (runtime/matmul_siblings.h): one Matmul and one Split a run where three Matmuls were, the
    same values as ORT's;
    ONNXRUNTIME_EP_MLX_MERGE_MATMULS=0 keeps three. A weight another node reads stays apart."""
    import textwrap
    code = textwrap.dedent(f"""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
        from harness import run_mlx, run_cpu, assert_close
        t = np.dtype("{np.dtype(dtype).name}")
        elem = TensorProto.FLOAT16 if t == np.float16 else TensorProto.FLOAT
        rng = np.random.default_rng(0)
        ws = [numpy_helper.from_array((rng.standard_normal((32, n)) * 0.1).astype(t), f"W{{i}}")
              for i, n in enumerate((16, 16, 48, 8))]
        nodes = [helper.make_node("MatMul", ["x", f"W{{i}}"], [f"y{{i}}"]) for i in range(4)]
        nodes += [helper.make_node("Relu", ["y2"], ["r"]), helper.make_node("Gather", ["W3", "i"], ["g"])]
        outputs = [helper.make_tensor_value_info(n, elem, None) for n in ("y0", "y1", "r", "y3", "g")]
        for batch, rows in ((1, 1), (2, 5)):
            g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", elem, [batch, rows, 32]),
                                               helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
                                  outputs, ws)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            m.ir_version = 8
            feeds = {{"x": rng.standard_normal((batch, rows, 32)).astype(t), "i": np.array([2], np.int64)}}
            outs, on_mlx, total = run_mlx(m, feeds, runs=2)
            assert on_mlx == total == 1, (on_mlx, total)
            tol = 1e-3 if t == np.float16 else 1e-5
            for got, want in zip(outs, run_cpu(m, feeds)):
                assert_close(got, want, rtol=tol, atol=tol)
    """)
    matmuls, splits, slices = {}, {}, {}
    for merge in ("1", "0"):  # one process a setting, its census read for all three
        found = census_counts(code, {"ONNXRUNTIME_EP_MLX_MERGE_MATMULS": merge}, "Matmul", "Split", "Slice")
        matmuls[merge], splits[merge], slices[merge] = found["Matmul"], found["Split"], found["Slice"]
    # W0, W1, W2 merged (W3 is gathered too): 2 products a run, 4 without merging; both shapes.
    assert set(matmuls["1"]) == {2} and set(matmuls["0"]) == {4}, matmuls
    # The members' columns: one Split primitive a run (where a Slice each were), none unmerged.
    assert set(splits["1"]) == {1} and set(slices["1"]) == {0}, (splits, slices)
    assert set(splits["0"]) == {0}, splits


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_bias_is_one_product(dtype):
    """A MatMul whose one reader adds a 1-D constant (a Linear layer's bias) runs as one product with
    it, MLX's AddMM (runtime/matmul_bias.h), and so does a merged group whose members all have one
    (the biases side by side); Add(bias, product) too. A 2-D bias, or a product another output
    reads, keeps its Add. The values match ORT's for one row and for several; AddMM 2 a run, none
    with ONNXRUNTIME_EP_MLX_MATMUL_BIAS=0."""
    import textwrap
    code = textwrap.dedent(f"""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
        import onnxruntime as ort
        from harness import EP, run_mlx_with_report, run_cpu, assert_close
        t = np.dtype("{np.dtype(dtype).name}")
        elem = TensorProto.FLOAT16 if t == np.float16 else TensorProto.FLOAT
        rng = np.random.default_rng(0)
        so = ort.SessionOptions()  # ORT's own fusions would make Gemms of some pairs first
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        def const(name, *shape):
            return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(t), name)
        inits = [const("Wq", 32, 24), const("Wk", 32, 24), const("Wv", 32, 16), const("bq", 24), const("bk", 24),
                 const("bv", 16), const("W0", 40, 16), const("b0", 16), const("W4", 24, 8), const("b4", 1, 8),
                 const("W5", 20, 8), const("b5", 8)]
        nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q0"]), helper.make_node("Add", ["q0", "bq"], ["q"]),
                 helper.make_node("MatMul", ["x", "Wk"], ["k0"]), helper.make_node("Add", ["bk", "k0"], ["k"]),
                 helper.make_node("MatMul", ["x", "Wv"], ["v0"]), helper.make_node("Add", ["v0", "bv"], ["v"]),
                 helper.make_node("MatMul", ["u", "W0"], ["y0"]), helper.make_node("Add", ["y0", "b0"], ["y"]),
                 helper.make_node("MatMul", ["s", "W4"], ["z0"]), helper.make_node("Add", ["z0", "b4"], ["z"]),
                 helper.make_node("MatMul", ["r", "W5"], ["p"]), helper.make_node("Add", ["p", "b5"], ["pb"])]
        names = ("q", "k", "v", "y", "z", "p", "pb")
        for batch, rows in ((1, 1), (2, 5)):
            dims = {{"x": 32, "u": 40, "s": 24, "r": 20}}
            g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, elem, [batch, rows, d])
                                               for n, d in dims.items()],
                                  [helper.make_tensor_value_info(n, elem, None) for n in names], inits)
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
            m.ir_version = 8
            feeds = {{n: rng.standard_normal((batch, rows, d)).astype(t) for n, d in dims.items()}}
            outs, _, providers = run_mlx_with_report(m, [feeds, feeds], so)
            assert providers == [EP], providers  # one fused node, on MLX
            tol = 1e-3 if t == np.float16 else 1e-5
            for got, want in zip(outs[-1], run_cpu(m, feeds)):
                assert_close(got, want, rtol=tol, atol=tol)
    """)
    addmm = {switch: census_counts(code, {"ONNXRUNTIME_EP_MLX_MATMUL_BIAS": switch}, "AddMM")
             for switch in ("1", "0")}
    # One row on a GPU stays a Matmul (MLX's GEMV) and its Add.
    assert set(addmm["1"]) == ({2} if mlx_device() == "cpu" else {0, 2}), addmm
    assert set(addmm["0"]) == {0}, addmm


ROWS_CASES = [(np.float32, 2, 64, False, False), (np.float32, 8, 36, True, False), (np.float16, 5, 64, True, False),
              (np.float16, 8, 36, False, False), (np.float16, 3, 2048, False, False),
              (np.float32, 4, 64, True, True), (np.float16, 6, 36, False, True),
              (np.float16, 1, 2048, False, False), (np.float32, 1, 64, True, False)]
ROWS_IDS = [f"{np.dtype(c[0]).name}-{c[1]}x{c[2]}{'-bias' if c[3] else ''}{'-gemm' if c[4] else ''}" for c in ROWS_CASES]


def rows_model(dtype, rows, k, bias, n=40, gemm=False):
    """x [rows, 1, K] (a batch of decode steps) times a constant W [K, N], + a constant bias [N]
    (ORT's MatMulAddFusion makes the two one Gemm between Reshapes); `gemm`: x [rows, K] by one
    Gemm with transB=1 and W stored [N, K], as torch exports a Linear."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(rows * 100 + k)
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    w = data((k, n), dtype, rng) / np.asarray(k, dtype)
    inits = [numpy_helper.from_array(np.ascontiguousarray(w.T) if gemm else w, "W")]
    if bias:
        inits.append(numpy_helper.from_array(data((n,), dtype, rng), "B"))
    if gemm:
        nodes = [helper.make_node("Gemm", ["x", "W"] + (["B"] if bias else []), ["y"], transB=1)]
    else:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["p" if bias else "y"])]
        nodes += [helper.make_node("Add", ["p", "B"], ["y"])] if bias else []
    x_shape, y_shape = ([rows, k], [rows, n]) if gemm else ([rows, 1, k], [rows, 1, n])
    g = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info("x", elem, x_shape)],
                          [helper.make_tensor_value_info("y", elem, y_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, {"x": data(tuple(x_shape), dtype, rng)}


@pytest.mark.parametrize("dtype,rows,k,bias,gemm", ROWS_CASES, ids=ROWS_IDS)
def test_few_rows_by_constant_weights(dtype, rows, k, bias, gemm):
    """A batch of decode steps' product: 1 to 8 rows by a constant weight, with and without its
    bias, K whole 16-byte pieces or not, as a MatMul (+ Add) or a Gemm. On every device the values
    are ORT's; on MLX's CUDA backend with ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 and the weight in the
    gemv layout these are the cases test_rows_product_kernel runs through the EP's kernel
    (src/ops/matmul_rows_cuda.cc)."""
    model, feeds = rows_model(dtype, rows, k, bias, gemm=gemm)
    tol = 1e-3 if dtype == np.float16 else 1e-5
    check_parity(model, feeds, rtol=tol, atol=tol)


def test_rows_product_kernel():
    """ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 on MLX's CUDA backend, weights in the gemv layout
    (ONNXRUNTIME_EP_MLX_GEMV_WEIGHTS=1: every graph): each few-rows case above holds its tolerance
    as one CustomKernel a run, with no Matmul or AddMM (cuBLASLt) left, but one row, which stays
    MLX's gemv; =all takes one row too; without the switch, no CustomKernel.
    tests/cpp/matmul_rows_kernel_test.cc runs the kernel's text on the host."""
    from harness import census_of_tests
    if mlx_device() != "gpu":
        pytest.skip("MLX's CUDA backend only (the kernel is CUDA C++)")
    cases = [f"test_few_rows_by_constant_weights[{i}]" for i in ROWS_IDS]
    one_row = [c[1] == 1 for c in ROWS_CASES]
    layout = {"ONNXRUNTIME_EP_MLX_GEMV_WEIGHTS": "1"}
    for setting in ("1", "all"):
        census, _ = census_of_tests(__file__, cases, env={**layout, "ONNXRUNTIME_EP_MLX_ROWS_KERNEL": setting})
        assert len(census) == len(cases), census
        # The census lines come in the cases' order (one process, the file's order).
        kernel = [("CustomKernel" in line, "Matmul" in line or "AddMM" in line) for line in census]
        want = [(setting == "all" or not one, one and setting == "1") for one in one_row]
        wrong = [(i, line.split(": MLX primitives")[1]) for i, line, got, w in zip(ROWS_IDS, census, kernel, want)
                 if got != w]
        assert not wrong, (setting, wrong)
    plain, _ = census_of_tests(__file__, cases, env={**layout, "ONNXRUNTIME_EP_MLX_ROWS_KERNEL": "0"})
    assert len(plain) == len(cases) and not any("CustomKernel" in line for line in plain), plain
