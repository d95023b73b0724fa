"""A TinyLlama-1.1B-shaped Llama (22 layers, hidden 2048, GQA 32/4, intermediate 5632, vocab
32000) with random weights, built by onnxruntime-genai's model builder for CUDA (fp16, int4), on
the GPU machine (issue 7). Peers, on the same ONNX model and weights:

- `genai_cuda`: ORT's CUDA EP through onnxruntime-genai-cuda's generator, the issue's reference.
- `cuda_loop` / `mlx_loop`: ORT's CUDA EP and the MLX EP through one decode loop over plain ORT
  sessions that does what genai does with a past_present_share_buffer model: each layer's past
  and present bound (IOBinding) to one [B, kv_heads, max_length, head] buffer on the EP's device
  memory (for MLX: its allocator, docs/gpu_memory.md), logits bound on the device, the attention
  mask growing by one each step.
- `genai_mlx`: the MLX EP through onnxruntime-genai (registered as a plugin EP library; genai
  appends it as a CPU device, so the KV cache lives in host memory).
- `torch`: PyTorch eager (Hugging Face LlamaForCausalLM, fp16, DynamicCache) on the checkpoint.
- the floor: bytes of weights / the device-to-device copy bandwidth measured here.

Prefill: one run over --prefill prompt tokens from an empty cache. Decode: one step of one token
after --past tokens (the cache position is reset each run, so every timed run has the same
shapes). Medians of --iters runs after --warmup. Prints markdown tables; --json writes them.

    python3 bench/bench_llm_gpu.py make --work /tmp/llm     # checkpoint + builder (torch, genai)
    python3 bench/bench_llm_gpu.py bench --work /tmp/llm    # the peers
"""
import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

SHAPE = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, rms_norm_eps=1e-5,
             rope_theta=10000.0, tie_word_embeddings=False)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# --- make: checkpoint and builder -----------------------------------------------------------

def write_checkpoint(ckpt, layers):
    """A random-weight LlamaForCausalLM of SHAPE (fp16) and a word-level tokenizer of its
    vocabulary, which the builder reads for the special token ids."""
    import torch
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if (ckpt / "config.json").exists():
        return
    shape = dict(SHAPE, num_hidden_layers=layers or SHAPE["num_hidden_layers"])
    config = LlamaConfig(**shape, bos_token_id=1, eos_token_id=2, dtype="float16")
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.float16)
    model.save_pretrained(ckpt, safe_serialization=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"t{i}": i for i in range(3, shape["vocab_size"])})
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                  unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tok.save_pretrained(ckpt)


def run_builder(ckpt, out, precision, ep):
    if (out / "genai_config.json").exists():
        return
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
           "-p", precision, "-e", ep, "-c", str(out.parent / "cache")]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    log(f"builder {precision}/{ep}: {time.perf_counter() - t0:.0f} s")


def make(args):
    work = Path(args.work)
    ckpt = work / "checkpoint"
    t0 = time.perf_counter()
    write_checkpoint(ckpt, args.layers)
    log(f"checkpoint: {time.perf_counter() - t0:.0f} s")
    for p in args.precisions.split(","):
        run_builder(ckpt, work / p, p, args.ep)


# --- bench: the peers -----------------------------------------------------------------------

def median_ms(fn, warmup, iters, sync=None):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class GenaiConfig:
    def __init__(self, model_dir):
        c = json.loads((model_dir / "genai_config.json").read_text())["model"]
        d = c["decoder"]
        self.path = str(model_dir / d["filename"])
        self.layers, self.kv_heads, self.head = d["num_hidden_layers"], d["num_key_value_heads"], d["head_size"]
        self.max_len = c["context_length"]
        self.vocab = c["vocab_size"]
        self.share = c.get("search", {}).get("past_present_share_buffer", True)


class BoundDecoder:
    """What onnxruntime-genai does with a past_present_share_buffer model, over a plain ORT
    session: KV buffers on `kv_device` bound as both past and present, logits on the device."""

    def __init__(self, sess, cfg, batch, dtype, make_buffer, out_device, make_input=None):
        self.sess, self.cfg, self.batch = sess, cfg, batch
        # make_input(numpy) -> OrtValue: the small inputs as values made once a shape (in the EP's
        # memory, say), not host arrays ORT copies into the EP's memory every run
        self.make_input, self.inputs = make_input, {}
        names = {i.name for i in sess.get_inputs()}
        self.position_ids = "position_ids" in names
        shape = [batch, cfg.kv_heads, cfg.max_len, cfg.head]
        self.kv = {}
        for i in range(cfg.layers):
            for kv in ("key", "value"):
                self.kv[(f"past_key_values.{i}.{kv}", f"present.{i}.{kv}")] = make_buffer(shape, dtype)
        self.out_device = out_device

    def run(self, past, new):
        """One run of `new` tokens per row after `past` tokens."""
        total = past + new
        io = self.sess.io_binding()
        small = {"input_ids": lambda: np.full((self.batch, new), 7, np.int64),
                 "attention_mask": lambda: np.ones((self.batch, total), np.int64)}
        if self.position_ids:
            small["position_ids"] = lambda: np.tile(np.arange(past, total, dtype=np.int64), (self.batch, 1))
        for name, make in small.items():
            if self.make_input is None:
                io.bind_cpu_input(name, make())
                continue
            if (name, past, new) not in self.inputs:
                self.inputs[(name, past, new)] = self.make_input(make())
            io.bind_ortvalue_input(name, self.inputs[(name, past, new)])
        for (past_name, present_name), buf in self.kv.items():
            io.bind_ortvalue_input(past_name, buf)
            io.bind_ortvalue_output(present_name, buf)
        io.bind_output("logits", *self.out_device)
        self.sess.run_with_iobinding(io)


def loop_peer(name, cfg, args, results):
    """cuda_loop or mlx_loop over each batch size: prefill and decode through BoundDecoder."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if name == "mlx_loop":
        import onnxruntime_ep_mlx as mlx_ep

        mlx_ep.append_to_session_options(so)
        sess = ort.InferenceSession(cfg.path, so)
        memory = mlx_ep.device_memory_info()
        if memory is None:
            log("mlx_loop: the EP has no device memory (ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=1?): KV on the host")

            def make_buffer(shape, dtype):
                return ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype))
            out_device = ("cpu", 0)
        else:
            def make_buffer(shape, dtype):
                return ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, memory_info=memory)
            out_device = mlx_ep.binding_device()
        claimed = mlx_ep.claim_report(cfg.path)
        g = claimed["graphs"][0]
        results["claimed"] = f"{g['nodes_claimed']}/{g['nodes_total']} ({len(g['partitions'])} partitions)"
        log(f"mlx_loop: {results['claimed']}; declined: "
            f"{sorted({d['op_type'] for d in g.get('declined', [])})}")
    else:
        sess = ort.InferenceSession(cfg.path, so, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])

        def make_buffer(shape, dtype):
            return ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cuda", 0)
        out_device = ("cuda", 0)
    dtype = np.float16 if "float16" in sess.get_inputs()[2].type else np.float32
    for batch in args.batches:
        dec = BoundDecoder(sess, cfg, batch, dtype, make_buffer, out_device)
        t0 = time.perf_counter()
        dec.run(0, args.prefill)  # first run: MLX traces and compiles
        log(f"{name} b{batch}: first prefill run {time.perf_counter() - t0:.1f} s")
        results[f"prefill_b{batch}"] = median_ms(lambda: dec.run(0, args.prefill), args.warmup, args.iters)
        t0 = time.perf_counter()
        dec.run(args.past, 1)
        log(f"{name} b{batch}: first decode run {time.perf_counter() - t0:.1f} s")
        results[f"decode_b{batch}"] = median_ms(lambda: dec.run(args.past, 1), args.warmup, args.iters)
        log(f"{name} b{batch}: prefill {results[f'prefill_b{batch}']:.2f} ms, decode {results[f'decode_b{batch}']:.2f} ms")
        del dec
        gc.collect()
    del sess
    gc.collect()


_genai_registered = False


def genai_peer(name, model_dir, cfg, args, results):
    """genai_cuda / genai_mlx: prefill = append_tokens of the prompt; decode = one
    generate_next_token after --past tokens (a generator per timed prefill; one generator of
    --iters decode steps after a prompt of --past tokens)."""
    import onnxruntime_genai as og

    config = og.Config(str(model_dir))
    config.clear_providers()
    if name == "genai_mlx":
        import onnxruntime_ep_mlx as mlx_ep

        global _genai_registered
        if not _genai_registered:  # once per process
            og.register_execution_provider_library(mlx_ep.ep_name(), mlx_ep.library_path())
            _genai_registered = True
        config.append_provider(mlx_ep.ep_name())
    else:
        config.append_provider("cuda")
    model = og.Model(config)
    for batch in args.batches:
        def generator():
            params = og.GeneratorParams(model)
            params.set_search_options(max_length=cfg.max_len, do_sample=False, batch_size=batch)
            return og.Generator(model, params)

        prompt = np.full((batch, args.prefill), 7, np.int32)

        def prefill():
            g = generator()
            g.append_tokens(prompt)
            g.get_logits()  # the prefill's logits, as a client reads them
            del g
        t0 = time.perf_counter()
        prefill()
        log(f"{name} b{batch}: first prefill {time.perf_counter() - t0:.1f} s")
        results[f"prefill_b{batch}"] = median_ms(prefill, args.warmup, args.iters)
        g = generator()
        g.append_tokens(np.full((batch, args.past), 7, np.int32))
        g.generate_next_token()
        results[f"decode_b{batch}"] = median_ms(g.generate_next_token, args.warmup, args.iters)
        log(f"{name} b{batch}: prefill {results[f'prefill_b{batch}']:.2f} ms, decode {results[f'decode_b{batch}']:.2f} ms")
        del g
        gc.collect()
    del model
    gc.collect()


def torch_peer(ckpt, args, results):
    import torch
    from transformers import DynamicCache, LlamaForCausalLM

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = LlamaForCausalLM.from_pretrained(ckpt, dtype=torch.float16).to(dev).eval()
    sync = torch.cuda.synchronize if dev == "cuda" else None
    with torch.inference_mode():
        for batch in args.batches:
            prompt = torch.full((batch, args.prefill), 7, dtype=torch.long, device=dev)
            results[f"prefill_b{batch}"] = median_ms(lambda: model(prompt, use_cache=True), args.warmup,
                                                     args.iters, sync)
            cache = DynamicCache()
            model(torch.full((batch, args.past), 7, dtype=torch.long, device=dev), past_key_values=cache,
                  use_cache=True)
            token = torch.full((batch, 1), 7, dtype=torch.long, device=dev)

            def step():
                model(token, past_key_values=cache, use_cache=True)
                cache.crop(-1)  # back to --past tokens
            results[f"decode_b{batch}"] = median_ms(step, args.warmup, args.iters, sync)
            log(f"torch b{batch}: prefill {results[f'prefill_b{batch}']:.2f} ms, decode {results[f'decode_b{batch}']:.2f} ms")
            del cache
    del model
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()


def copy_bandwidth():
    """Device-to-device copy bandwidth (bytes read + written per second), through PyTorch."""
    import torch

    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = median_ms(lambda: b.copy_(a), 3, 10, torch.cuda.synchronize)
    del a, b
    torch.cuda.empty_cache()
    return 2 * (2 << 30) / (ms * 1e-3)


def weight_bytes(model_dir):
    return sum(f.stat().st_size for f in model_dir.iterdir() if f.name.endswith((".onnx", ".data")))


def bench(args):
    work = Path(args.work)
    peers = args.peers.split(",")
    out = {"args": vars(args), "models": {}}
    try:
        out["copy_bandwidth"] = copy_bandwidth()
        log(f"device-to-device copy: {out['copy_bandwidth'] / 1e12:.2f} TB/s")
    except Exception as e:  # no torch or no GPU
        log(f"copy bandwidth not measured: {e}")
    for p in args.precisions.split(","):
        model_dir = work / p
        if not (model_dir / "genai_config.json").exists():
            log(f"{p}: no model at {model_dir}")
            continue
        cfg = GenaiConfig(model_dir)
        res = out["models"][p] = {"weight_bytes": weight_bytes(model_dir)}
        for peer in peers:
            if peer == "torch" and p != "fp16":
                continue
            r = res[peer] = {}
            t0 = time.perf_counter()
            try:
                if peer in ("cuda_loop", "mlx_loop"):
                    loop_peer(peer, cfg, args, r)
                elif peer in ("genai_cuda", "genai_mlx"):
                    genai_peer(peer, model_dir, cfg, args, r)
                elif peer == "torch":
                    torch_peer(work / "checkpoint", args, r)
            except Exception as e:  # report and go on with the other peers
                r["error"] = f"{type(e).__name__}: {e}"[:500]
                log(f"{p} {peer}: {r['error']}")
            log(f"{p} {peer}: {time.perf_counter() - t0:.0f} s")
            if args.json:
                Path(args.json).write_text(json.dumps(out, indent=1))
    print_tables(out, peers, args.batches)


def print_tables(out, peers, batches):
    bw = out.get("copy_bandwidth")
    for p, res in out["models"].items():
        print(f"\n{p}: weights {res['weight_bytes'] / 1e9:.2f} GB"
              + (f", floor {res['weight_bytes'] / bw * 1e3:.2f} ms/token at {bw / 1e12:.2f} TB/s" if bw else ""))
        print("| peer | " + " | ".join(f"prefill b{b} ms | decode b{b} ms/token" for b in batches) + " |")
        print("|---|" + "---|---|" * len(batches))
        for peer in peers:
            r = res.get(peer)
            if r is None:
                continue
            if "error" in r:
                print(f"| {peer} | error: {r['error'][:120]} |")
                continue
            cells = [f"{r.get(f'prefill_b{b}', float('nan')):.2f} | {r.get(f'decode_b{b}', float('nan')):.2f}"
                     for b in batches]
            print(f"| {peer} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["make", "bench"])
    ap.add_argument("--work", default="/tmp/llm-gpu")
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default 22; fewer to try it)")
    ap.add_argument("--precisions", default="fp16,int4")
    ap.add_argument("--ep", default="cuda", help="the builder's target EP")
    ap.add_argument("--peers", default="genai_cuda,cuda_loop,mlx_loop,torch,genai_mlx")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--past", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    args.batches = [int(b) for b in args.batch.split(",")]
    make(args) if args.stage == "make" else bench(args)


if __name__ == "__main__":
    main()
