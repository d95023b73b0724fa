"""Benchmarks the MLX EP against its peers in one process: ORT's CPU EP on the same model and,
where PyTorch is installed (the GPU machine), the same encoder block in PyTorch on the GPU.
Prints median latencies and ratios; `--json FILE` also writes them.

    .venv/bin/python bench/bench_models.py            # CPU here
    python3 bench/bench_models.py --torch             # GPU machine: adds PyTorch (CUDA)
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from make_encoder_model import build_encoder  # noqa: E402
from timing import median_ms  # noqa: E402

CASES = [  # (batch, seq, d_model, heads, d_ff)
    (1, 128, 256, 4, 1024),
    (4, 128, 256, 4, 1024),
    (8, 256, 512, 8, 2048),
]


def torch_encoder(model, device):
    """The same block in PyTorch, reading the weights out of the ONNX model."""
    import torch

    w = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()).to(device) for i in model.graph.initializer}
    heads = int(w["split_heads_shape"][2])

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], w[p + "_gamma"], w[p + "_beta"], 1e-5)

    def lin(x, p):
        return x @ w[p + "_w"] + w[p + "_b"]

    def fwd(x):
        b, s, d = x.shape
        h = ln(x, "ln1")
        q, k, v = (lin(h, n).reshape(b, s, heads, d // heads).transpose(1, 2) for n in "qkv")
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // heads) ** 0.5, dim=-1) @ v
        x1 = x + lin(a.transpose(1, 2).reshape(b, s, d), "o")
        f = lin(ln(x1, "ln2"), "ff1")
        return x1 + lin(torch.nn.functional.gelu(f), "ff2")

    return fwd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--torch", action="store_true", help="add PyTorch on CUDA as a peer")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    mlx_ep.register_execution_provider_library()
    device = next(d.ep_metadata.get("mlx_device", "?") for d in mlx_ep.get_ep_devices())
    rows = []
    print(f"MLX device: {device}; onnxruntime {ort.__version__}; {args.iters} timed runs, median")
    print(f"{'case (B,S,D,H,F)':<26}{'ORT CPU ms':>12}{'MLX EP ms':>12}{'CPU/MLX':>9}"
          + (f"{'torch ms':>11}{'torch/MLX':>11}" if args.torch else ""))
    for b, s, d, h, f in CASES:
        model = build_encoder(d, h, f)
        data = model.SerializeToString()
        feeds = {"x": np.random.default_rng(0).standard_normal((b, s, d)).astype(np.float32)}
        cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        mlx = ort.InferenceSession(data, providers=[mlx_ep.ep_name(), "CPUExecutionProvider"])
        diff = float(np.max(np.abs(cpu.run(None, feeds)[0] - mlx.run(None, feeds)[0])))
        row = {"case": [b, s, d, h, f], "max_abs_diff": diff,
               "ort_cpu_ms": median_ms([lambda: cpu.run(None, feeds)], 3, args.iters)[0],
               "mlx_ms": median_ms([lambda: mlx.run(None, feeds)], 3, args.iters)[0]}
        line = f"{str((b, s, d, h, f)):<26}{row['ort_cpu_ms']:>12.2f}{row['mlx_ms']:>12.2f}" \
               f"{row['ort_cpu_ms'] / row['mlx_ms']:>9.2f}"
        if args.torch:
            import torch

            fwd = torch_encoder(model, "cuda")
            x = torch.from_numpy(feeds["x"]).cuda()

            def run_torch():
                with torch.no_grad():
                    fwd(x)
                torch.cuda.synchronize()

            row["torch_ms"] = median_ms([run_torch], 3, args.iters)[0]
            line += f"{row['torch_ms']:>11.2f}{row['torch_ms'] / row['mlx_ms']:>11.2f}"
        print(line + f"   (max|diff| {diff:.1e})")
        rows.append(row)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": device, "onnxruntime": ort.__version__, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
