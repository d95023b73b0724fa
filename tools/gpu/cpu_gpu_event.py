"""Does a GPU stream that waits for MLX's CPU stream's asynchronous evaluation ever go on?

MLX's CUDA backend (no EP involved): an array evaluated with mx.async_eval on the CPU stream,
then read by a GPU op. MLX waits inside a kernel (event_wait_kernel spins on a flag) that
event_signal_kernel, launched on another stream once the CPU is done, raises. The EP hung
exactly there on the H200 (docs/reliability.md, "A GPU waiting for the CPU"). Each case runs in
a process of its own (a kernel's first launch is what CUDA's lazy loading delays), with CUDA's
default module loading and with CUDA_MODULE_LOADING=EAGER, and is given up after --timeout s.

    python tools/gpu/cpu_gpu_event.py [--timeout 40] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import time

CASES = {
    # The CPU's work is done at once: its signal is likely launched before the GPU's wait.
    "small": "a = mx.arange(16, dtype=mx.float32, stream=mx.cpu) * 2",
    # The CPU's work takes a while: the GPU's wait kernel spins before the signal is launched.
    "slow": "a = mx.sum(mx.matmul(mx.ones((1024, 1024), stream=mx.cpu), mx.ones((1024, 1024), stream=mx.cpu),"
            " stream=mx.cpu), axis=0, stream=mx.cpu)",
}

CHILD = """
import mlx.core as mx
{make}
mx.async_eval(a)
b = mx.add(a, 1, stream=mx.gpu)
mx.eval(b)
print("done", float(b.sum()))
"""


def start_case(name, loading):
    env = dict(os.environ)
    env.pop("CUDA_MODULE_LOADING", None)
    if loading:
        env["CUDA_MODULE_LOADING"] = loading
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(make=CASES[name])], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return {"case": name, "module_loading": loading or "default", "proc": proc}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=40.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    start = time.perf_counter()
    running = [start_case(n, l) for n in CASES for l in ("", "EAGER")]
    # All at once, each one's end noted as it comes (a hung case must not delay the others' times).
    while any(r["proc"].poll() is None for r in running) and time.perf_counter() - start < args.timeout:
        for r in running:
            if "seconds" not in r and r["proc"].poll() is not None:
                r["seconds"] = round(time.perf_counter() - start, 2)
        time.sleep(0.05)
    results = []
    for r in running:
        proc = r.pop("proc")
        hung = proc.poll() is None
        if hung:
            proc.kill()
        out = proc.communicate()[0]
        r.setdefault("seconds", round(time.perf_counter() - start, 2))
        if hung:
            r["verdict"] = f"hung (killed after {args.timeout:.0f} s)"
        else:
            r["verdict"] = "finished" if proc.returncode == 0 and "done" in out else f"failed (rc {proc.returncode})"
        r["output"] = out.strip()[-400:]
        results.append(r)
        print(f"{r['case']:6s} CUDA_MODULE_LOADING={r['module_loading']:8s} {r['verdict']}  {r['seconds']} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
