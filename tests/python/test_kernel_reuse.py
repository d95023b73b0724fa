"""A new input length builds no new MLX kernels (src/runtime/scalars.h).

MLX compiles the value of every scalar leaf of a traced graph into the fused kernels that read it,
so a scalar that follows the sequence length (a fold of Shape, an attention op's length or index
bound) gave every new prompt length new kernels: on MLX's CPU backend one run of the host's C++
compiler each, 1-2 s per new length for the torch exports, ~0.65 s for a 24-layer genai decoder.
The EP hands such scalars to the kernels as data, so the kernels built for the first length serve
every later one; only the trace itself is per shape.

A child process counts the kernels MLX's CPU backend writes into its cache (under TMPDIR, fresh
for the test, so the first run must build some: the test cannot pass by finding them cached)."""
import glob
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TORCH = os.path.join(ROOT, "tests", "models", "torch")
LENGTHS = [9, 13, 21]


def kernel_count():
    return len(glob.glob(os.path.join(os.environ["TMPDIR"], "mlx", "*", "cpu", "*.so")))


def torch_export_counts(sess):
    """Kernel counts after each run: each length twice, the second run compiling the length's
    function again with its scalar leaves as inputs (src/runtime/scalars.h, ScalarInputs), which
    must reuse the first run's kernels too."""
    counts = []
    for n in LENGTHS:
        rng = np.random.default_rng(n)
        feeds = {"input_ids": rng.integers(0, 96, (2, n)).astype(np.int64),
                 "attention_mask": np.ones((2, n), np.int64)}
        for _ in range(2):
            sess.run(None, feeds)
            counts.append(kernel_count())
    return counts


def child():
    """Kernel counts after each length, per model, printed as JSON."""
    sys.path[:0] = [os.path.join(ROOT, "python"), HERE, os.path.join(ROOT, "tests", "models", "llm")]
    import build_llm_models as llm
    from llm_client import Decoder, ReportedSession

    out = {}
    for name in ("gpt2_dynamo", "llama_torchscript"):
        rs = ReportedSession(os.path.join(TORCH, f"{name}.onnx"))
        out[name] = torch_export_counts(rs.sess)
        part = rs.close()["runtime"]["partitions"][0]
        out[name + ".traces"], out[name + ".trace_ms"] = part["traces"], part["trace_ms"]
        out[name + ".scalar_input_traces"] = part["scalar_input_traces"]
    dirs, cfg = llm.build(os.path.join(ROOT, "build", "models", "llm"), "tiny", names=["genai_fp32_shared"])
    rs = ReportedSession(os.path.join(dirs["genai_fp32_shared"], "model.onnx"))
    dec = Decoder(rs.sess, cfg, np.float32, True)
    out["genai_fp32_shared"] = []
    for n in LENGTHS:
        dec.start()
        dec.step(list(np.random.default_rng(n).integers(0, cfg.vocab, n)))
        out["genai_fp32_shared"].append(kernel_count())
    del dec
    part = rs.close()["runtime"]["partitions"][0]
    out["genai_fp32_shared.traces"], out["genai_fp32_shared.trace_ms"] = part["traces"], part["trace_ms"]
    print(json.dumps(out))


def test_new_lengths_build_no_new_kernels(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), ONNXRUNTIME_EP_MLX_DEVICE="cpu")
    done = subprocess.run([sys.executable, __file__, "child"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("gpt2_dynamo", "llama_torchscript", "genai_fp32_shared"):
        first, *later = counts[name]
        assert first > 0, f"{name}: MLX built no kernel at all ({counts})"
        assert later == [first] * len(later), f"{name}: kernels after lengths {LENGTHS}: {counts[name]}"
        assert counts[name + ".traces"] == len(LENGTHS), counts  # each length was traced
        assert counts[name + ".trace_ms"] > 0, counts  # and the report says what the traces cost
    for name in ("gpt2_dynamo", "llama_torchscript"):  # each length's second run: its scalars as inputs
        assert counts[name + ".scalar_input_traces"] == len(LENGTHS), counts


def scalar_constants_model():
    """PP-OCRv4's hard-swish and affine blocks in small: one-element constants of rank 1 and 4
    (Constant nodes and an initializer) around a convolution's output."""
    from onnx import TensorProto, helper, numpy_helper
    consts = {"scale": [1.25], "three": [3.0], "six": [6.0], "bias": [-0.5]}
    nodes = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(np.array(v, np.float32), k))
             for k, v in consts.items()]
    nodes += [helper.make_node("Mul", ["scale", "x"], ["s"]), helper.make_node("Add", ["s", "three"], ["t"]),
              helper.make_node("Clip", ["t", "zero", "six"], ["c"]), helper.make_node("Mul", ["s", "c"], ["m"]),
              helper.make_node("Div", ["m", "six"], ["h"]), helper.make_node("Add", ["h", "bias4"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(0), "zero"),
             numpy_helper.from_array(np.full((1, 1, 1, 1), 0.75, np.float32), "bias4")]
    graph = helper.make_graph(nodes, "hardswish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 6, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 6, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def scalar_constants_child():
    sys.path[:0] = [os.path.join(ROOT, "python"), HERE]
    from harness import run_cpu, run_mlx_with_report
    x = np.random.default_rng(0).standard_normal((2, 8, 6, 10)).astype(np.float32) * 4
    outs, _, providers = run_mlx_with_report(scalar_constants_model(), [{"x": x}] * 2)
    assert set(providers) == {"MLXExecutionProvider"}, providers
    np.testing.assert_array_equal(outs[-1][0], run_cpu(scalar_constants_model(), {"x": x})[0])


def test_one_element_constants_reach_kernels_as_scalars():
    """A one-element constant of rank 1 or more that a fused kernel broadcasts reaches it as a
    rank-0 input (src/runtime/scalars.cc, RankZero): MLX's kernels read rank-0 inputs as scalars
    and anything else as a strided array, and one such input made the whole kernel the strided
    variant (25% of PP-OCRv4's recognizer on the CPU). The results stay ORT's, bit for bit."""
    env = dict(os.environ, ONNXRUNTIME_EP_MLX_GRAPH_CENSUS="graph", ONNXRUNTIME_EP_MLX_DEVICE="cpu")
    done = subprocess.run([sys.executable, __file__, "scalar_constants_child"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    kernels = [line for line in done.stderr.splitlines() if line.startswith("Compiled")]
    assert kernels, done.stderr[-3000:]
    for line in kernels:  # "CompiledName in [(shape), dtype], ... -> out [(shape), dtype]"
        inputs = line.split(" -> ")[0]
        assert "[(1,)," not in inputs and "[(1,1,1,1)," not in inputs, line
        assert inputs.count("[(), float32]") >= 4, line  # scale, three, six, bias4 (and zero)


if __name__ == "__main__" and sys.argv[1:] == ["child"]:
    child()
if __name__ == "__main__" and sys.argv[1:] == ["scalar_constants_child"]:
    scalar_constants_child()
