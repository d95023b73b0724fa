"""The torch-exported whole models (tests/models/torch/) on MLX's CPU device with the EP's CPU
primitives on (the defaults) and off (their switches, which compose the same nodes from MLX ops),
beside ORT's CPU EP: what the primitives a run evaluates cost (docs/performance.md, "The exported
models through fewer primitives").

Each model runs in a fresh process per setting (the switches are read once per process), the
settings in turn for --rounds rounds, --iters timed runs after 30; the table gives the median of
the rounds' medians, and the primitives a run evaluates (ONNXRUNTIME_EP_MLX_GRAPH_CENSUS) per
setting.

    .venv/bin/python bench/bench_cpu_primitives.py [--models bert_dynamo,yolo_dynamo] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "python")]

# Off: main before the nineteenth session.
SWITCHES_OFF = {"ONNXRUNTIME_EP_MLX_CONV_CPU_KERNEL": "0", "ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL": "0",
                "ONNXRUNTIME_EP_MLX_POOL_CPU_KERNEL": "0", "ONNXRUNTIME_EP_MLX_RECURRENT_CPU_KERNEL": "0",
                "ONNXRUNTIME_EP_MLX_SCALAR_INPUTS": "0"}
SETTINGS = {"ort": {}, "off": SWITCHES_OFF, "on": {}}


def child(stem, kind, iters):
    """Prints the median ms of `iters` runs of `stem` through ORT's CPU EP or the MLX EP."""
    import onnxruntime_ep_mlx as mlx_ep
    from bench_torch_models import MODELS, feeds_for, session
    from timing import median_ms

    mlx_ep.register_execution_provider_library()
    providers = ["CPUExecutionProvider"] if kind == "ort" else ["MLXExecutionProvider", "CPUExecutionProvider"]
    sess = session(MODELS / f"{stem}.onnx", providers)
    feeds = feeds_for(stem, False)
    print(json.dumps(median_ms([lambda: sess.run(None, feeds)], warmup=30, iters=iters)[0]))


def run_child(stem, kind, iters, extra_env=None):
    env = {**os.environ, **SETTINGS[kind], **(extra_env or {})}
    return subprocess.run([sys.executable, __file__, "--child", stem, kind, "--iters", str(iters)], env=env,
                          capture_output=True, text=True, timeout=600)


def primitives(stem, kind):
    """The primitives a run of the MLX EP evaluates (the census's last line), or -1."""
    p = run_child(stem, kind, 5, {"ONNXRUNTIME_EP_MLX_GRAPH_CENSUS": "1"})
    lines = [line for line in p.stderr.splitlines() if "primitives per run" in line]
    return int(lines[-1].split("total ")[1].split(":")[0]) if lines else -1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(sorted(p.stem for p in (ROOT / "tests/models/torch").glob("*.onnx"))))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "KIND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child, args.iters)
    print("| model | primitives off | on | ORT CPU ms | MLX off | MLX on | CPU/MLX off | on |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for stem in args.models.split(","):
        ms = {kind: [] for kind in SETTINGS}
        for _ in range(args.rounds):
            for kind in SETTINGS:
                p = run_child(stem, kind, args.iters)
                if p.returncode != 0:
                    sys.exit(f"{stem} ({kind}) failed:\n{p.stderr[-2000:]}")
                ms[kind].append(json.loads(p.stdout.strip().splitlines()[-1]))
        m = {kind: statistics.median(v) for kind, v in ms.items()}
        print(f"| {stem} | {primitives(stem, 'off')} | {primitives(stem, 'on')} | {m['ort']:.2f} | {m['off']:.2f} | "
              f"{m['on']:.2f} | {m['ort'] / m['off']:.2f} | {m['ort'] / m['on']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
