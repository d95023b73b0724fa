"""Which CUDA kernels one run of a model through the MLX EP launches (issue 7: kernel counts per
step, as evidence of what MLX's CUDA backend fuses and what it does not).

MLX's CUDA backend records its kernels into CUDA graphs and, with MLX_SAVE_CUDA_GRAPHS_DOT_FILE
set, writes each graph it launches as DOT (cudaGraphDebugDotPrint). This script sets it, warms a
model up, runs it once more, and counts the kernel nodes of the graphs written during that last
run by kernel name (mangled names demangled with c++filt where the machine has it).

    python3 tools/gpu/kernel_census.py bert --out DIR           # BERT-base fp16 8x128
    python3 tools/gpu/kernel_census.py llm --model DIR --out DIR  # one decode step, past 1024
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def node_names(text):
    """DOT node id -> (kind, name) of one graph dump: "KERNEL" and the kernel's (mangled) name, or the
    node's kind (MEMCPY, MEMSET, ...) twice."""
    nodes = {}
    for node, attrs in re.findall(r'"(\w+_node_\d+)"\s*\[(.*?)\];?\s*$', text, flags=re.S | re.M):
        m = re.search(r'label="(.*?)"', attrs, flags=re.S)
        label = re.sub(r"^[\s{]*\d+\s*", "", m.group(1) if m else attrs)  # the node's number first
        words = [w for w in re.split(r"[\s|{}\\]+", label) if w]
        kind = "KERNEL" if re.search(r"kernel|_Z\w+|<<<", label, re.I) else (words[0] if words else "")
        name = kind
        if kind == "KERNEL":
            m = re.search(r"(_Z\w+)", label)
            name = m.group(1) if m else re.sub(r"\d+", "#", label)[:160]
        nodes[node] = (kind, name)
    return nodes


def demangled(names):
    """name -> its demangled form (cut to 160 characters) where c++filt is here, else itself."""
    names = list(names)
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return {n: (out[i][:160] if i < len(out) and out[i] else n) for i, n in enumerate(names)}


def census(dot_files):
    """kernel name -> count, plus node kinds, over the DOT files of one run."""
    kernels, kinds = collections.Counter(), collections.Counter()
    for f in dot_files:
        for kind, name in node_names(f.read_text()).values():
            kinds[kind] += 1
            if kind == "KERNEL":
                kernels[name] += 1
    names = demangled(kernels)
    return collections.Counter({names[n]: c for n, c in kernels.items()}), kinds


def neighbours(dot_files, pattern="copy_"):
    """(kernel before, the kernel, kernel after) -> count for the kernels whose demangled name holds
    `pattern`, by the graphs' edges: which launch a general copy sits between tells which
    primitive's evaluation made it (a copy of a non-contiguous input inside an eval_gpu is not a
    primitive of the EP's census)."""
    found = collections.Counter()
    for f in dot_files:
        text = f.read_text()
        nodes = node_names(text)
        names = demangled({name for _, name in nodes.values()})
        before, after = collections.defaultdict(list), collections.defaultdict(list)
        for a, b in re.findall(r'"(\w+_node_\d+)"\s*->\s*"(\w+_node_\d+)"', text):
            after[a].append(b)
            before[b].append(a)
        short = lambda node: names[nodes[node][1]][:80] if node in nodes else "-"  # noqa: E731
        for node, (_, name) in nodes.items():
            if pattern in names[name]:
                found[(",".join(sorted(map(short, before[node]))) or "(first)", names[name][:80],
                       ",".join(sorted(map(short, after[node]))) or "(last)")] += 1
    return found


def measure(name, run, out, dot_prefix):
    for _ in range(3):
        run()
    before = set(Path(dot_prefix).parent.glob(Path(dot_prefix).name + "_*.dot"))
    t0 = time.perf_counter()
    run()
    ms = (time.perf_counter() - t0) * 1e3
    files = sorted(set(Path(dot_prefix).parent.glob(Path(dot_prefix).name + "_*.dot")) - before)
    kernels, kinds = census(files)
    copies = neighbours(files)
    result = {"model": name, "run_ms_with_dot_dumps": ms, "graphs": len(files), "nodes": sum(kinds.values()),
              "node_kinds": dict(kinds), "kernels": sum(kernels.values()), "by_kernel": kernels.most_common(),
              "copies_between": [[*k, n] for k, n in copies.most_common()]}
    if files:
        shutil.copy(files[0], Path(out) / f"{name}_first_graph.dot")
    (Path(out) / f"census_{name}.json").write_text(json.dumps(result, indent=1))
    print(f"{name}: {len(files)} graphs, {result['nodes']} nodes {dict(kinds)}, {result['kernels']} kernels")
    for k, n in kernels.most_common(25):
        print(f"  {n:5d}  {k}")
    for (before, copy, after), n in copies.most_common(10):
        print(f"  copies: {n:4d}  {before} -> {copy} -> {after}")


def bert_run(tmp):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnxruntime.transformers.float16 import convert_float_to_float16

    sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "python")]
    import onnxruntime_ep_mlx as mlx_ep
    from bench_bert_gpu import export_bert
    from bench_iobinding import bound_runner, mlx_value_maker

    fp32, fp16 = Path(tmp) / "bert.onnx", Path(tmp) / "bert_fp16.onnx"
    export_bert(fp32, 12, 8, 128)
    onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(fp16))
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 30000, (8, 128)).astype(np.int64),
             "attention_mask": np.ones((8, 128), np.int64)}
    so = ort.SessionOptions()
    mlx_ep.append_to_session_options(so)
    sess = ort.InferenceSession(str(fp16), so)
    make, out_device = mlx_value_maker()
    run, _values = bound_runner(sess, feeds, make, out_device)
    run.keep = (sess, _values)
    return run


def llm_run(model_dir, past=1024, new=1):
    """One run of `new` tokens per call after `past` (a decode step; new > 1 with past 0: a prompt),
    for BENCH_BATCH rows (1 unless set)."""
    import numpy as np
    import onnxruntime as ort

    sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "python")]
    import onnxruntime_ep_mlx as mlx_ep
    from bench_llm_gpu import BoundDecoder, GenaiConfig

    cfg = GenaiConfig(Path(model_dir))
    so = ort.SessionOptions()
    mlx_ep.append_to_session_options(so)
    sess = ort.InferenceSession(cfg.path, so)
    memory = mlx_ep.device_memory_info()
    dtype = np.float16 if "float16" in sess.get_inputs()[2].type else np.float32
    # BENCH_INPUTS_ON_DEVICE=1 (an A/B of step_phases.py): ids, mask and positions made once in
    # the EP's memory, where the loop otherwise binds host arrays that ORT copies into the EP's
    # managed memory every run (does the step's one Sum, of the mask, pay the pages' migration?)
    make_input = None
    if os.environ.get("BENCH_INPUTS_ON_DEVICE") == "1":
        from bench_iobinding import mlx_value_maker
        make_input = mlx_value_maker()[0]
    batch = int(os.environ.get("BENCH_BATCH", "1"))  # BENCH_BATCH=8: eight rows a run
    dec = BoundDecoder(sess, cfg, batch, dtype,
                       lambda shape, dtype: ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, memory_info=memory),
                       mlx_ep.binding_device(), make_input)

    def run():
        dec.run(past, new)
    run.keep = (sess, dec)
    return run


def model_run(what, model_dir=None, past=1024, new=1):
    """bert_run or llm_run: one run of BERT-base fp16, or of `new` tokens after `past`."""
    return bert_run(tempfile.mkdtemp()) if what == "bert" else llm_run(model_dir, past, new)


def timed_runs(run, warmup, iters):
    """`warmup` runs, then the ms of each of `iters` more."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["bert", "llm"])
    ap.add_argument("--model", help="genai model directory (llm)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "dot", "graph")
        os.makedirs(os.path.dirname(prefix))
        os.environ["MLX_SAVE_CUDA_GRAPHS_DOT_FILE"] = prefix  # read once, at MLX's first graph
        run = bert_run(tmp) if args.what == "bert" else llm_run(args.model)
        measure(args.what, run, args.out, prefix)


if __name__ == "__main__":
    main()
