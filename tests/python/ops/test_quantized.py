"""Parity of com.microsoft MatMulNBits (src/ops/quantized.cc) and GatherBlockQuantized
(src/ops/quantized_gather.cc) against ORT's CPU EP. Weights come from ORT's own block quantizer
(onnxruntime.quantization's C++ helpers) or are random bytes."""
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi._pybind_state import quantize_matmul_2bits, quantize_matmul_4bits, quantize_matmul_8bits

from harness import (BF16, assert_declined, check_parity, mlx_device, onnx_type, random_array, run_cpu,
                     run_mlx_with_report)
from harness_bf16 import check_bf16

QUANTIZERS = {2: quantize_matmul_2bits, 4: quantize_matmul_4bits, 8: quantize_matmul_8bits}


def quantize(w, bits, block_size, symmetric=False):
    """ORT's quantizer on w [K, N] float32: (B [N, k_blocks, blob], scales [N, k_blocks], packed zero points)."""
    K, N = w.shape
    kb = -(-K // block_size)
    per_byte = 8 // bits
    packed = np.zeros((N, kb, block_size // per_byte), np.uint8)
    scales = np.zeros((N, kb), np.float32)
    zp = np.zeros((N, -(-kb // per_byte)), np.uint8)
    w = np.pad(w, ((0, kb * block_size - K), (0, 0)))
    QUANTIZERS[bits](packed, w, scales, zp, block_size, N, K, symmetric)
    return packed, scales, zp


def nbits_model(a, b, scales, K, N, bits, block_size, zp=None, bias=None, g_idx=None, attrs=None,
                weights_as_inputs=False):
    """(model, feeds) of one MatMulNBits node; B, scales, zero points, g_idx and bias are constant initializers."""
    consts = [("B", b), ("scales", scales), ("zp", zp), ("g_idx", g_idx), ("bias", bias)]
    names = ["A"] + [n if v is not None else "" for n, v in consts]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=K, N=N, bits=bits,
                            block_size=block_size, **(attrs or {}))
    inits = [numpy_helper.from_array(v, n) for n, v in consts if v is not None]
    inputs = [helper.make_tensor_value_info("A", onnx_type(a.dtype), list(a.shape))]
    feeds = {"A": a}
    if weights_as_inputs:
        inputs += [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in inits]
        feeds.update({n: v for n, v in consts if v is not None})
        inits = []
    out = helper.make_tensor_value_info("Y", onnx_type(a.dtype), list(a.shape[:-1]) + [N])
    graph = helper.make_graph([node], "matmulnbits", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, feeds


def case(K, N, bits, block_size, a_shape, dtype=np.float32, zp="uint8", bias=False, kind="positive", seed=0):
    """Arrays of one case: A, B, scales (of dtype), zero points ("uint8" packed, "float" or None), bias.
    MLX and ORT sum the products in different orders, so (as in test_matmul.py) the data keeps
    that from mattering: kind "positive" quantizes positive weights with ORT's quantizer and takes
    positive A (no cancellation: 1e-5 rel is a meaningful bound); kind "int" takes random bytes
    (every q and zero point value), power-of-two scales and integer-valued A: every product and sum
    is exact, so any difference in the weights' layout or zero points shows."""
    rng = np.random.default_rng(seed)
    kb = -(-K // block_size)
    if kind == "positive":
        b, scales, zps = quantize(rng.uniform(0.5, 1.5, (K, N)).astype(np.float32), bits, block_size)
        a = random_array(a_shape, np.float32, rng, low=0.5, high=1.5)
    else:
        b = rng.integers(0, 256, (N, kb, block_size * bits // 8)).astype(np.uint8)
        scales = (2.0 ** rng.integers(-4, 0, (N, kb))).astype(np.float32)
        zps = rng.integers(0, 256, (N, -(-kb * bits // 8))).astype(np.uint8)
        a = random_array(a_shape, np.float32, rng, low=-4, high=4).round()
    if zp == "float":  # quarter steps: exact with power-of-two scales
        zps = (rng.integers(0, 4 * (2 ** bits - 1), (N, kb)) / 4).astype(dtype)
    elif zp is None:
        zps = None
    bias_v = random_array((N,), np.float32, rng, low=0.5, high=1.5).astype(dtype) if bias else None
    return a.astype(dtype), b, scales.astype(dtype), zps, bias_v


# (K, N, bits, block_size): every block size ORT takes (MLX's quantized_matmul has 32/64/128 only),
# K not a multiple of the block size (the last block is padded), odd N.
SHAPES = [
    (64, 16, 4, 16), (96, 24, 4, 32), (256, 40, 4, 64), (256, 33, 4, 128), (512, 20, 4, 256),
    (100, 17, 4, 32), (70, 9, 4, 16), (200, 31, 4, 128),
    (64, 16, 8, 16), (96, 24, 8, 32), (130, 19, 8, 64), (256, 32, 8, 128), (300, 12, 8, 256),
    (64, 16, 2, 16), (96, 24, 2, 32), (129, 13, 2, 64), (256, 8, 2, 128),
]


def shape_id(s):
    return "K{}_N{}_b{}_bs{}".format(*s)


# Rows of A: 1 and 2 take mx::quantized_matmul (where the block size fits), 9 and 2x5 the
# dequantize + GEMM path.
@pytest.mark.parametrize("a_rows", [(1,), (2,), (9,), (2, 5)], ids=lambda r: "x".join(map(str, r)))
@pytest.mark.parametrize("zp", ["uint8", None])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("kind", ["positive", "int"])
def test_float32(shape, zp, a_rows, kind):
    K, N, bits, bs = shape
    a, b, scales, zps, _ = case(K, N, bits, bs, a_rows + (K,), zp=zp, kind=kind)
    check_parity(*nbits_model(a, b, scales, K, N, bits, bs, zps))


@pytest.mark.parametrize("rows", [1, 7, 40])
@pytest.mark.parametrize("shape", [(96, 24, 4, 32), (100, 17, 4, 16), (256, 33, 4, 128), (300, 12, 8, 256),
                                   (96, 24, 8, 32), (129, 13, 2, 64)], ids=shape_id)
def test_random_bytes_and_bias(shape, rows):
    """Every q and zero point value (random bytes), with a bias."""
    K, N, bits, bs = shape
    a, b, scales, zps, bias = case(K, N, bits, bs, (rows, K), bias=True, kind="int")
    check_parity(*nbits_model(a, b, scales, K, N, bits, bs, zps, bias))


@pytest.mark.parametrize("rows", [17, 128])
@pytest.mark.parametrize("zp", ["uint8", None])
@pytest.mark.parametrize("shape", [(8192, 300, 4, 32), (1100, 1030, 8, 128), (1000, 70, 2, 64)], ids=shape_id)
def test_many_rows_in_panels(shape, zp, rows):
    """More than 16 rows: a BLAS GEMM per panel of dequantized columns (quantized_cpu.cc's PanelGemm;
    a panel holds ~8 MB of weights: 256 columns at K=8192, at most 1024, so the first two shapes take
    two panels, the last partial). Kind "int": exact sums in any order (K small enough for 8 bits);
    no bias (ORT's GEMM starts from it, so its partial sums round; test_random_bytes_and_bias has one)."""
    K, N, bits, bs = shape
    a, b, scales, zps, _ = case(K, N, bits, bs, (rows, K), zp=zp, kind="int")
    check_parity(*nbits_model(a, b, scales, K, N, bits, bs, zps))


@pytest.mark.parametrize("rows", [1, 6, 40])
@pytest.mark.parametrize("shape", [(96, 24, 4, 32), (100, 17, 4, 16), (256, 33, 4, 128)], ids=shape_id)
def test_float_zero_points(shape, rows):
    K, N, bits, bs = shape
    a, b, scales, zps, bias = case(K, N, bits, bs, (rows, K), zp="float", bias=True, kind="int")
    check_parity(*nbits_model(a, b, scales, K, N, bits, bs, zps, bias))


FP16_SHAPES = [(96, 24, 4, 32), (100, 17, 4, 16), (300, 12, 8, 256), (96, 24, 8, 64), (129, 13, 2, 64),
               (64, 16, 2, 16)]
# Float zero points only with bits=4 (ORT's CPU kernel rejects the others; so does the claim).
FP16_CASES = [(s, zp) for s in FP16_SHAPES for zp in ["uint8", None, "float"] if zp != "float" or s[2] == 4]


@pytest.mark.parametrize("kind", ["positive", "int"])
@pytest.mark.parametrize("rows", [1, 6, 40])
@pytest.mark.parametrize("shape,zp", FP16_CASES, ids=[f"{shape_id(s)}-{zp}" for s, zp in FP16_CASES])
def test_float16(shape, zp, rows, kind):
    K, N, bits, bs = shape
    a, b, scales, zps, bias = case(K, N, bits, bs, (rows, K), np.float16, zp=zp, bias=True, kind=kind)
    check_parity(*nbits_model(a, b, scales, K, N, bits, bs, zps, bias))


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_accuracy_levels_computed_in_float32(level):
    """ORT's CPU EP computes levels 0-3 in float32 (MLAS CompFp32)."""
    a, b, scales, zps, _ = case(128, 16, 4, 32, (2, 128))
    check_parity(*nbits_model(a, b, scales, 128, 16, 4, 32, zps, attrs={"accuracy_level": level}))


@pytest.mark.parametrize("rows", [1, 3])
def test_weights_as_graph_inputs(rows):
    a, b, scales, zps, bias = case(100, 17, 4, 32, (rows, 100), bias=True)
    check_parity(*nbits_model(a, b, scales, 100, 17, 4, 32, zps, bias, weights_as_inputs=True))


def test_one_dimensional_scales_and_zero_points():
    """ORT accepts scales [N * k_blocks] and zero points [N * blob] (older models)."""
    a, b, scales, zps, _ = case(96, 24, 4, 32, (1, 96))
    check_parity(*nbits_model(a, b, scales.reshape(-1), 96, 24, 4, 32, zps.reshape(-1)))


def test_one_dimensional_a():
    a, b, scales, zps, _ = case(96, 24, 4, 32, (96,))
    check_parity(*nbits_model(a, b, scales, 96, 24, 4, 32, zps))


def test_empty_batch():
    a, b, scales, zps, _ = case(96, 24, 4, 32, (0, 96))
    check_parity(*nbits_model(a, b, scales, 96, 24, 4, 32, zps))


@pytest.mark.parametrize("rows", [1, 6])
def test_bfloat16(rows):
    """No ORT CPU kernel takes bfloat16: the reference is the float32 node on the same values."""
    K, N, bits, bs = 100, 17, 4, 32
    a, b, scales, zps, bias = case(K, N, bits, bs, (rows, K), bias=True)
    a16, s16, bias16 = a.astype(BF16), scales.astype(BF16), bias.astype(BF16)
    ref = run_cpu(*nbits_model(a16.astype(np.float32), b, s16.astype(np.float32), K, N, bits, bs, zps,
                               bias16.astype(np.float32)))
    check_bf16(*nbits_model(a16, b, s16, K, N, bits, bs, zps, bias16), ref)


# Block 16 takes the per-lane VNNI kernel, the others the two-pass one (quantized_cpu_vnni.cc): N not
# a multiple of its 4 columns, K ending in a partial span of 128, rows not a multiple of its 4.
LEVEL4_SHAPES = [(128, 16, 4, 32), (100, 17, 4, 16), (256, 33, 4, 128), (300, 12, 4, 64), (896, 40, 4, 32),
                 (200, 5, 4, 32), (512, 21, 4, 256), (1000, 7, 4, 64)]


# ops/quantized.cc: ORT's int8 quantization of A is reproduced by nbits_cpu, on MLX's CPU device only.
LEVEL4_GPU_REASON = "accuracy_level=4 (int8 A, MLAS CompInt8) is reproduced on MLX's CPU device only"


def check_level_4(model, feeds, atol=None):
    """Parity of a level-4 node that the EP reproduces (check_parity); where MLX runs on a GPU the
    EP declines it instead, with LEVEL4_GPU_REASON, and ORT's CPU EP runs it."""
    if mlx_device() == "cpu":
        return check_parity(model, feeds, atol=atol)
    assert_declined(model, feeds)
    _, report, _ = run_mlx_with_report(model, [feeds])
    reasons = [d["reason"] for g in report["graphs"] for d in g["declined"] if d["op_type"] == "MatMulNBits"]
    assert reasons and all(LEVEL4_GPU_REASON in r for r in reasons), report["graphs"]


@pytest.mark.parametrize("rows", [1, 5, 40])
@pytest.mark.parametrize("zp,bias", [("uint8", False), (None, True)])
@pytest.mark.parametrize("shape", LEVEL4_SHAPES, ids=shape_id)
@pytest.mark.parametrize("kind", ["positive", "int"])
def test_accuracy_level_4(shape, zp, bias, rows, kind):
    """ORT's CPU EP quantizes A to int8 per block (MLAS CompInt8) there; the EP reproduces it on
    MLX's CPU device (the reference is ORT's level-4 output, which differs from level 0 by ~1e-3:
    one int8 value of A rounded the other way would show). Kind "int" (every q and zero point,
    signed A) is not exact here: A's int8 scales are amax / 127, and MLAS sums q * qa and the
    zero-point term (sa * sum(qa)) * (-sb * zp) separately, so outputs near zero carry the
    rounding of much larger terms in both; there the bound is 1e-5 of the output's scale. On GPUs
    the EP declines level 4 (check_level_4)."""
    K, N, bits, bs = shape
    a, b, scales, zps, bb = case(K, N, bits, bs, (rows, K), zp=zp, bias=bias, kind=kind)
    model, feeds = nbits_model(a, b, scales, K, N, bits, bs, zps, bb if bias else None, attrs={"accuracy_level": 4})
    atol = 1e-5 * float(np.abs(run_cpu(model, feeds)[0]).max()) if kind == "int" else None
    check_level_4(model, feeds, atol=atol)


@pytest.mark.parametrize("rows", [1, 6])
def test_accuracy_level_4_float16(rows):
    K, N, bits, bs = 128, 24, 4, 32
    a, b, scales, zps, bias = case(K, N, bits, bs, (rows, K), np.float16, bias=True)
    check_level_4(*nbits_model(a, b, scales, K, N, bits, bs, zps, bias, attrs={"accuracy_level": 4}))


def test_accuracy_level_4_differs_from_level_0():
    """The level-4 parity above is not level 0's result passing by: the two differ beyond 1e-5."""
    a, b, scales, zps, _ = case(128, 16, 4, 32, (2, 128))
    level0 = run_cpu(*nbits_model(a, b, scales, 128, 16, 4, 32, zps))[0]
    level4 = run_cpu(*nbits_model(a, b, scales, 128, 16, 4, 32, zps, attrs={"accuracy_level": 4}))[0]
    assert np.abs(level4 - level0).max() > 1e-4 * np.abs(level0).max()


@pytest.mark.parametrize("what", ["bits8", "bits2", "float_zp", "weights_as_inputs", "scales_as_input"])
def test_declined_accuracy_level_4(what):
    """Level 4 cases not reproduced: other bit widths (ORT's int8 kernels differ), and the cases
    where ORT does not prepack for CompInt8 (float zero points; B, scales or zero points not
    constants)."""
    bits = {"bits8": 8, "bits2": 2}.get(what, 4)
    K, N, bs = 128, 16, 64
    a, b, scales, zps, _ = case(K, N, bits, bs, (2, K), zp="float" if what == "float_zp" else "uint8")
    model, feeds = nbits_model(a, b, scales, K, N, bits, bs, zps, attrs={"accuracy_level": 4},
                               weights_as_inputs=what == "weights_as_inputs")
    if what == "scales_as_input":
        init = next(i for i in model.graph.initializer if i.name == "scales")
        model.graph.initializer.remove(init)
        model.graph.input.append(helper.make_tensor_value_info("scales", init.data_type, list(init.dims)))
        feeds["scales"] = scales
    assert_declined(model, feeds)


def test_declined_g_idx():
    K, N, bs = 64, 8, 32
    a, b, scales, zps, _ = case(K, N, 4, bs, (2, K))
    g_idx = (np.arange(K) // bs).astype(np.int32)[::-1].copy()
    assert_declined(*nbits_model(a, b, scales, K, N, 4, bs, zps, g_idx=g_idx))


# ---- GatherBlockQuantized ----------------------------------------------------------------------


def gbq_model(data, indices, scales, zp=None, attrs=None, data_as_input=False):
    """(model, feeds) of one GatherBlockQuantized node; data/scales/zero points are constant initializers."""
    consts = [("data", data), ("scales", scales), ("zp", zp)]
    names = ["data", "indices", "scales"] + (["zp"] if zp is not None else [])
    node = helper.make_node("GatherBlockQuantized", names, ["Y"], domain="com.microsoft", **(attrs or {}))
    inits = [numpy_helper.from_array(v, n) for n, v in consts if v is not None]
    inputs = [helper.make_tensor_value_info("indices", onnx_type(indices.dtype), list(indices.shape))]
    feeds = {"indices": indices}
    if data_as_input:
        inputs.append(helper.make_tensor_value_info("data", TensorProto.UINT8, list(data.shape)))
        feeds["data"] = data
        inits = inits[1:]
    out = helper.make_tensor_value_info("Y", onnx_type(scales.dtype), None)
    graph = helper.make_graph([node], "gbq", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, feeds


def gbq_case(shape, bits, block_size, dtype=np.float32, zp=True, seed=0):
    """Packed data of logical shape `shape` (last axis quantized), scales and packed zero points."""
    rng = np.random.default_rng(seed)
    per_byte = 8 // bits
    *lead, length = shape
    assert length % per_byte == 0
    nb = -(-length // block_size)
    data = rng.integers(0, 256, tuple(lead) + (length // per_byte,)).astype(np.uint8)
    scales = rng.uniform(0.01, 2.0, tuple(lead) + (nb,)).astype(dtype)
    zps = rng.integers(0, 256, tuple(lead) + (-(-nb // per_byte),)).astype(np.uint8) if zp else None
    return data, scales, zps


# (logical data shape, bits, block_size): the last axis not a multiple of the block size too. Every
# table has 6 rows: MLX's JIT kernels embed the row count (index wrapping), so one count keeps the
# number of kernels compiled on a cold cache (and the file's first run) small.
GBQ_CASES = [((6, 64), 4, 16), ((6, 96), 4, 32), ((6, 200), 4, 64), ((6, 128), 4, 128), ((6, 3, 40), 4, 16),
             ((6, 64), 8, 16), ((6, 100), 8, 32), ((6, 2, 256), 8, 128),
             ((6, 64), 2, 16), ((6, 80), 2, 32)]


# float16 scales on one case per bit width (and the rank-3 table): each combination is another JIT kernel.
GBQ_PARAMS = [(c, dtype, zp) for c in GBQ_CASES for zp in [True, False]
              for dtype in ([np.float32, np.float16] if c in (GBQ_CASES[1], GBQ_CASES[4], GBQ_CASES[6], GBQ_CASES[9])
                            else [np.float32])]


@pytest.mark.parametrize("case_,dtype,zp", GBQ_PARAMS,
                         ids=[f"{'x'.join(map(str, c[0]))}_b{c[1]}_bs{c[2]}-{np.dtype(d).name}-zp{int(z)}"
                              for c, d, z in GBQ_PARAMS])
def test_gather_block_quantized(case_, dtype, zp):
    shape, bits, bs = case_
    data, scales, zps = gbq_case(shape, bits, bs, dtype, zp)
    rows = shape[0]
    indices = np.array([[0, rows - 1, 2], [-1, 1, -rows]], np.int64)  # negative ones count from the end
    attrs = {"bits": bits, "block_size": bs, "quantize_axis": len(shape) - 1}
    check_parity(*gbq_model(data, indices, scales, zps, attrs))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_gather_block_quantized_out_of_range_and_scalar_indices(index_dtype):
    """Out-of-range indices give zero rows (ORT's documented behaviour, unlike Gather)."""
    data, scales, zps = gbq_case((6, 64), 4, 32)
    attrs = {"block_size": 32}
    check_parity(*gbq_model(data, np.array([7, -7, 2, 5, -6, 6], index_dtype), scales, zps, attrs))
    check_parity(*gbq_model(data, np.array(3, index_dtype), scales, zps, attrs))


def test_gather_block_quantized_defaults_and_data_input():
    """Default bits=4, block_size=128, quantize_axis=1; the table may be a graph input."""
    data, scales, zps = gbq_case((6, 256), 4, 128)
    check_parity(*gbq_model(data, np.array([[1, 5, 0], [2, -1, 3]], np.int64), scales, zps, data_as_input=True))


def test_gather_block_quantized_declined_uint4():
    """uint4 data (an element type the EP has no MLX dtype for) stays on ORT's CPU EP."""
    rng = np.random.default_rng(0)
    values = rng.integers(0, 16, (4, 64))
    data = helper.make_tensor("data", TensorProto.UINT4, [4, 64], values.flatten().tolist())
    scales = numpy_helper.from_array(rng.uniform(0.5, 1.0, (4, 2)).astype(np.float32), "scales")
    node = helper.make_node("GatherBlockQuantized", ["data", "indices", "scales"], ["Y"], domain="com.microsoft",
                            block_size=32)
    graph = helper.make_graph([node], "gbq", [helper.make_tensor_value_info("indices", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [data, scales])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    assert_declined(model, {"indices": np.array([3, 1], np.int64)})


# ---- the other CPU kernel sets ------------------------------------------------------------------

@pytest.mark.parametrize("isa", ["avx2", "scalar"])
def test_matmulnbits_narrower_cpu_kernels(isa):
    """The AVX2 and portable MatMulNBits kernels (src/ops/quantized_cpu*.cc) on this machine:
    ONNXRUNTIME_EP_MLX_NBITS_ISA narrows the kernel set, in a fresh process (it is read once), for
    a subset of the parity tests above (every bit width, zero points, bias, level 4, float16)."""
    import platform
    import subprocess
    import sys
    if platform.machine() not in ("x86_64", "AMD64") and isa != "scalar":
        pytest.skip("x86 kernels")
    if mlx_device() != "cpu":
        pytest.skip("the nbits_cpu kernels run on MLX's CPU device only; here MLX runs on " + mlx_device())
    env = dict(os.environ, ONNXRUNTIME_EP_MLX_NBITS_ISA=isa)
    subset = ("random_bytes or float_zero_points or (level_4 and not declined) or (test_float16 and int)"
              " or (panels and 17)")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", subset],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def siblings_model(K, widths, bits, block_size, rows, dtype, zp, flat, seed=0):
    """(model, feeds) of MatMulNBits nodes on one A (a Llama MLP's gate and up), each its own
    weights (`widths`: their N), every output a graph output; `flat`: 1-D scales and zero points."""
    a = None
    nodes, inits, outs = [], [], []
    for j, N in enumerate(widths):
        a_j, b, scales, zps, _ = case(K, N, bits, block_size, (rows, K), dtype, zp=zp, kind="int", seed=seed + j)
        a = a_j if a is None else a
        consts = [(f"B{j}", b), (f"scales{j}", scales.reshape(-1) if flat else scales)]
        if zps is not None:
            consts.append((f"zp{j}", zps.reshape(-1) if flat else zps))
        inits += [numpy_helper.from_array(v, n) for n, v in consts]
        nodes.append(helper.make_node("MatMulNBits", ["A"] + [n for n, _ in consts], [f"Y{j}"], domain="com.microsoft",
                                      K=K, N=N, bits=bits, block_size=block_size))
        outs.append(helper.make_tensor_value_info(f"Y{j}", onnx_type(a.dtype), [rows, N]))
    graph = helper.make_graph(nodes, "siblings", [helper.make_tensor_value_info("A", onnx_type(a.dtype), [rows, K])],
                              outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, {"A": a}


@pytest.mark.parametrize("zp", ["uint8", "float", None])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("rows", [1, 5])
def test_siblings_merged(zp, dtype, rows):
    """MatMulNBits on one A (src/runtime/nbits_siblings.h): one node over the members' weights side
    by side, each output its columns; every column as ORT's CPU EP computes it (random bytes,
    power-of-two scales: exact), with packed, float and no zero points, 2-D and flat scales, three
    members of other widths."""
    check_parity(*siblings_model(96, [24, 40], 4, 32, rows, dtype, zp, flat=False))
    check_parity(*siblings_model(96, [8, 16, 24], 4, 32, rows, dtype, zp, flat=True, seed=3))


def test_siblings_merged_census():
    """On the GPU paths (here their test mode on MLX's CPU device) the merged group is one product a
    run, MLX's quantized_matmul for one row (one a member with ONNXRUNTIME_EP_MLX_MERGE_MATMULS=0):
    the group's node ran, not its members'. The CPU kernels' path keeps one node a member (no gain
    there, src/runtime/nbits_siblings.cc)."""
    from harness import census_of_tests
    if mlx_device() != "cpu":
        pytest.skip("the GPU paths' CPU test mode (a GPU runs the EP's decode kernel)")
    cases = ["test_siblings_merged[1-f32-uint8]", "test_siblings_merged[1-f16-None]"]
    force = {"ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS": "force"}
    for setting, want in ((None, [1, 1, 1, 1]), ("0", [2, 3, 2, 3])):  # the models' 2 and 3 members
        census, _ = census_of_tests(__file__, cases, env={**force, "ONNXRUNTIME_EP_MLX_MERGE_MATMULS": setting})
        assert len(census) == 4, census  # two models a case
        counts = [int(line.split("QuantizedMatmul ")[1].split(",")[0]) for line in census]
        assert counts == want, census
    cpu, _ = census_of_tests(__file__, cases[:1])
    assert [int(line.split("MatMulNBitsCpu ")[1].split(",")[0]) for line in cpu] == [2, 3], cpu


def test_matmulnbits_gpu_translation_on_the_cpu():
    """The GPU translation (mx::quantized_matmul on B's bytes as uint32 words, float32 scales and
    biases, which ConstantFolder evaluates once; dequantize + GEMM past its rows) run on MLX's CPU
    device with ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS=force, in a fresh process (read once): the float32,
    float16, float zero point, bias, many-row and merged-siblings parity tests above hold for it too
    (accuracy_level 4 keeps the CPU kernels)."""
    import subprocess
    import sys
    if mlx_device() != "cpu":
        pytest.skip("on a GPU the parity tests above run this translation already")
    env = dict(os.environ, ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS="force", ONNXRUNTIME_EP_MLX_GRAPH_CENSUS="1")
    subset = ("test_float32 or random_bytes or float_zero_points or test_float16 or panels or weights_as_graph "
              "or (siblings_merged and not census)")
    # -s: the EP's census lines reach this process (they name the primitives each partition ran)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", __file__, "-k", subset],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]
    census = [line for line in r.stderr.splitlines() if "MLX primitives per run" in line]
    assert any("QuantizedMatmul" in line for line in census), r.stderr[-2000:]
    assert not any("NBitsCpu" in line for line in census), [line for line in census if "NBitsCpu" in line][:3]


def test_half_prefill_modes():
    """ONNXRUNTIME_EP_MLX_NBITS_PREFILL (src/ops/quantized.cc, HalfPrefillMode) on MLX's CPU
    device through ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS=force, the float16 cases of many rows with
    integer zero points: by default ("split") one float16 GEMM 2K wide ([A, A] by [hi, lo]);
    "half" one float16 GEMM K wide; "float32" a float32 one. All hold ORT's tolerance here (the
    float zero point cases too by default: test_matmulnbits_gpu_translation_on_the_cpu)."""
    import subprocess
    import sys
    if mlx_device() != "cpu":
        pytest.skip("the forced CPU graphs (on a GPU the setting is read once per process)")
    subset = "test_float16 and K96_N24_b4_bs32-uint8 and 40"
    seen = {}
    for setting in ("", "half", "float32"):
        env = dict(os.environ, ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS="force", ONNXRUNTIME_EP_MLX_GRAPH_CENSUS="graph",
                   ONNXRUNTIME_EP_MLX_NBITS_PREFILL=setting)
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", __file__, "-k", subset],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
        # "Matmul A [(40,192), float16], B [(192,24), float16] -> ...": the first input's shape and type
        seen[setting] = {line.split("[", 1)[1].split("]")[0] for line in r.stderr.splitlines()
                         if line.startswith("Matmul ")}
    assert seen[""] == {"(40,192), float16"}, seen  # K = 96, doubled
    assert seen["half"] == {"(40,96), float16"}, seen
    assert seen["float32"] == {"(40,96), float32"}, seen


def test_gpu_decode_kernel_and_quantized_matmul():
    """On MLX's CUDA backend a MatMulNBits of up to 8 rows is one custom kernel in float32
    (src/ops/quantized_cuda.cc), census: a CustomKernel and no QuantizedMatmul (with constant
    float32 weights the kernel alone, besides the Contiguous every partition output has,
    plan.cc); with ONNXRUNTIME_EP_MLX_NBITS_KERNEL=0 mx::quantized_matmul again. The few-row
    parity tests above hold both ways (fresh processes: the setting is read once); every parity
    test of this file runs the kernel where it has up to 8 rows."""
    import subprocess
    import sys
    if mlx_device() != "gpu" or os.environ.get("ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS") == "force":
        pytest.skip("MLX's CUDA backend only (the kernel is CUDA C++)")
    subset = "test_bfloat16 or weights_as_graph or one_dimensional_scales"  # rows 1, 3 and 6
    census = {}
    for setting in ("1", "0"):
        env = dict(os.environ, ONNXRUNTIME_EP_MLX_GRAPH_CENSUS="1", ONNXRUNTIME_EP_MLX_NBITS_KERNEL=setting)
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", __file__, "-k",
                            subset], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
        census[setting] = [line for line in r.stderr.splitlines() if "MLX primitives per run" in line]
    if "CustomKernel" not in " ".join(census["1"]):
        pytest.skip("not MLX's CUDA backend (Metal: mx::quantized_matmul)")
    kernel = [line for line in census["1"] if "CustomKernel" in line]
    assert not any("QuantizedMatmul" in line for line in kernel), kernel[:3]
    # the constant float32 weights (one_dimensional_scales): the kernel alone (no casts of A or of
    # the result, no Full), besides the output's Contiguous. The sixteenth session's H200 run
    # asserted "total 1: CustomKernel 1", which no partition has (the output's copy).
    assert any(line.endswith("total 2: Contiguous 1, CustomKernel 1") for line in kernel), kernel
    assert any("QuantizedMatmul" in line for line in census["0"]), census["0"][:3]
    assert not any("CustomKernel" in line for line in census["0"]), census["0"][:3]


# One test id in WORD_LOADS_STRIDE of the file's, in their order (a share of each large test
# function's cases).
WORD_LOADS_STRIDE = 6


def test_gpu_decode_kernel_word_loads():
    """ONNXRUNTIME_EP_MLX_NBITS_WIDE=0: the decode kernel reads B and x one word a lane and the
    prefill dequantization stores one value at a time, where the default reads B 16 bytes a lane
    (where a row is whole 16-byte pieces) and x a word's values at a time (where K is whole words)
    and stores 16 bytes where aligned (the rest of this file runs the default, and passed whole on
    an H100 with the wide loads in the thirty-second session): every sixth of this file's parity
    tests holds with the one-word loops too (the default through the thirty-first session, whose
    GPUs ran the whole file with them; all of it again doubled the file's time on a GPU), and the
    kernel is still one CustomKernel. MLX's CUDA backend only; tests/cpp/nbits_kernel_test.cc runs
    both loops' text on the host."""
    import subprocess
    import sys
    if mlx_device() != "gpu" or os.environ.get("ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS") == "force":
        pytest.skip("MLX's CUDA backend only (the kernel is CUDA C++)")
    listed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                             __file__, "-k", "not test_gpu_"], capture_output=True, text=True, timeout=300)
    ids = [line for line in listed.stdout.splitlines() if "::" in line][::WORD_LOADS_STRIDE]
    assert ids, listed.stdout[-2000:]
    env = dict(os.environ, ONNXRUNTIME_EP_MLX_GRAPH_CENSUS="1", ONNXRUNTIME_EP_MLX_NBITS_WIDE="0")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"] + ids, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    assert any("CustomKernel" in line for line in r.stderr.splitlines() if "MLX primitives per run" in line)


@pytest.mark.parametrize("mode", ["split", "half", "float32"])
def test_gpu_prefill_dequantize_kernel(mode):
    """ONNXRUNTIME_EP_MLX_NBITS_KERNEL=all (src/ops/quantized_cuda.cc, the default): a GPU
    prefill's B dequantized by one custom kernel (float32 weight, or hi and lo of A's half type
    for the split product) instead of MLX's unpack and dequantize ops. The many-row parity
    tests hold with it, every prefill mode (fresh processes: the settings are read once)."""
    import subprocess
    import sys
    if mlx_device() != "gpu" or os.environ.get("ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS") == "force":
        pytest.skip("MLX's CUDA backend only (the kernel is CUDA C++)")
    subset = "(test_float32 and 9) or (random_bytes and 40) or (float_zero_points and 40) or (test_float16 and 40)"
    env = dict(os.environ, ONNXRUNTIME_EP_MLX_GRAPH_CENSUS="1", ONNXRUNTIME_EP_MLX_NBITS_KERNEL="all",
               ONNXRUNTIME_EP_MLX_NBITS_PREFILL=mode)
    # half: B rounded once, which misses ORT's CPU EP where float zero points cancel
    k = subset if mode != "half" else "(test_float16 and 40 and (uint8 or None)) or (test_float32 and 9)"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", __file__, "-k", k],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and " passed" in r.stdout, mode + r.stdout[-3000:] + r.stderr[-2000:]
    census = [line for line in r.stderr.splitlines() if "MLX primitives per run" in line]
    if "CustomKernel" not in " ".join(census):
        pytest.skip("not MLX's CUDA backend (Metal)")
    assert not any("RightShift" in line for line in census), (mode, census[:3])


@pytest.mark.parametrize("rows", [1, 5])
def test_transposed_a_reaches_the_kernel_as_a_view(rows):
    """A Transpose before MatMulNBits: on MLX's CPU device the kernel's primitive gets a transposed
    view (no Contiguous node in front of it any more) and copies it to row-major order when it
    runs (cpu_primitive.h, RowMajor); the values are ORT's."""
    K, N, bits, block = 96, 24, 4, 32
    a, b, scales, zps, _ = case(K, N, bits, block, (1, rows, K), kind="int")
    model, _ = nbits_model(a, b, scales, K, N, bits, block, zp=zps)
    graph = model.graph
    graph.node.insert(0, helper.make_node("Transpose", ["A_t"], ["A"], perm=[0, 2, 1]))
    graph.input[0].CopyFrom(helper.make_tensor_value_info("A_t", onnx_type(a.dtype), [1, K, rows]))
    check_parity(model, {"A_t": np.ascontiguousarray(a.transpose(0, 2, 1))}, rtol=0, atol=0)
