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


if __name__ == "__main__" and sys.argv[1:] == ["child"]:
    child()
