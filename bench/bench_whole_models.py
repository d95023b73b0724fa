"""Whole models through the MLX EP against ORT's CPU EP, in one run: the synthetic exporter-layout
models of tests/models/build_models.py (at benchmark sizes) and the trained models from PyPI
wheels (scripts/fetch_models.sh; skipped when absent). Median latency of --iters runs after
--warmup runs and --warmup-s seconds (the first MLX runs trace and compile), in blocks of --block runs
a peer, the first untimed (on few cores a run right after the other peer's shares the cores with
ORT's intra-op threads, which spin after a run: alternating runs timed the EP 2x slow on a Magika-
sized convolution, 15.5 ms against 7.6 alone), the CPU/MLX
ratio (> 1: MLX faster), and what the EP claimed. Prints a markdown table; --json FILE writes the numbers too.

    .venv/bin/python bench/bench_whole_models.py [--iters 20] [--warmup 3] [--only bert,yolo]
"""
import argparse
import json
import os
import sys
import tempfile

import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "models")]
import build_models  # noqa: E402
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
import real_models  # noqa: E402
from timing import median_ms  # noqa: E402
from onnxruntime_ep_mlx.report import collect_report  # noqa: E402

EP = mlx_ep.ep_name()

# Benchmark sizes of the synthetic models (the graphs' dims are symbolic; the tests use smaller).
SYNTHETIC = {
    "bert_encoder": dict(batch=4, seq=128, max_pos=128),
    "gpt2_decoder": dict(batch=4, seq=128, n_pos=128),
    "mobilenet_cnn": dict(batch=4, height=96, width=96),
    "yolo_detector": dict(batch=1, height=320, width=320),
    "crnn": dict(batch=4, width=160),
}


def cases(only):
    """(name, model path, feeds, input description) for each model to run."""
    out_dir = tempfile.mkdtemp(prefix="bench_whole_models_")
    for name, sizes in SYNTHETIC.items():
        if only and not any(o in name for o in only):
            continue
        model, feeds = build_models.MODELS[name](**sizes)
        path = os.path.join(out_dir, name + ".onnx")
        onnx.save(model, path)
        yield name, path, feeds
    for name in real_models.REAL_MODELS:
        if only and not any(o in name for o in only):
            continue
        path = real_models.model_path(name)
        if not os.path.exists(path):
            print(f"skipping {name}: {path} missing (scripts/fetch_models.sh)", file=sys.stderr)
            continue
        yield name, path, real_models.REAL_MODELS[name][1]()


def mlx_session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    mlx_ep.append_to_session_options(so)
    sess = ort.InferenceSession(path, so, enable_fallback=0)  # an EP failure must not time CPU
    assert EP in sess.get_providers(), sess.get_providers()
    return sess


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--warmup-s", type=float, default=1.0, help="and at least this many seconds of warm-up rounds")
    ap.add_argument("--only", default="", help="comma-separated substrings of model names")
    ap.add_argument("--threads", type=int, default=0, help="ORT CPU EP intra-op threads (0: ORT's default)")
    ap.add_argument("--block", type=int, default=5,
                    help="runs of a peer in a row per round, the first untimed (1: strictly alternating runs)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    device = mlx_ep.get_ep_devices()[0].ep_metadata.get("mlx_device", "?")
    print(f"MLX device: {device}; onnxruntime {ort.__version__}; {os.cpu_count()} CPUs; "
          f"median of {args.iters} runs after {args.warmup} warm-up runs and at least {args.warmup_s:g} s, "
          + (f"in blocks of {args.block} runs a peer (the first untimed)\n" if args.block > 1 else "interleaved\n"))
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()  # onnxruntime-gpu: a third peer
    print("| model | input | nodes claimed/total | MLX partitions | ORT CPU ms | MLX EP ms | CPU/MLX |"
          + (" ORT CUDA ms | CUDA/MLX |" if cuda else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|" if cuda else ""))
    rows = []
    for name, path, feeds in cases([o for o in args.only.split(",") if o]):
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        cpu = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        sessions = [cpu, mlx_session(path)]
        if cuda:
            sessions.append(ort.InferenceSession(path, so, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]))
        runs = [lambda s=s: s.run(None, feeds) for s in sessions]
        cpu_ms, mlx_ms, *cuda_ms = median_ms(runs, args.warmup, args.iters, warmup_s=args.warmup_s, block=args.block)
        report = collect_report(path)
        graph = report["graphs"][0] if report["graphs"] else {"nodes_claimed": 0, "nodes_total": 0, "partitions": []}
        shape = " ".join("x".join(map(str, v.shape)) for v in feeds.values())
        row = dict(model=name, input=shape, claimed=graph["nodes_claimed"], total=graph["nodes_total"],
                   partitions=len(graph["partitions"]), cpu_ms=cpu_ms, mlx_ms=mlx_ms, ratio=cpu_ms / mlx_ms)
        if cuda_ms:
            row.update(cuda_ms=cuda_ms[0], cuda_ratio=cuda_ms[0] / mlx_ms)
        rows.append(row)
        print(f"| {name} | {shape} | {row['claimed']}/{row['total']} | {row['partitions']} | "
              f"{cpu_ms:.2f} | {mlx_ms:.2f} | {row['ratio']:.2f}x |"
              + (f" {row['cuda_ms']:.2f} | {row['cuda_ratio']:.2f}x |" if cuda_ms else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mlx_device": device, "onnxruntime": ort.__version__, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
