"""What a new prompt length costs: the first run at a length never seen before against a second
run at the same length, for the MLX EP and ORT's CPU EP in the same process. The EP traces and
compiles once per shape (docs/dynamic_shapes.md); ORT's CPU EP has no such step, so its two
columns are the same up to noise. `kernels` counts the kernels MLX's CPU backend built during the
first runs (its cache under TMPDIR; run with a fresh TMPDIR to see every one).

Models: the genai-layout int4 decoder of tests/models/llm/build_llm_models.py at Qwen2-0.5B's
shape (prefill through a shared KV buffer, as onnxruntime-genai runs it; --vocab shrinks the
vocabulary) and torch's dynamo export of GPT-2 (tests/models/torch, tiny, batch 2).

    .venv/bin/python bench/bench_prompt_lengths.py [--lengths 17,23,...] [--vocab 4096] [--cuda]

The genai rows run twice more with genai's own mask ([1, total], a first prompt), without and with
ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS (--buckets): one compiled prefill per power of two.
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "python"),
                os.path.join(ROOT, "tests", "models", "llm")]
import build_llm_models as llm  # noqa: E402
from bench_llm import sessions  # noqa: E402  (ORT CPU EP and MLX EP, as bench_llm times them)
from llm_client import Decoder  # noqa: E402


def kernels():
    tmp = os.environ.get("TMPDIR", "/tmp")
    return len(glob.glob(os.path.join(tmp, "mlx", "*", "cpu", "*.so")))


def genai_runner(sess, cfg, growing_mask=False):
    dec = Decoder(sess, cfg, np.float32, True, growing_mask=growing_mask)

    def run(n):
        dec.start()
        dec.step(list(np.random.default_rng(n).integers(0, cfg.vocab, n)))
    return run


def torch_runner(sess):
    def run(n):
        rng = np.random.default_rng(n)
        sess.run(None, {"input_ids": rng.integers(0, 96, (2, n)).astype(np.int64),
                        "attention_mask": np.ones((2, n), np.int64)})
    return run


def measure(run, lengths):
    first, again = [], []
    for n in lengths:
        t = time.perf_counter()
        run(n)
        first.append(1e3 * (time.perf_counter() - t))
        t = time.perf_counter()
        run(n)
        again.append(1e3 * (time.perf_counter() - t))
    return first, again


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="17,23,29,37,45,53,61,71,83,97")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--buckets", type=int, default=16, help="ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS of the last genai rows")
    ap.add_argument("--cuda", action="store_true", help="ORT's CUDA EP as a third peer (onnxruntime-gpu)")
    ap.add_argument("--json")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    dirs, cfg = llm.build(os.path.join(ROOT, "build", "models", "llm"), "qwen2-0.5b",
                          names=["genai_int4_b32_shared"], vocab=args.vocab)
    # The tiny GPT-2 export has 64 positions: its lengths are the given ones below 64.
    genai = os.path.join(dirs["genai_int4_b32_shared"], "model.onnx")
    models = {"genai_int4_b32_shared (Qwen2-0.5B shape)": (genai, lambda s: genai_runner(s, cfg), lengths),
              # genai's own mask ([1, total]: a first prompt), without and with prompt buckets
              "genai_int4_b32_shared, genai's mask": (genai, lambda s: genai_runner(s, cfg, True), lengths),
              f"genai_int4_b32_shared, genai's mask, buckets >= {args.buckets}":
                  (genai, lambda s: genai_runner(s, cfg, True), lengths),
              "gpt2_dynamo (tiny, batch 2)": (os.path.join(ROOT, "tests", "models", "torch", "gpt2_dynamo.onnx"),
                                              torch_runner, [n for n in lengths if n < 63])}
    rows = []
    print("| model | peer | first run at a new length, ms | second run, ms | new-length overhead, ms | kernels built |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for model, (path, runner, model_lengths) in models.items():
        if "buckets" in model:
            os.environ["ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS"] = str(args.buckets)  # read by the session
        for peer, sess in zip(("ORT CPU", "MLX EP", "ORT CUDA"), sessions(path, 0, args.cuda)):
            run = runner(sess)
            run(model_lengths[0] + 1)  # warm-up at a length not measured (the first kernels, the weights)
            k = kernels()
            first, again = measure(run, model_lengths)
            built = kernels() - k if peer == "MLX EP" else 0
            over = statistics.median(f - a for f, a in zip(first, again))
            row = {"model": model, "peer": peer, "first_ms": statistics.median(first),
                   "again_ms": statistics.median(again), "overhead_ms": over, "kernels": built}
            rows.append(row)
            print(f"| {model} | {peer} | {row['first_ms']:.1f} | {row['again_ms']:.1f} | {over:.1f} | {built} |",
                  flush=True)
        os.environ.pop("ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS", None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"lengths": {m: v[2] for m, v in models.items()}, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
