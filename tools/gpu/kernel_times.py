"""How long each CUDA kernel of one run takes on the GPU (issue 7: kernel times per decode step).

The sixteenth session's phases showed a TinyLlama decode step waiting ~2.3 ms for the GPU after
the host had encoded it: the kernels, not only MLX's host work, are the step's time. This runs
the step under Nsight Compute (`ncu`, which the H200 image has; nsys is not usable there) with
profiling off until the model is warm, then on for `--runs` runs only (cudaProfilerStart/Stop),
and sums `gpu__time_duration.sum` by kernel family. Caches and clocks are left as they are
(`--cache-control none --clock-control none`): ncu still serializes the kernels, so a family's
time is its kernels' own, without the gaps between them.

    python3 tools/gpu/kernel_times.py llm --model DIR [--past 1024] [--json OUT]   # a decode step
    python3 tools/gpu/kernel_times.py bert [--json OUT]                              # BERT fp16 8x128

`--via timeline` instead records the runs through CUPTI (torch.profiler, in this process: CUPTI
traces every kernel of the process, MLX's too, CUDA graphs' nodes included) with the kernels' real
start and end: nothing is serialized or replayed, so besides each family's time it gives the GPU's
busy time (the union of the kernels' intervals) against the run's span and wall time, i.e. how
long the GPU sat idle waiting for the host, and, from the host's side of the same trace, how long
each run waited after its last launch call and for which kernels (run_tails).

`--via detail --kernel REGEX` profiles the first `--launch-count` launches (after warm-up) of the
kernels whose names match REGEX with ncu's sections on where a kernel's time goes (speed of light,
occupancy, launch, memory workload, warp states, scheduler) and prints ncu's own text report: why
a kernel of ours is slow (the thirty-sixth session's H100 timed the heads-attention kernel at
72 us a BERT layer, where cuBLASLt's two products and the softmax kernel took less).
"""
import argparse
import collections
import csv
import ctypes
import glob
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools" / "gpu")]
METRIC = "gpu__time_duration.sum"
UNITS_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def find_ncu():
    """ncu on PATH, under the CUDA toolkit or Nsight Compute's own folder, or None."""
    found = shutil.which("ncu")
    candidates = [found] if found else []
    candidates += sorted(glob.glob("/usr/local/cuda*/bin/ncu")) + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def cudart():
    """The CUDA runtime MLX's process uses (cudaProfilerStart/Stop act on its primary context)."""
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    site = sysconfig.get_paths()["purelib"]
    names += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcudart.so*")))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("no libcudart found (LD_LIBRARY_PATH or site-packages/nvidia/*/lib)")


def family(name):
    """A kernel's family: its name without template arguments, parameters or `void`."""
    short = re.sub(r"^void\s+", "", name.strip())
    depth, out = 0, []
    for ch in short:  # drop <...> and (...) at any depth
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or short[:80]


def parse_ncu_csv(text):
    """(kernel name, ns) per profiled kernel from `ncu --csv` output, whether its page is "raw"
    (one row a kernel, a units row under the header) or "details" (one row a metric)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    name_at = header.index("Kernel Name")
    if "Metric Name" in header:  # details page
        m, u, v = header.index("Metric Name"), header.index("Metric Unit"), header.index("Metric Value")
        return [(r[name_at], float(r[v].replace(",", "")) * UNITS_NS.get(r[u], 1.0)) for r in body if r[m] == METRIC]
    at = header.index(METRIC)
    scale = 1.0
    if body and body[0][name_at] == "" and body[0][at] in UNITS_NS:  # the raw page's units row
        scale, body = UNITS_NS[body[0][at]], body[1:]
    return [(r[name_at], float(r[at].replace(",", "")) * scale) for r in body if r[at]]


def trace_spans(trace):
    """The complete events ("ph": "X": a start and a duration) of a torch.profiler Chrome trace."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X"]


def parse_chrome_trace(trace):
    """(kernel name, start µs, duration µs) of each GPU kernel in a torch.profiler Chrome trace
    (its events of category "kernel"), by start."""
    kernels = [(e["name"], float(e["ts"]), float(e.get("dur", 0.0))) for e in trace_spans(trace)
               if e.get("cat") == "kernel"]
    return sorted(kernels, key=lambda k: k[1])


def busy_us(kernels):
    """The GPU's busy time: the union of the kernels' [start, start + duration) intervals, µs."""
    total, end = 0.0, float("-inf")
    for _, start, dur in kernels:
        if start + dur <= end:
            continue
        total += start + dur - max(start, end)
        end = start + dur
    return total


RUN_MARK = "kernel_times_run"  # the record_function name around each traced run


def run_tails(trace):
    """Per run marked RUN_MARK in a torch.profiler Chrome trace (a user annotation on the host's
    clock, which the trace shares with the kernels): the host's wait at the end, from the end of its
    last launch call (a CUDA runtime or driver event whose name holds "Launch") to the run's end,
    and the kernel families that ran then (each kernel's µs after that last launch), which are what
    the run waited for. Runs without a launch call (CUPTI saw none) are left out."""
    spans = trace_spans(trace)
    marks = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in spans
                   if e.get("name") == RUN_MARK and e.get("cat") in ("user_annotation", "cpu_op"))
    launches = [float(e["ts"]) + float(e.get("dur", 0.0)) for e in spans
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in e.get("name", "")]
    kernels = parse_chrome_trace(trace)
    tails = []
    for start, end in marks:
        last = max((t for t in launches if start <= t <= end), default=None)
        if last is None:
            continue
        after = collections.defaultdict(float)
        for name, k_start, dur in kernels:
            if k_start < end and k_start + dur > last:
                after[family(name)] += min(k_start + dur, end) - max(k_start, last)
        tails.append({"wait_us": end - last, "kernels_after_last_launch_us": dict(after)})
    return tails


def tails_summary(tails):
    """The median wait over runs and, per family, the mean µs it ran after the last launch."""
    if not tails:
        return None
    families = collections.defaultdict(float)
    for t in tails:
        for f, us in t["kernels_after_last_launch_us"].items():
            families[f] += us / len(tails)
    return {"wait_us_median": statistics.median(t["wait_us"] for t in tails), "runs": len(tails),
            "after_last_launch": sorted(([f, us] for f, us in families.items()), key=lambda r: -r[1])}


def timeline_summary(kernels, runs, wall_ms):
    """summary() of the traced kernels plus the GPU's busy time and span a run (first start to
    last end, over all runs) against the runs' mean wall time."""
    result = summary([(name, dur * 1e3) for name, _, dur in kernels], runs)
    span = (kernels[-1][1] + kernels[-1][2] - kernels[0][1]) if kernels else 0.0
    result.update(busy_us_per_run=busy_us(kernels) / runs, span_us_per_run=span / runs,
                  wall_ms_per_run=statistics.mean(wall_ms))
    return result


def summary(kernels, runs):
    """Per run: kernel count and GPU µs by family, largest first."""
    by_family = collections.defaultdict(lambda: [0, 0.0])
    for name, ns in kernels:
        entry = by_family[family(name)]
        entry[0] += 1
        entry[1] += ns
    rows = sorted(([f, n / runs, ns / runs / 1e3] for f, (n, ns) in by_family.items()), key=lambda r: -r[2])
    return {"kernels_per_run": len(kernels) / runs, "gpu_us_per_run": sum(ns for _, ns in kernels) / runs / 1e3,
            "by_family": rows}


def child(args):
    """Inside ncu: warm up unprofiled, time --iters runs unprofiled, then profile --runs runs."""
    from kernel_census import model_run, timed_runs
    run = model_run(args.what, args.model, args.past, args.new)
    times = timed_runs(run, args.warmup, args.iters)
    rt = cudart()
    rt.cudaDeviceSynchronize()
    rt.cudaProfilerStart()
    for _ in range(args.runs):
        run()
    rt.cudaDeviceSynchronize()
    rt.cudaProfilerStop()
    print("STEP " + json.dumps(step_times(times)), flush=True)


def timeline(args):
    """The runs through CUPTI (torch.profiler) in this process: every kernel's real start and end."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from kernel_census import model_run, timed_runs
    run = model_run(args.what, args.model, args.past, args.new)
    times = timed_runs(run, args.warmup, args.iters)
    torch.cuda.synchronize()
    walls = []
    # The host's side too (ProfilerActivity.CPU): each run as a user annotation, so that its end
    # can be set against its last launch call (run_tails).
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.runs):
            t0 = time.perf_counter()
            with record_function(RUN_MARK):
                run()
            walls.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        trace = json.loads(Path(path).read_text())
        kernels = parse_chrome_trace(trace)
        tails = tails_summary(run_tails(trace))
    if not kernels:
        print("kernel_times: the profiler recorded no kernel (CUPTI saw none of MLX's?)", flush=True)
        return 1
    result = dict(timeline_summary(kernels, args.runs, walls), what=args.what, model=args.model, runs=args.runs,
                  via="timeline", step=step_times(times), tail=tails)
    print(f"{args.what}: {result['kernels_per_run']:.0f} kernels a run, {result['gpu_us_per_run']:.0f} µs of kernel "
          f"time, GPU busy {result['busy_us_per_run']:.0f} µs of a {result['span_us_per_run']:.0f} µs span "
          f"(first kernel to last); traced runs {result['wall_ms_per_run']:.2f} ms wall, unprofiled "
          f"{result['step']['median_ms']:.2f} ms (CUPTI timeline)", flush=True)
    if tails:
        after = ", ".join(f"{f[:60]} {us:.0f}" for f, us in tails["after_last_launch"][:6])
        print(f"{args.what}: after its last launch a run waited {tails['wait_us_median']:.0f} µs (median of "
              f"{tails['runs']}) for: {after} (µs a run)", flush=True)
    else:
        print(f"{args.what}: no launch call in the trace: the wait after the last launch is unknown", flush=True)
    return report(result, args.json)


def step_times(times):
    """The unprofiled runs' median and minimum, ms."""
    return {"median_ms": statistics.median(times), "min_ms": min(times)}


def report(result, json_path):
    """Prints the families' table, writes `result` to json_path (if given); 0."""
    print("| kernel family | kernels a run | µs a run |\n| --- | ---: | ---: |")
    for f, n, us in result["by_family"][:25]:
        print(f"| {f[:90]} | {n:.0f} | {us:.1f} |")
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1))
    return 0


def parent(args):
    ncu = find_ncu()
    if not ncu:
        print("kernel_times: no ncu here (PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-compute)", flush=True)
        return 1
    cmd = [ncu, "--profile-from-start", "off", "--cache-control", "none", "--clock-control", "none",
           "--metrics", METRIC, "--csv", "--page", "raw", "--print-units", "base", sys.executable, __file__,
           args.what, "--child", "--runs", str(args.runs), "--warmup", str(args.warmup), "--iters",
           str(args.iters), "--past", str(args.past), "--new", str(args.new)] + (["--model", args.model] if args.model else [])
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    step = next((json.loads(line[5:]) for line in p.stdout.splitlines() if line.startswith("STEP ")), None)
    kernels = parse_ncu_csv(p.stdout)
    if not kernels:
        print(f"kernel_times: ncu gave no kernel times (rc {p.returncode})\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}",
              flush=True)
        return 1
    result = dict(summary(kernels, args.runs), what=args.what, model=args.model, runs=args.runs,
                  step=step, wall_s=time.perf_counter() - t0)
    print(f"{args.what}: {result['kernels_per_run']:.0f} kernels, {result['gpu_us_per_run']:.0f} µs of GPU time "
          f"a run (ncu, serialized); unprofiled run {step and round(step['median_ms'], 2)} ms", flush=True)
    return report(result, args.json)


DETAIL_SECTIONS = ["SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis", "WarpStateStats",
                   "SchedulerStats", "ComputeWorkloadAnalysis", "SourceCounters"]


def detail(args):
    """ncu's sections for the first --launch-count launches of the kernels matching --kernel."""
    ncu = find_ncu()
    if not ncu or not args.kernel:
        print("kernel_times: --via detail needs ncu and --kernel REGEX", flush=True)
        return 1
    sections = [a for name in DETAIL_SECTIONS for a in ("--section", name)]
    cmd = [ncu, "--profile-from-start", "off", "--kernel-name", f"regex:{args.kernel}", "--launch-count",
           str(args.launch_count)] + sections + [sys.executable, __file__, args.what, "--child", "--runs", "1",
                                                 "--warmup", str(args.warmup), "--iters", "2", "--past",
                                                 str(args.past), "--new", str(args.new)]
    cmd += ["--model", args.model] if args.model else []
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    report_text = "\n".join(line for line in p.stdout.splitlines() if not line.startswith("STEP "))
    print(report_text[-30000:], flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"what": args.what, "kernel": args.kernel, "rc": p.returncode,
                                               "report": report_text, "stderr": p.stderr[-4000:]}, indent=1))
    return 0 if p.returncode == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["bert", "llm"])
    ap.add_argument("--model", help="genai model directory (llm)")
    ap.add_argument("--past", type=int, default=1024)
    ap.add_argument("--new", type=int, default=1, help="tokens a run (llm; 512 with --past 0: a prefill)")
    ap.add_argument("--runs", type=int, default=2, help="profiled runs (the sums are per run)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20, help="unprofiled runs timed before the profile")
    ap.add_argument("--timeout", type=int, default=400)
    ap.add_argument("--json")
    ap.add_argument("--via", choices=["ncu", "timeline", "detail"], default="ncu",
                    help="ncu: each kernel's own time, serialized; timeline: CUPTI's real start and end; "
                         "detail: ncu's sections for the kernels matching --kernel")
    ap.add_argument("--kernel", help="regex of the kernel names --via detail profiles")
    ap.add_argument("--launch-count", type=int, default=2, help="launches --via detail profiles")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        sys.exit(child(args))
    sys.exit({"timeline": timeline, "detail": detail}.get(args.via, parent)(args))


if __name__ == "__main__":
    main()
