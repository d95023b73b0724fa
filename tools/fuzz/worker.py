"""One fuzz worker: reads JSON lines {"dir": ...} on stdin, runs dir/model.onnx on dir/feeds.npz
with one configuration (--ep cpu: ORT's CPU EP alone; --ep mlx: MLX EP + CPU EP, no silent
fallback), writes the outputs to dir/out_<ep>.npz and answers {"ok": bool, "error": str} on
stdout. Runs under an address-space limit so absurd shapes fail instead of exhausting the host.
A crash or hang costs the driver this process, which it restarts."""
import argparse
import json
import os
import resource
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ep", choices=["cpu", "mlx"], required=True)
    ap.add_argument("--mem-gb", type=float, default=6.0)
    args = ap.parse_args()
    if args.mem_gb > 0:  # 0: no limit (under ASan, whose shadow memory needs terabytes of address space)
        limit = int(args.mem_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import onnxruntime as ort

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "python"))
    providers = ["CPUExecutionProvider"]
    if args.ep == "mlx":
        import onnxruntime_ep_mlx as mlx_ep

        mlx_ep.register_execution_provider_library()
        providers = [mlx_ep.ep_name(), "CPUExecutionProvider"]
    ort.set_default_logger_severity(4)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the pipe
    for line in sys.stdin:
        job = json.loads(line)
        d = job["dir"]
        try:
            so = ort.SessionOptions()
            so.log_severity_level = 4
            so.intra_op_num_threads = 1
            sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=providers,
                                        enable_fallback=0)
            sess.disable_fallback()
            with np.load(os.path.join(d, "feeds.npz")) as f:
                feeds = {k: f[k] for k in f.files}
            outs = sess.run(None, feeds)
            np.savez(os.path.join(d, f"out_{args.ep}.npz"), *[np.asarray(o) for o in outs])
            answer = {"ok": True, "error": ""}
        except Exception as e:  # noqa: BLE001 - every failure is an outcome
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
