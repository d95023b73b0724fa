"""BERT-base on the GPU (issue 7): Hugging Face's BertModel (random weights, BERT-base shape:
12 layers, hidden 768, 12 heads, FFN 3072), exported by torch's TorchScript exporter, fp32 and fp16
(onnxruntime.transformers.float16.convert_float_to_float16, keep_io_types), batch x seq tokens.
Peers in one process, same weights and inputs: the MLX EP (plain run; IOBinding with its device
memory when it has some), ORT's CUDA EP (plain run; IOBinding on CUDA memory), PyTorch eager on
the GPU (inputs already there, one synchronise per run). Medians of interleaved runs, ms.

    python3 bench/bench_bert_gpu.py [--batch 8] [--seq 128] [--iters 30] [--layers 12] [--json FILE]

Needs torch, transformers and onnxruntime-gpu (the GPU machine's image; tools/gpu/device_run.sh
STEPS=bert). Every peer multiplies float32 in the same mode: TF32 off by default (the MLX EP's
`use_tf32=0`, ORT's CUDA EP's `use_tf32=0`, which is not its default, torch's allow_tf32 off);
`--tf32` (or MLX_ENABLE_TF32=1) turns it on for all three. MLX reads the mode once per process, so
each mode is a run of its own (`--precisions fp32 --tf32` for the second).
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
import onnxruntime_ep_mlx as mlx_ep  # noqa: E402
from bench_iobinding import bound_runner, mlx_value_maker  # noqa: E402
from timing import median_ms  # noqa: E402


def export_bert(path, layers, batch, seq):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=layers, attn_implementation="eager")).eval()

    class Outputs(torch.nn.Module):  # positional inputs, tuple outputs, as exporters want
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(0, 30000, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    with torch.no_grad():
        torch.onnx.export(Outputs(model), (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state", "pooler_output"], opset_version=17,
                          dynamic_axes={"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}},
                          dynamo=False)
    return model


def torch_runner(model, feeds, half):
    import torch

    m = model.cuda().half() if half else model.cuda().float()
    ids = torch.from_numpy(feeds["input_ids"]).cuda()
    mask = torch.from_numpy(feeds["attention_mask"]).cuda()

    def run():
        with torch.no_grad():
            m(input_ids=ids, attention_mask=mask)
        torch.cuda.synchronize()

    return run


def ort_session(path, ep, tf32):
    """A session on the MLX EP or ORT's CUDA EP, float32 products in TF32 or not (the provider
    option has the same name in both)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    options = {"use_tf32": "1" if tf32 else "0"}
    if ep == "mlx":
        mlx_ep.append_to_session_options(so, options)
        return ort.InferenceSession(str(path), so)
    return ort.InferenceSession(str(path), so, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"])


def bench_precision(path, model, feeds, half, iters, tf32):
    row = {"precision": "fp16" if half else "fp32", "tf32": tf32}
    mlx = ort_session(path, "mlx", tf32)
    cuda = ort_session(path, "cuda", tf32)
    ref = cuda.run(None, feeds)[0]
    got = mlx.run(None, feeds)[0]
    row["max_abs_diff_vs_cuda"] = float(np.max(np.abs(got.astype(np.float32) - ref.astype(np.float32))))
    row["partitions"] = len(mlx_ep.claim_report(str(path))["graphs"][0]["partitions"])
    fns = {"mlx_run": lambda: mlx.run(None, feeds), "cuda_run": lambda: cuda.run(None, feeds)}
    make, out_device = mlx_value_maker()
    keep = []  # the bound values must outlive the timed runs
    if mlx_ep.device_memory_info() is not None:
        run, vals = bound_runner(mlx, feeds, make, out_device)
        fns["mlx_iobinding"] = run
        keep.append(vals)
    run, vals = bound_runner(cuda, feeds, lambda x: ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0), ("cuda", 0))
    fns["cuda_iobinding"] = run
    keep.append(vals)
    fns["torch_eager"] = torch_runner(model, feeds, half)
    t0 = time.perf_counter()
    for name, ms in zip(fns, median_ms(list(fns.values()), warmup=3, iters=iters)):
        row[name] = ms
    row["bench_s"] = time.perf_counter() - t0
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--precisions", default="fp16,fp32", help="which of fp16, fp32 to run")
    p.add_argument("--tf32", action="store_true", help="every peer multiplies float32 in TF32")
    p.add_argument("--json")
    args = p.parse_args()
    import torch

    tf32 = args.tf32 or os.environ.get("MLX_ENABLE_TF32") == "1"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    mlx_ep.register_execution_provider_library()
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 30000, (args.batch, args.seq)).astype(np.int64),
             "attention_mask": np.ones((args.batch, args.seq), np.int64)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "bert_fp32.onnx"
        model = export_bert(fp32, args.layers, args.batch, args.seq)
        from onnxruntime.transformers.float16 import convert_float_to_float16

        fp16 = Path(tmp) / "bert_fp16.onnx"
        onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(fp16))
        wanted = args.precisions.split(",")
        for path, half in ((fp16, True), (fp32, False)):
            if ("fp16" if half else "fp32") not in wanted:
                continue
            row = bench_precision(path, model, feeds, half, args.iters, tf32)
            rows.append(row)
            print(json.dumps(row), flush=True)
    cols = ["mlx_run", "mlx_iobinding", "cuda_run", "cuda_iobinding", "torch_eager"]
    print(f"BERT-base ({args.layers} layers) batch {args.batch} x {args.seq}, TF32 {'on' if tf32 else 'off'} "
          f"for every peer, medians of {args.iters}, ms")
    print("| precision | partitions | " + " | ".join(cols) + " | CUDA iobinding / MLX best | torch / MLX best | max abs diff vs CUDA |")
    print("|---|---|" + "---|" * (len(cols) + 3))
    for r in rows:
        best = min(r[c] for c in ("mlx_run", "mlx_iobinding") if c in r)
        vals = " | ".join(f"{r[c]:.2f}" if c in r else "-" for c in cols)
        print(f"| {r['precision']} | {r['partitions']} | {vals} | {r['cuda_iobinding'] / best:.2f} | "
              f"{r['torch_eager'] / best:.2f} | {r['max_abs_diff_vs_cuda']:.1e} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
