#!/usr/bin/env python3
"""Structured fuzzing of the MLX EP against ORT's CPU EP over the ONNX backend node tests.

Mutant i of seed s is a pure function of (s, i): a node test and a mutator (tools/fuzz/mutate.py)
drawn from numpy's generator seeded with [s, i], so a run is reproducible and one mutant can be
replayed (--only i). Each mutant runs in two persistent worker processes (worker.py), one on
ORT's CPU EP alone and one on the MLX EP + CPU EP, each under an address-space limit; a worker
that dies (crash) or exceeds --timeout (hang) is restarted and costs that mutant only.

Outcomes (MLX EP relative to the CPU EP):
  ok_equal     both ran, same dtypes, shapes and values (rtol 1e-3, 4e-3 for float16, atol 1e-5,
               NaN == NaN)
  both_error   both rejected the model or the run
  ep_stricter  the CPU EP ran it, the MLX EP returned an error
  ep_looser    the CPU EP returned an error, the MLX EP ran it
  different    both ran, the outputs differ
  crash        the MLX worker died (signal) -- never acceptable
  hang         the MLX worker exceeded the timeout -- never acceptable
  cpu_failed   the CPU worker itself died or hung (no reference; not counted against the EP)

The MLX worker gets max(--timeout, twice ORT's time) per mutant.

Stricter/looser/different outcomes are matched against allowlist.py (documented deliberate
differences, docs/reliability.md); the rest are "unexplained". Writes a JSON report and
prints a summary; exits 1 when a crash, hang or unexplained outcome occurred.

  .venv/bin/python tools/fuzz/fuzz_nodes.py --seed 1 --count 2000 --report build/reports/fuzz.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

import allowlist  # noqa: E402
import mutate  # noqa: E402
from node_tests import node_test_dir  # noqa: E402

BENIGN = {"ok_equal", "both_error", "cpu_failed"}


class Worker:
    """A worker.py process for one EP, restarted after a crash or a hang."""

    def __init__(self, ep: str, mem_gb: float, log_path: Path):
        self.ep, self.mem_gb, self.log_path = ep, mem_gb, log_path
        self.proc = None

    def _start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, str(HERE / "worker.py"), "--ep", self.ep, "--mem-gb",
                                      str(self.mem_gb)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, cwd=str(ROOT))
        log.close()

    def send(self, mutant_dir: str):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write((json.dumps({"dir": mutant_dir}) + "\n").encode())
        self.proc.stdin.flush()

    def receive(self, deadline: float) -> dict:
        """The answer, or {"crash": returncode} / {"hang": True} (the process is then gone)."""
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    return json.loads(line)
                rc = self.proc.wait()
                self.proc = None
                return {"crash": rc}
            if left <= 0:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                return {"hang": True}

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cases(data_dir: Path) -> list[Path]:
    return sorted(p for p in data_dir.iterdir() if (p / "model.onnx").exists())


def make_mutant(seed: int, index: int, case_dirs: list[Path], cache: dict):
    """(case name, mutator name, model, feeds) of mutant `index`."""
    rng = np.random.default_rng([seed, index])
    names = sorted(mutate.MUTATORS)
    for _ in range(50):
        case = case_dirs[rng.integers(len(case_dirs))]
        if case not in cache:
            try:
                cache[case] = mutate.load_case(case)
            except Exception:  # noqa: BLE001 - an unreadable test is skipped
                cache[case] = None
        if cache[case] is None:
            continue
        name = names[rng.integers(len(names))]
        got = mutate.MUTATORS[name](*cache[case], rng)
        if got is not None:
            return case.name, name, got[0], got[1]
    raise RuntimeError(f"no applicable mutation for mutant {index}")


def same_outputs(a: Path, b: Path) -> tuple[bool, str]:
    with np.load(a, allow_pickle=True) as x, np.load(b, allow_pickle=True) as y:
        if len(x.files) != len(y.files):
            return False, f"{len(x.files)} vs {len(y.files)} outputs"
        for k in x.files:
            p, q = x[k], y[k]
            if p.dtype != q.dtype or p.shape != q.shape:
                return False, f"output {k}: {p.dtype}{list(p.shape)} vs {q.dtype}{list(q.shape)}"
            if p.dtype.kind in "fc":
                rtol = 4e-3 if p.dtype == np.float16 else 1e-3  # a couple of float16 ulps
                if not np.allclose(p, q, rtol=rtol, atol=1e-5, equal_nan=True):
                    return False, f"output {k}: values differ"
            elif not np.array_equal(p, q):
                return False, f"output {k}: values differ"
    return True, ""


def clip(text: str) -> str:
    """Head and tail of an error: ORT puts the reason at the end of long messages."""
    return text if len(text) <= 700 else text[:200] + " [...] " + text[-500:]


def classify(cpu: dict, ep: dict, mutant_dir: Path) -> tuple[str, str]:
    if "crash" in ep and "crash" in cpu:
        return "cpu_failed", f"both workers died (ORT's own kernel: exit status {cpu['crash']})"
    if "crash" in ep:
        return "crash", f"MLX worker exit status {ep['crash']}"
    if "hang" in ep and "hang" in cpu:
        return "cpu_failed", "both workers timed out (a legitimately huge computation)"
    if "hang" in ep:
        return "hang", "MLX worker timed out"
    if "crash" in cpu or "hang" in cpu:
        return "cpu_failed", json.dumps(cpu)
    if cpu["ok"] and ep["ok"]:
        same, why = same_outputs(mutant_dir / "out_cpu.npz", mutant_dir / "out_mlx.npz")
        return ("ok_equal", "") if same else ("different", why)
    if not cpu["ok"] and not ep["ok"]:
        return "both_error", ""
    return ("ep_stricter", ep["error"]) if cpu["ok"] else ("ep_looser", cpu["error"])


def run(seed: int, indices, timeout: float, mem_gb: float, work: Path, data_dir: Path, log=print,
        keep: bool = False) -> list[dict]:
    case_dirs = cases(data_dir)
    cache: dict = {}
    cpu = Worker("cpu", mem_gb, work / "worker-cpu.log")
    ep = Worker("mlx", mem_gb, work / "worker-mlx.log")
    results = []
    try:
        for i in indices:
            case, mutator, model, feeds = make_mutant(seed, i, case_dirs, cache)
            d = work / f"m{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "model.onnx").write_bytes(model.SerializeToString())
            np.savez(d / "feeds.npz", **feeds)
            cpu.send(str(d))
            ep.send(str(d))
            started = time.monotonic()
            deadline = started + timeout
            c = cpu.receive(deadline)
            # The EP gets as long again as ORT took, at least `timeout`: MLX may be slower, not hung.
            e = ep.receive(max(deadline, time.monotonic() + (time.monotonic() - started)))
            outcome, detail = classify(c, e, d)
            r = {"index": i, "case": case, "mutator": mutator, "outcome": outcome, "detail": clip(detail),
                 "cpu_error": clip(c.get("error", "")), "ep_error": clip(e.get("error", "")),
                 "seconds": round(time.monotonic() - started, 2)}
            r["explained"] = outcome in BENIGN or allowlist.explain(r)
            results.append(r)
            if outcome not in BENIGN:
                log(f"  [{i}] {case} / {mutator}: {outcome} {'(allowed: ' + r['explained'] + ')' if r['explained'] else 'UNEXPLAINED'}"
                    f"\n      {detail[:300]}")
            if outcome in BENIGN and not keep:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        cpu.stop()
        ep.stop()
    return results


def summarize(results: list[dict]) -> dict:
    counts = collections.Counter(r["outcome"] for r in results)
    unexplained = [r for r in results if not r["explained"]]
    return {"mutants": len(results), "outcomes": dict(sorted(counts.items())),
            "by_mutator": {m: dict(collections.Counter(r["outcome"] for r in results if r["mutator"] == m))
                           for m in sorted({r["mutator"] for r in results})},
            "unexplained": len(unexplained),
            "allowed": dict(collections.Counter(r["explained"] for r in results
                                                if r["explained"] and r["outcome"] not in BENIGN))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--only", type=int, nargs="*", help="replay these mutant indices")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per mutant (both EPs)")
    ap.add_argument("--mem-gb", type=float, default=6.0, help="address-space limit of each worker (0: none, for ASan)")
    ap.add_argument("--report", type=Path, default=ROOT / "build" / "reports" / "fuzz.json")
    ap.add_argument("--keep", type=Path, help="keep mutants here (default: a temporary directory)")
    args = ap.parse_args(argv)
    data_dir, _ = node_test_dir(ROOT / "build")
    work = args.keep or Path(tempfile.mkdtemp(prefix="mlx_ep_fuzz_"))
    work.mkdir(parents=True, exist_ok=True)
    indices = args.only if args.only else range(args.start, args.start + args.count)
    t0 = time.monotonic()
    results = run(args.seed, indices, args.timeout, args.mem_gb, work, data_dir, keep=bool(args.keep))
    summary = summarize(results)
    summary.update(seed=args.seed, seconds=round(time.monotonic() - t0, 1))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps({"summary": summary, "results": results}, indent=1))
    print(json.dumps(summary, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    bad = summary["outcomes"].get("crash", 0) + summary["outcomes"].get("hang", 0) + summary["unexplained"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
