"""Whole models with their inputs and outputs kept on the GPU (IOBinding): the MLX EP against ORT's
CUDA EP, both bound to their own device memory, and both with plain `run` (numpy in and out) for
comparison. The MLX EP's device memory is its allocator's (docs/gpu_memory.md); with
ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=0 it has none and its "iobinding" column binds host memory.

    python3 bench/bench_iobinding.py [--filter gpt2_dynamo] [--iters 50] [--json FILE]
"""
import argparse
import gc
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from bench_torch_models import MODELS, feeds_for  # noqa: E402
from timing import median_ms  # noqa: E402


def mlx_session(path):
    so = ort.SessionOptions()
    mlx_ep.append_to_session_options(so)
    return ort.InferenceSession(str(path), so)


def bound_runner(sess, feeds, make_value, out_device):
    """A function running `sess` with every input bound once as a device value and every output
    bound to `out_device` (ORT allocates it there each run)."""
    values = {k: make_value(v) for k, v in feeds.items()}
    io = sess.io_binding()
    for k, v in values.items():
        io.bind_ortvalue_input(k, v)
    for o in sess.get_outputs():
        io.bind_output(o.name, *out_device)

    def run():
        sess.run_with_iobinding(io)

    return run, values


def mlx_value_maker():
    memory = mlx_ep.device_memory_info()
    if memory is None:  # no device memory (CPU device, or ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=0)
        return ort.OrtValue.ortvalue_from_numpy, ("cpu", 0)

    def make(x):
        v = ort.OrtValue.ortvalue_from_shape_and_type(list(x.shape), x.dtype, memory_info=memory)
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(x)], [v])
        return v

    return make, mlx_ep.binding_device()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--filter", default="gpt2_dynamo")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--json")
    args = p.parse_args()
    mlx_ep.register_execution_provider_library()
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    rows = []
    print("| model | MLX run ms | MLX iobinding ms |" + (" CUDA run ms | CUDA iobinding ms |" if cuda else ""))
    print("| --- | --- | --- |" + (" --- | --- |" if cuda else ""))
    for path in sorted(MODELS.glob("*.onnx")):
        if args.filter not in path.name:
            continue
        feeds = feeds_for(path.stem, True)
        row = {"model": path.stem}
        sess = mlx_session(path)
        make, out_device = mlx_value_maker()
        bound, _values = bound_runner(sess, feeds, make, out_device)
        row["mlx_run"], row["mlx_iobinding"] = median_ms([lambda: sess.run(None, feeds), bound], 5, args.iters)
        del sess, bound, _values
        gc.collect()
        if cuda:
            sess = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
            bound, _values = bound_runner(sess, feeds, lambda x: ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0),
                                          ("cuda", 0))
            row["cuda_run"], row["cuda_iobinding"] = median_ms([lambda: sess.run(None, feeds), bound], 5,
                                                               args.iters)
            del sess, bound, _values
            gc.collect()
        rows.append(row)
        line = f"| {row['model']} | {row['mlx_run']:.3f} | {row['mlx_iobinding']:.3f} |"
        if cuda:
            line += f" {row['cuda_run']:.3f} | {row['cuda_iobinding']:.3f} |"
        print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
