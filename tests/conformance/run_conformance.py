#!/usr/bin/env python3
"""Strict ONNX backend node-test conformance of the MLX execution provider.

For every ONNX backend node test (``onnx/backend/test/data/node/<test>``) this
runs the model twice:

* with the ORT CPU EP alone (reference: does ORT itself pass the test?);
* with MLXExecutionProvider + CPU fallback, with ORT profiling on, to learn
  which provider executed each node during one run.

and compares the outputs with the expected ones the way onnx's backend runner
does (``assert_allclose(rtol=1e-3, atol=1e-7)``, exact for integers, bools and
strings, NaN == NaN, dtype and shape must match).

Each test gets exactly one category:

  skipped          model has non-tensor inputs/outputs (sequence/optional/map)
  strict_pass      every executed node ran on MLX, outputs match
  partial_pass     some nodes ran on MLX, outputs match
  fallback_pass    no node ran on MLX, outputs match
  claimed_wrong    MLX ran >= 1 node, outputs wrong, CPU alone was right
  fallback_wrong   no node on MLX, outputs wrong, CPU alone was right
  mlx_error        MLX session creation/run raised, CPU alone did not
  mlx_crash        the worker process died during the MLX session
  cpu_crash        the worker process died during the CPU-only session
  timeout          the test exceeded --timeout seconds
  cpu_fails        CPU alone fails too (ORT limitation, not the EP's fault)

Node events of ORT-inserted MemcpyToHost/MemcpyFromHost copies are not model
nodes and are left out of the node counts.

The per-op key of a test is the op type of the first node of its model, prefixed
with the domain when that is not ai.onnx (e.g. ``ai.onnx.ml::LabelEncoder``).
Function-expanded tests (``*_expanded``, ``*_expanded_ver<N>``) use the op of
their unexpanded twin plus ``_expanded``, e.g. ``LayerNormalization_expanded``.

Some onnx wheels (1.23.2 for one) ship only the Python generators of the node
tests, not their data. When ``onnx/backend/test/data/node`` is missing, the tests are
generated once (numpy seeded) into ``build/onnx-node-tests/onnx-<version>/node``
in the same layout as onnx's ``cmd_tools generate-data``.

Tests run in ``--jobs`` worker processes (this script with ``--worker``) that
read test names on stdin and answer JSON lines, so an EP crash costs one test.
Their stderr (ORT and EP logs) goes to ``<out-dir>/conformance-worker-<i>.log``.
Results: ``<out-dir>/conformance.json`` and ``conformance.md`` (default out-dir
``build/reports``).

Exit status: 1 if ``mlx_claimed_wrong > 0`` or ``mlx_crash > 0`` or (full runs
only, i.e. without ``--filter``) ``mlx_strict_pass`` is below the floor.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import queue
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from node_tests import EP_NAME, load_data_sets, node_test_dir, op_key, run_cpu, run_mlx, tensor_only  # noqa: E402
PASS_CATEGORIES = ("strict_pass", "partial_pass", "fallback_pass")
FAIL_CATEGORIES = ("claimed_wrong", "fallback_wrong", "mlx_error", "mlx_crash", "cpu_crash", "timeout")
# category -> its counter in conformance.json
SUMMARY_KEYS = {
    "skipped": "skipped", "strict_pass": "mlx_strict_pass", "partial_pass": "mlx_partial_pass",
    "fallback_pass": "mlx_fallback_pass", "claimed_wrong": "mlx_claimed_wrong",
    "fallback_wrong": "mlx_fallback_wrong", "mlx_error": "mlx_error", "mlx_crash": "mlx_crash",
    "cpu_crash": "cpu_crash", "timeout": "timeout", "cpu_fails": "cpu_fails",
}


# --------------------------------------------------------------------------- worker side

def worker_main(args: argparse.Namespace) -> int:
    """Serve test names from stdin; answer JSON lines on the original stdout."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from native code must not corrupt the protocol

    def send(msg: dict) -> None:
        out.write(json.dumps(msg) + "\n")

    try:
        import onnx
        import onnxruntime as ort

        sys.path.insert(0, str(REPO / "python"))
        import onnxruntime_ep_mlx as ep

        ort.set_default_logger_severity(3)
        ep.register_execution_provider_library()
        if not ep.get_ep_devices():
            raise RuntimeError(f"{EP_NAME} registered but exposes no device")
    except Exception as exc:  # noqa: BLE001
        send({"fatal": f"{type(exc).__name__}: {exc}"})
        return 2
    send({"ready": True})

    data_dir = Path(args.data_dir)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        test_dir = data_dir / name
        model_path = str(test_dir / "model.onnx")
        try:
            model = onnx.load(model_path, load_external_data=False)
            if not tensor_only(model):
                send({"test": name, "stage": "done", "skipped": True})
                continue
            data_sets = load_data_sets(test_dir, model)
        except Exception as exc:  # noqa: BLE001 - unreadable test: both sides fail alike
            error = {"result": "error", "message": f"loading test data: {exc}"}
            send({"test": name, "stage": "cpu", "cpu": error})
            send({"test": name, "stage": "done", "mlx": error})
            continue
        send({"test": name, "stage": "cpu", "cpu": run_cpu(ort, model_path, data_sets)})
        mlx = run_mlx(ort, ep, model_path, data_sets, os.path.join(args.profile_dir, name))
        gc.collect()  # a session left over by a failure is released within its own test
        send({"test": name, "stage": "done", "mlx": mlx})
    return 0


# --------------------------------------------------------------------------- parent side

class Worker:
    """One ``--worker`` subprocess; restarted after a crash or a timeout."""

    def __init__(self, index: int, data_dir: Path, profile_dir: str, log_path: Path):
        self.index, self.data_dir, self.profile_dir, self.log_path = index, data_dir, profile_dir, log_path
        log_path.write_bytes(b"")  # one log per run; restarts append to it
        self.proc: subprocess.Popen | None = None
        self.buf = b""

    def _start(self) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
               "--data-dir", str(self.data_dir), "--profile-dir", self.profile_dir]
        env = dict(os.environ)
        # On a host of several GPUs (tools/gpu/device_session.sh), worker i uses GPU i mod N.
        if (gpus := int(os.environ.get("CONFORMANCE_GPUS", "0") or 0)) > 1:
            env["CUDA_VISIBLE_DEVICES"] = str(self.index % gpus)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)
        self.buf = b""
        hello = self._read_line(time.monotonic() + 120)
        if not hello or "ready" not in hello:
            self.stop()
            raise RuntimeError(f"worker {self.index} failed to start: {hello or 'no answer'} (log: {self.log_path})")

    def _read_line(self, deadline: float) -> dict | None:
        """Next JSON message; None on EOF; {'timeout': True} past the deadline."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return {"timeout": True}
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def _log_tail(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            tail = f.read()[-1500:]
        return tail.decode("utf-8", "replace").strip()

    def stop(self) -> int | None:
        """Kill the worker if still running; return its exit status (negative: signal)."""
        status = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            status = self.proc.wait()
        self.proc = None
        return status

    def run(self, name: str, timeout: float) -> dict:
        if self.proc is not None and self.proc.poll() is not None:
            self.stop()  # died after answering its previous test
        if self.proc is None:
            self._start()
        log_offset = self.log_path.stat().st_size
        start = time.monotonic()
        try:
            self.proc.stdin.write((name + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it just died: the read below sees EOF and records a crash
        result: dict = {"name": name}
        while True:
            msg = self._read_line(start + timeout)
            if msg is None or msg.get("timeout"):
                crashed = msg is None
                status = self.stop()
                stage = "mlx" if "cpu" in result else "cpu"
                if crashed:
                    result["crash"] = stage
                    result["message"] = f"exit status {status}; stderr tail: {self._log_tail(log_offset)}"
                else:
                    result["timeout"] = stage
                    result["message"] = f"no answer within {timeout:g}s ({stage} stage)"
                break
            result.update({k: v for k, v in msg.items() if k not in ("test", "stage")})
            if msg.get("stage") == "done":
                break
        result["seconds"] = round(time.monotonic() - start, 3)
        return result


def classify(r: dict) -> str:
    """Category of one test result (see module docstring)."""
    if r.get("skipped"):
        return "skipped"
    if "timeout" in r:
        return "timeout"
    if "crash" in r:
        return "mlx_crash" if r["crash"] == "mlx" else "cpu_crash"
    cpu, mlx = r["cpu"]["result"], r["mlx"]
    if mlx["result"] == "pass":
        if mlx["nodes_mlx"] == 0:
            return "fallback_pass"
        return "strict_pass" if mlx["nodes_mlx"] == mlx["nodes_total"] else "partial_pass"
    if mlx["result"] == "error":
        return "cpu_fails" if cpu == "error" else "mlx_error"
    if cpu != "pass":
        return "cpu_fails"
    return "claimed_wrong" if mlx["nodes_mlx"] > 0 else "fallback_wrong"


def _coverage(r: dict) -> str | None:
    mlx = r.get("mlx")
    if not mlx or "nodes_total" not in mlx or mlx["result"] == "error":
        return None
    if mlx["nodes_mlx"] == 0:
        return "none"
    return "all" if mlx["nodes_mlx"] == mlx["nodes_total"] else "some"


def summarize(results: list[dict], ops: dict[str, str], meta: dict) -> dict:
    tests, per_op = [], collections.defaultdict(collections.Counter)
    counts, declined = collections.Counter(), collections.Counter()
    for r in sorted(results, key=lambda r: r["name"]):
        cat = classify(r)
        counts[cat] += 1
        cpu_pass = r.get("cpu", {}).get("result") == "pass"
        counts["cpu_pass"] += cpu_pass
        op = ops[r["name"]]
        per_op[op]["tests"] += 1
        per_op[op][cat] += 1
        per_op[op]["cpu_pass"] += cpu_pass
        mlx = r.get("mlx", {})
        entry = {"name": r["name"], "op": op, "category": cat, "coverage": _coverage(r),
                 "cpu": r.get("cpu", {}).get("result"), "mlx": mlx.get("result"),
                 "nodes_mlx": mlx.get("nodes_mlx"), "nodes_total": mlx.get("nodes_total"),
                 "seconds": r.get("seconds")}
        if mlx.get("fallback_ops"):
            entry["fallback_ops"] = mlx["fallback_ops"]
        if mlx.get("declined"):
            entry["declined"] = mlx["declined"]
            declined.update(mlx["declined"])
        message = r.get("message") or mlx.get("message")
        if cat not in PASS_CATEGORIES and cat != "skipped" and message:
            entry["message"] = message
        if r.get("cpu", {}).get("message"):
            entry["cpu_message"] = r["cpu"]["message"]
        tests.append(entry)
    summary = dict(meta)
    summary.update({
        "tests_total": len(results),
        "cpu_pass": counts["cpu_pass"],
        **{key: counts[cat] for cat, key in SUMMARY_KEYS.items()},
        "per_op": {op: dict(c) for op, c in sorted(per_op.items())},
        "declined_reasons": dict(declined.most_common()),
        "tests": tests,
    })
    return summary


def write_markdown(s: dict, path: Path) -> None:
    keys = ["tests_total", "skipped", "cpu_pass", "mlx_strict_pass", "mlx_partial_pass", "mlx_fallback_pass",
            "mlx_claimed_wrong", "mlx_fallback_wrong", "mlx_error", "mlx_crash", "cpu_crash", "timeout",
            "cpu_fails"]
    lines = ["# MLX EP — ONNX node-test conformance", "",
             f"onnx {s['onnx_version']} ({s['data_source']} test data), onnxruntime {s['onnxruntime_version']}, "
             f"{s['jobs']} jobs, {s['elapsed_s']:.0f} s" + (f", filter `{s['filter']}`" if s["filter"] else ""),
             "", "| count | tests |", "|---|---:|"]
    lines += [f"| {k} | {s[k]} |" for k in keys]
    cols = ["tests", "cpu_pass", "strict_pass", "partial_pass", "fallback_pass", "claimed_wrong",
            "mlx_error", "mlx_crash", "timeout", "cpu_fails", "skipped"]
    lines += ["", "## Per op", "", "| op | " + " | ".join(cols) + " |", "|---" + "|---:" * len(cols) + "|"]
    for op, c in s["per_op"].items():
        lines.append(f"| {op} | " + " | ".join(str(c.get(k, 0)) for k in cols) + " |")
    if s["declined_reasons"]:
        lines += ["", "## Why the EP declined nodes (tests affected)", "", "| reason | tests |", "|---|---:|"]
        lines += [f"| {r} | {n} |" for r, n in list(s["declined_reasons"].items())[:40]]
    bad = [t for t in s["tests"] if t["category"] in FAIL_CATEGORIES]
    if bad:
        lines += ["", "## Failures", "", "| test | category | message |", "|---|---|---|"]
        for t in bad:
            msg = (t.get("message") or "").replace("|", "\\|").replace("\n", " ")[:200]
            lines.append(f"| {t['name']} | {t['category']} | {msg} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_floor(path: Path) -> int:
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            return int(line)
    return 0


def run_all(names: list[str], data_dir: Path, jobs: int, timeout: float, log_dir: Path,
            budget: float = 0.0) -> list[dict]:
    todo: queue.Queue[str] = queue.Queue()
    for n in names:
        todo.put(n)
    results: list[dict] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = time.monotonic()

    def slot(index: int, profile_dir: str) -> None:
        worker = Worker(index, data_dir, profile_dir, log_dir / f"conformance-worker-{index}.log")
        try:
            while not errors and not (budget and time.monotonic() - start > budget):
                try:
                    name = todo.get_nowait()
                except queue.Empty:
                    break
                r = worker.run(name, timeout)
                with lock:
                    results.append(r)
                    done = len(results)
                if done % 200 == 0 or done == len(names):
                    print(f"  [{done}/{len(names)}] {time.monotonic() - start:.0f}s", flush=True)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the caller
            errors.append(exc)
        finally:
            worker.stop()

    with tempfile.TemporaryDirectory(prefix="ep_mlx_conformance_") as tmp:
        threads = [threading.Thread(target=slot, args=(i, tmp)) for i in range(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 2), help="parallel workers")
    p.add_argument("--filter", default="", help="only tests whose name contains this substring")
    p.add_argument("--budget", type=float, default=0.0,
                   help="seconds after which no new test starts (0: none); the summary counts what ran")
    p.add_argument("--shard", default="", help="K/N: only every N-th test from the K-th (0-based; a run split over calls)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per test (CPU + MLX)")
    p.add_argument("--floor", type=Path, default=REPO / "tests" / "conformance" / "floor.txt",
                   help="file holding the minimum mlx_strict_pass (checked on full runs only)")
    p.add_argument("--out-dir", type=Path, default=REPO / "build" / "reports")
    p.add_argument("--data-dir", type=Path, help="directory of node test dirs (default: see docstring)")
    p.add_argument("--list-failures", action="store_true", help="print failing tests with messages")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--profile-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(args)

    import onnx
    import onnxruntime as ort

    sys.path.insert(0, str(REPO / "python"))
    import onnxruntime_ep_mlx as ep

    t0 = time.monotonic()
    try:
        lib = ep.library_path()
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.data_dir:
        data_dir, source = args.data_dir, "given"
    else:
        data_dir, source = node_test_dir(REPO / "build")
    names = sorted(d.name for d in data_dir.iterdir() if (d / "model.onnx").is_file() and args.filter in d.name)
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        names = names[k::n]
    if not names:
        print(f"no tests match {args.filter!r} in {data_dir}", file=sys.stderr)
        return 2
    ops = {n: op_key(data_dir / n) for n in names}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{len(names)} tests from {data_dir}, {args.jobs} jobs, library {lib}", flush=True)
    try:
        results = run_all(names, data_dir, max(1, args.jobs), args.timeout, args.out_dir, args.budget)
    except RuntimeError as exc:  # a worker could not start (e.g. the library does not load)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    meta = {"onnx_version": onnx.__version__, "onnxruntime_version": ort.__version__,
            "library": lib, "data_dir": str(data_dir), "data_source": source, "filter": args.filter, "shard": args.shard,
            "jobs": args.jobs, "elapsed_s": round(time.monotonic() - t0, 1)}
    s = summarize(results, ops, meta)
    (args.out_dir / "conformance.json").write_text(json.dumps(s, indent=1) + "\n", encoding="utf-8")
    write_markdown(s, args.out_dir / "conformance.md")

    floor = read_floor(args.floor) if args.floor.is_file() else 0
    print(f"tests {s['tests_total']} (skipped {s['skipped']}), cpu_pass {s['cpu_pass']}, "
          f"strict {s['mlx_strict_pass']}, partial {s['mlx_partial_pass']}, fallback {s['mlx_fallback_pass']}, "
          f"claimed_wrong {s['mlx_claimed_wrong']}, mlx_error {s['mlx_error']}, crash {s['mlx_crash']}, "
          f"timeout {s['timeout']}, cpu_fails {s['cpu_fails']} in {s['elapsed_s']:.0f}s "
          f"-> {args.out_dir / 'conformance.json'}")
    if args.list_failures:
        for t in s["tests"]:
            if t["category"] in FAIL_CATEGORIES:
                print(f"{t['category']:15} {t['name']}: {t.get('message', '')}")
    problems = []
    if s["mlx_claimed_wrong"]:
        problems.append(f"{s['mlx_claimed_wrong']} claimed_wrong")
    if s["mlx_crash"]:
        problems.append(f"{s['mlx_crash']} crashes")
    if len(results) < len(names):
        print(f"budget: {len(names) - len(results)} of {len(names)} tests not run")
    if not args.filter and not args.shard and len(results) == len(names) and s["mlx_strict_pass"] < floor:
        problems.append(f"strict_pass {s['mlx_strict_pass']} < floor {floor}")
    if problems:
        print("FAILED: " + ", ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
