"""Where one run's time goes (issue 7, per-run overhead), and what MLX's CUDA settings change it.

For each setting (environment variables MLX reads once, so each in a process of its own) this
runs a model through the MLX EP with its inputs and outputs in the EP's device memory, and prints
the median ms of `--iters` runs after warm-ups, the EP's phases per run that did not trace
(RunnerStats: "graph" = calling the compiled function, which builds the run's MLX graph on the
host; "eval" = mx::eval, which on a GPU encodes every primitive into CUDA graphs and waits for the
kernels; "write" = handing outputs and in-place KV rows to ORT) and the MLX primitives a run
evaluates (ONNXRUNTIME_EP_MLX_GRAPH_CENSUS).

    python3 tools/gpu/step_phases.py llm --model DIR [--past 1024] [--settings "default;MLX_USE_CUDA_GRAPHS=0"]
    python3 tools/gpu/step_phases.py llm --model DIR --past 0 --prompt 512     # a prompt's prefill
    python3 tools/gpu/step_phases.py bert [--settings ...] [--rounds 2]    # A B A B: drift shows

A setting is "default" or space-separated NAME=VALUE pairs.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "python"), str(ROOT / "tools" / "gpu")]

DEFAULT_SETTINGS = "default;ONNXRUNTIME_EP_MLX_DEVICE_WRITES=0;ONNXRUNTIME_EP_MLX_NO_CONSTANT_FOLD=1"


def child(args):
    """One setting: the runs, then the session's report (written when the session goes)."""
    import gc

    from kernel_census import model_run, timed_runs

    def make():
        return model_run(args.what, args.model, args.past, args.prompt)

    # A first session pays the process's one-time costs (MLX's kernel JIT, first in-place writes),
    # which would otherwise land in the report's sums over the steady runs; the measured session's
    # report replaces its report when it goes.
    if args.prime:
        run = make()
        for _ in range(args.warmup):
            run()
        del run
        gc.collect()
    run = make()
    times = timed_runs(run, args.warmup, args.iters)
    del run
    gc.collect()
    report = json.loads(Path(os.environ["ONNXRUNTIME_EP_MLX_REPORT"]).read_text())
    parts = report["runtime"]["partitions"]
    out = {"median_ms": statistics.median(times), "min_ms": min(times), "partitions": len(parts)}
    for key in ("steady_runs", "bind_ms", "graph_ms", "eval_ms", "write_ms", "wait_ms", "runs", "traces"):
        out[key] = sum(p.get(key, 0) for p in parts)
    # ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS: the host inputs' bytes the CUDA driver moved (or copied)
    out["prefetched_bytes"] = report["runtime"].get("prefetched_bytes", 0)
    print("RESULT " + json.dumps(out), flush=True)


def parent(args):
    rows = []
    # --rounds R: the settings R times, so that the machine's drift shows as a spread within each
    # setting instead of as a difference between them; every other round in reverse (A B C, C B A):
    # the twenty-seventh session's H100 ran the first setting of each round slowest, twice.
    settings = args.settings.split(";")
    for round_ in range(args.rounds):
        for setting in settings if round_ % 2 == 0 else settings[::-1]:
            row = measure(args, setting, len(rows))
            if row is not None:
                rows.append(dict(row, round=round_))
    if args.rounds > 1:
        print(f"{args.what}: medians by setting over {args.rounds} rounds", flush=True)
        for setting in dict.fromkeys(settings):
            medians = [r["median_ms"] for r in rows if r["setting"] == setting]
            if medians:
                print(f"  [{setting}]: {' / '.join(f'{m:.2f}' for m in medians)} ms; median "
                      f"{statistics.median(medians):.2f}, spread {max(medians) - min(medians):.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def measure(args, setting, index):
    """One setting in a process of its own: its result row, or None when the child failed."""
    env = dict(os.environ, ONNXRUNTIME_EP_MLX_GRAPH_CENSUS="1")
    # "default" (alone or beside NAME=VALUE pairs) adds nothing
    env.update(kv.split("=", 1) for kv in setting.split() if kv != "default")
    with tempfile.TemporaryDirectory() as tmp:
        env["ONNXRUNTIME_EP_MLX_REPORT"] = os.path.join(tmp, "report.json")
        cmd = [sys.executable, __file__, args.what, "--child", "--iters", str(args.iters), "--warmup",
               str(args.warmup), "--past", str(args.past), "--prompt", str(args.prompt)] + \
            (["--model", args.model] if args.model else []) + ([] if args.prime else ["--no-prime"])
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    result = next((json.loads(line[7:]) for line in p.stdout.splitlines() if line.startswith("RESULT ")), None)
    census = [m.group(1) for m in re.finditer(r"MLX primitives per run, (total .*)", p.stderr)]
    graph = p.stderr.rfind("MLX graph of a run")
    if args.json and graph >= 0:  # ONNXRUNTIME_EP_MLX_GRAPH_CENSUS=graph: the last graph logged
        text = p.stderr[graph:].split("\n[", 1)[0]
        Path(args.json).with_suffix(f".graph{index}.txt").write_text(setting + "\n" + text)
    if result is None:
        print(f"{setting}: failed (rc {p.returncode})\n{p.stderr[-3000:]}", flush=True)
        return None
    n = max(result["steady_runs"], 1)
    per_run = {f"{k}_ms_per_run": result.get(f"{k}_ms", 0.0) / n for k in ("bind", "graph", "eval", "write", "wait")}
    row = dict(result, setting=setting, wall_s=time.perf_counter() - t0, census=census[-1] if census else "",
               **per_run)
    # What the EP's Execute does not cover: ORT's run (the binding, the kernel call, the outputs)
    # and Python's loop; the median step less the means of the EP's phases, so a rough figure.
    row["outside_ms"] = row["median_ms"] - sum(per_run[f"{k}_ms_per_run"] for k in ("bind", "graph", "eval", "write"))
    print(f"{args.what} [{setting}]: median {row['median_ms']:.2f} ms (min {row['min_ms']:.2f}); per run "
          f"bind {row['bind_ms_per_run']:.2f} / graph {row['graph_ms_per_run']:.2f} / eval "
          f"{row['eval_ms_per_run']:.2f} / write {row['write_ms_per_run']:.2f} (waiting "
          f"{row['wait_ms_per_run']:.2f}) / outside the EP ~{row['outside_ms']:.2f} ms over "
          f"{result['steady_runs']} runs; {result['partitions']} "
          f"partition(s), {result['traces']} traces"
          + (f"; {result['prefetched_bytes']} bytes moved by the driver in the process" if result.get("prefetched_bytes") else ""),
          flush=True)
    print(f"  primitives: {row['census'][:1500]}", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["bert", "llm"])
    ap.add_argument("--model", help="genai model directory (llm)")
    ap.add_argument("--past", type=int, default=1024)
    ap.add_argument("--prompt", type=int, default=1, help="new tokens a run (llm; > 1 with --past 0: a prefill)")
    ap.add_argument("--settings", default=DEFAULT_SETTINGS)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=1, help="the settings this many times, round-robin")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--json")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--no-prime", dest="prime", action="store_false",
                    help="one session only (its sums then include one-time costs)")
    args = ap.parse_args()
    (child if args.child else parent)(args)


if __name__ == "__main__":
    main()
