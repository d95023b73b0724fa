"""Benchmarks the torch-exported whole models (tests/models/torch/) through the MLX EP against
the peers a user would pick instead, in one process: ORT's CPU EP, and where onnxruntime-gpu is
installed ORT's CUDA EP. Prints a markdown table of median latencies and ratios (peer / MLX:
above 1 means the EP is faster); `--json FILE` also writes them. Also prints each model's
partition count through the EP.

    .venv/bin/python bench/bench_torch_models.py                 # CPU here
    python3 bench/bench_torch_models.py --large                  # GPU machine: bigger inputs
"""
import argparse
import gc
import json
import os
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from timing import median_ms  # noqa: E402

MODELS = ROOT / "tests" / "models" / "torch"


def text(batch, seq):
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(0, 96, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, seq), np.int64)}


def image(*shape):
    return {"image": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def feeds_for(stem, large):
    """Inputs per model family; `large` for GPUs (the exports' static dims are kept)."""
    b = 8 if large else 2
    if stem.startswith(("bert", "gpt2", "llama")):
        return text(b, 64 if large else 32)  # the exports' position tables hold 64 positions
    if stem.startswith("mobilenet"):
        return image(b, 3, 64, 64)
    if stem == "yolo_torchscript":
        return image(b, 3, 256, 256) if large else image(b, 3, 128, 128)
    if stem.startswith("yolo"):
        return image(b, 3, 64, 64)
    if stem == "crnn_torchscript":
        return image(b, 1, 16, 320 if large else 160)
    return image(b, 1, 16, 40)


def session(path, providers):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=providers)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--large", action="store_true", help="bigger inputs (GPU machine)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--filter", default="", help="only models whose file name contains this")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    mlx_ep.register_execution_provider_library()
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    rows = []
    head = "| model | inputs | partitions | ORT CPU ms | MLX EP ms |" + (" ORT CUDA ms |" if cuda else "") + \
        " CPU/MLX |" + (" CUDA/MLX |" if cuda else "")
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    for path in sorted(MODELS.glob("*.onnx")):
        if args.filter not in path.name:
            continue
        feeds = feeds_for(path.stem, args.large)
        shapes = " ".join("x".join(map(str, v.shape)) for v in feeds.values())
        row = {"model": path.stem, "inputs": shapes,
               "partitions": len(mlx_ep.claim_report(str(path))["graphs"][0]["partitions"])}
        peers = [("cpu", ["CPUExecutionProvider"]), ("mlx", ["MLXExecutionProvider", "CPUExecutionProvider"])]
        if cuda:
            peers.append(("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"]))
        for key, providers in peers:
            sess = session(path, providers)
            # At least a second of warm-up: a session's first few hundred milliseconds can be slower.
            row[key] = median_ms([lambda: sess.run(None, feeds)], warmup=3, iters=args.iters, warmup_s=1.0)[0]
            del sess
            gc.collect()
        rows.append(row)
        line = f"| {row['model']} | {shapes} | {row['partitions']} | {row['cpu']:.2f} | {row['mlx']:.2f} |"
        if cuda:
            line += f" {row['cuda']:.2f} |"
        line += f" {row['cpu'] / row['mlx']:.2f} |" + (f" {row['cuda'] / row['mlx']:.2f} |" if cuda else "")
        print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": mlx_ep.get_ep_devices()[0].ep_metadata.get("mlx_device"),
                                               "threads": os.cpu_count(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
