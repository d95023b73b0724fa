"""LLM prefill and decode through the MLX EP against ORT's CPU EP, in one run: the decoders of
tests/models/llm/build_llm_models.py at Qwen2-0.5B's shape (hidden 896, 24 layers, 14/2 heads,
intermediate 4864, vocab 151936; --vocab and --layers shrink it), random weights, batch 1.

Prefill: one run over N prompt tokens (tokens/s = N / median). Decode: one step of one token
after a past of P tokens (tokens/s = 1 / median): the concatenating models get a fixed past of P
random keys/values each run, the shared-buffer models a [1, kv, max_len, head] cache bound as
past and present with a static mask (P ones), so every timed run has the same shapes. Medians of
--iters interleaved runs (bench/timing.median_ms) after --warmup runs (the first MLX runs trace
and compile). Prints a markdown table; claimed/total says how much of the graph the EP ran.

    .venv/bin/python bench/bench_llm.py [--models standard_fp32,genai_int4_b32_shared] [--iters 3]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "python"),
                os.path.join(ROOT, "tests", "models", "llm")]
import build_llm_models as llm  # noqa: E402
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from llm_client import Decoder  # noqa: E402
from onnxruntime_ep_mlx.report import collect_report  # noqa: E402
from timing import median_ms  # noqa: E402

EP = mlx_ep.ep_name()


def sessions(path, threads, cuda):
    """ORT CPU EP, MLX EP (+ CPU for what it declines) and, with onnxruntime-gpu, ORT's CUDA EP."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    out = [ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    mlx_ep.append_to_session_options(so)
    out.append(ort.InferenceSession(path, so, enable_fallback=0))  # an EP failure must not time CPU
    assert EP in out[1].get_providers(), out[1].get_providers()
    if cuda:
        out.append(ort.InferenceSession(path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]))
    return out


def prefill_fn(sess, cfg, dtype, shared, standard, n, rng):
    dec = Decoder(sess, cfg, dtype, shared, position_ids=standard)
    prompt = rng.integers(0, cfg.vocab, n)

    def run():
        dec.start()
        dec.step(prompt)
    return run


def decode_fn(sess, cfg, dtype, shared, standard, past, rng):
    dec = Decoder(sess, cfg, dtype, shared, position_ids=standard)
    dec.start()
    if not shared:  # a fixed past of `past` random entries, fed every run
        dec.kv = {k: (0.5 * rng.standard_normal((1, cfg.kv_heads, past, cfg.head_size))).astype(dtype)
                  for k in dec.kv}
    token = [int(rng.integers(0, cfg.vocab))]

    def run():
        dec.length = past
        if not shared:
            kv = dec.kv
            dec.step(token)
            dec.kv = kv
        else:
            dec.step(token)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="standard_fp32,genai_int4_b32_shared",
                    help=f"comma-separated, of {', '.join(llm.variants('qwen2-0.5b'))}")
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary size (default Qwen2's 151936)")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default 24)")
    ap.add_argument("--prefill", default="128,512", help="prompt lengths (comma-separated; empty: none)")
    ap.add_argument("--past", default="128,1024", help="past lengths of the decode steps (empty: none)")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--block", type=int, default=1,
                    help="runs of one peer in a row per round, the first untimed (timing.median_ms; 1: interleaved)")
    ap.add_argument("--threads", type=int, default=0, help="ORT CPU EP intra-op threads (0: ORT's default)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "models", "llm"))
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    names = [m for m in args.models.split(",") if m]
    cfg = llm.SIZES["qwen2-0.5b"]
    size = "qwen2-0.5b"
    if args.layers:
        import dataclasses
        llm.SIZES[f"{size}-l{args.layers}"] = cfg = dataclasses.replace(cfg, layers=args.layers)
        size = f"{size}-l{args.layers}"
    t0 = time.perf_counter()
    dirs, cfg = llm.build(args.out, size, names=names, vocab=args.vocab)
    print(f"models ready in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    device = mlx_ep.get_ep_devices()[0].ep_metadata.get("mlx_device", "?")
    print(f"MLX device: {device}; onnxruntime {ort.__version__}; {os.cpu_count()} CPUs; hidden {cfg.hidden}, "
          f"{cfg.layers} layers, {cfg.heads}/{cfg.kv_heads} heads, intermediate {cfg.intermediate}, vocab {cfg.vocab}; "
          f"batch 1; median of {args.iters} runs after {args.warmup} warm-up runs"
          + (f", in blocks of {args.block} per peer (the first untimed)" if args.block > 1 else ", interleaved") + "\n")
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()  # onnxruntime-gpu: a third peer
    print("| model | phase | nodes claimed/total (partitions) | ORT CPU ms | MLX EP ms | CPU tok/s | MLX tok/s | CPU/MLX |"
          + (" ORT CUDA ms | CUDA/MLX |" if cuda else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if cuda else ""))
    rows = []
    rng = np.random.default_rng(0)
    for name in names:
        form, dtype, _, shared = llm.variants(size)[name]
        path = os.path.join(dirs[name], "model.onnx")
        graph = collect_report(path)["graphs"][0]
        claimed = f"{graph['nodes_claimed']}/{graph['nodes_total']} ({len(graph['partitions'])})"
        peers = sessions(path, args.threads, cuda)
        np_dtype = llm.NP_DTYPES[dtype]
        phases = [(f"prefill {n}", n, lambda s, n=n: prefill_fn(s, cfg, np_dtype, bool(shared), form == "standard", n, rng))
                  for n in map(int, filter(None, args.prefill.split(",")))]
        phases += [(f"decode @{p}", 1, lambda s, p=p: decode_fn(s, cfg, np_dtype, bool(shared), form == "standard", p, rng))
                   for p in map(int, filter(None, args.past.split(",")))]
        for phase, tokens, make in phases:
            cpu_ms, mlx_ms, *cuda_ms = median_ms([make(s) for s in peers], args.warmup, args.iters, block=args.block)
            row = dict(model=name, phase=phase, claimed=claimed, cpu_ms=cpu_ms, mlx_ms=mlx_ms,
                       cpu_tps=tokens / cpu_ms * 1e3, mlx_tps=tokens / mlx_ms * 1e3, ratio=cpu_ms / mlx_ms)
            if cuda_ms:
                row.update(cuda_ms=cuda_ms[0], cuda_ratio=cuda_ms[0] / mlx_ms)
            rows.append(row)
            print(f"| {name} | {phase} | {claimed} | {cpu_ms:.1f} | {mlx_ms:.1f} | {row['cpu_tps']:.1f} | "
                  f"{row['mlx_tps']:.1f} | {row['ratio']:.2f}x |"
                  + (f" {row['cuda_ms']:.1f} | {row['cuda_ratio']:.2f}x |" if cuda_ms else ""), flush=True)
        del peers
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mlx_device": device, "onnxruntime": ort.__version__, "config": str(cfg), "rows": rows},
                      f, indent=2)


if __name__ == "__main__":
    main()
