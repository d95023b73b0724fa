"""Parity tests of the signal tables (src/ops/signal.cc) against ORT's CPU kernels: HannWindow,
HammingWindow, BlackmanWindow and MelWeightMatrix (17), computed on the host from their scalar
inputs, given as graph inputs (host values the partition specializes on; ORT folds a node of
constants away before any EP sees it), for float, double (MLX's CPU device only) and integer outputs."""
import numpy as np
import pytest
from onnx import TensorProto

from harness import check_parity, node_model

WINDOWS = ["HannWindow", "HammingWindow", "BlackmanWindow"]
OUTPUT_TYPES = {"float": (TensorProto.FLOAT, np.float32), "double": (TensorProto.DOUBLE, np.float64),
                "int32": (TensorProto.INT32, np.int32), "uint8": (TensorProto.UINT8, np.uint8)}


@pytest.mark.parametrize("output", list(OUTPUT_TYPES))
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [2, 7, 400])
@pytest.mark.parametrize("op", WINDOWS)
def test_window(op, size, periodic, output):
    onnx_type, dtype = OUTPUT_TYPES[output]
    attrs = {"periodic": periodic, "output_datatype": onnx_type}
    model, feeds = node_model(op, [], attrs, 17, host=[("size", np.array(size, np.int64))], host_as_input=True,
                              out_dtype=dtype)
    got = check_parity(model, feeds, rtol=0, atol=0)  # the same C++ arithmetic: bit for bit
    assert got[0].shape == (size,) and got[0].dtype == dtype


def test_window_of_int32_size_scales_frames():
    """A window applied to frames (an STFT's first step), its int32 size a graph input: the table and
    the product in one partition."""
    import onnx
    from onnx import helper
    frames = np.random.default_rng(4).standard_normal((3, 400)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("HannWindow", ["n"], ["w"], periodic=1),
         helper.make_node("Mul", ["frames", "w"], ["y"])],
        "windowed", [helper.make_tensor_value_info("frames", TensorProto.FLOAT, frames.shape),
                     helper.make_tensor_value_info("n", TensorProto.INT32, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, frames.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    check_parity(model, {"frames": frames, "n": np.array(400, np.int32)}, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("output", ["float", "double", "int32"])
@pytest.mark.parametrize("bins,dft,rate,low,high", [(80, 400, 16000, 0.0, 8000.0), (8, 16, 8192, 0.0, 4096.0),
                                                    (40, 512, 22050, 125.0, 7600.0), (10, 64, 16000, 300.0, 3000.0)],
                         ids=["whisper", "onnx_example", "tacotron", "narrow"])
def test_mel_weight_matrix(bins, dft, rate, low, high, output):
    onnx_type, dtype = OUTPUT_TYPES[output]
    host = [("num_mel_bins", np.array(bins, np.int64)), ("dft_length", np.array(dft, np.int64)),
            ("sample_rate", np.array(rate, np.int64)), ("lower_edge_hertz", np.array(low, np.float32)),
            ("upper_edge_hertz", np.array(high, np.float32))]
    model, feeds = node_model("MelWeightMatrix", [], {"output_datatype": onnx_type}, 17, host=host,
                              host_as_input=True, out_dtype=dtype)
    got = check_parity(model, feeds, rtol=0, atol=0)  # the same C++ arithmetic: bit for bit
    assert got[0].shape == (dft // 2 + 1, bins)
