"""Replays one model the way the libFuzzer target (fuzz_model.cc) runs it, from Python: a session
with graph optimizations off, feeds made from the declared input types and shapes (symbolic dims
2, values -1..3 / 0..4 / alternating bools, at most 2^16 elements), two runs. Prints one line:
`RAN`, `SKIPPED <why>`, or `ERROR <message>`; a crash is the process dying.

    python tools/fuzz/libfuzzer/replay.py MODEL.onnx [--cpu]     # --cpu: ORT's CPU EP alone
"""
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[3]
MAX_ELEMENTS = 1 << 16
TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
         "tensor(int8)": np.int8, "tensor(int16)": np.int16, "tensor(int32)": np.int32,
         "tensor(int64)": np.int64, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
         "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_}


def small_values(dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    k = (np.arange(n, dtype=np.int64) * 7 + 3) % 5
    if dtype == np.bool_:
        values = np.arange(n) % 2 == 1
    elif np.issubdtype(dtype, np.unsignedinteger):
        values = k
    elif np.issubdtype(dtype, np.floating):
        values = (k - 1) * 0.75
    else:
        values = k - 1
    return values.astype(dtype).reshape(shape)


def feeds_for(sess):
    feeds = {}
    for i in sess.get_inputs():
        if i.type not in TYPES:
            return None, f"input {i.name} of type {i.type}"
        shape = [d if isinstance(d, int) and d >= 0 else 2 for d in i.shape]
        if any(d > MAX_ELEMENTS for d in shape) or np.prod(shape, dtype=np.float64) > MAX_ELEMENTS:
            return None, f"input {i.name} of shape {shape}"
        feeds[i.name] = small_values(TYPES[i.type], shape)
    return feeds, None


def replay(model_bytes, cpu_only=False):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    providers = ["CPUExecutionProvider"]
    if not cpu_only:
        sys.path.insert(0, str(ROOT / "python"))
        import onnxruntime_ep_mlx as mlx_ep

        mlx_ep.register_execution_provider_library()
        providers.insert(0, mlx_ep.ep_name())
    try:
        sess = ort.InferenceSession(model_bytes, so, providers=providers)
        feeds, why = feeds_for(sess)
        if feeds is None:
            return f"SKIPPED {why}"
        for _ in range(2):
            sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - any clean error is an outcome
        return "ERROR " + " ".join(str(e).split())
    return "RAN"


if __name__ == "__main__":
    print(replay(Path(sys.argv[1]).read_bytes(), cpu_only="--cpu" in sys.argv[2:]), flush=True)
