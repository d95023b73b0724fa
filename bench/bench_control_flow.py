"""Data-dependent control flow on the MLX EP: what each way of running it costs.

If on a condition computed from runtime data (ReduceMean(x @ W0) > 0), three ways:

  split     - what the EP does by default: the condition is computed in one partition, read on the
              host by the If's partition, which is specialised on it (two partitions, two
              compiled functions at most)
  select    - both branches computed and the result chosen by Where(cond, then, else): one
              partition, no host read (not what the EP does; docs/control_flow.md says why)
  declined  - ORT's CPU If (ONNXRUNTIME_EP_MLX_DECLINE_OPS=If), each branch a partition of its own

Loop whose condition the body computes from runtime data (a while loop), two ways here:

  declined  - what the EP does: ORT's CPU Loop runs the body, whose nodes run as an MLX
              partition of their own, and reads the condition every iteration
  masked    - all M iterations unrolled into one function, a `running` flag freezing the
              carried values (Where) once the condition turns false: exact for carried values,
              not for scan outputs (their length is the real trip count)

(A third, the Loop claimed whole and its condition evaluated inside the EP after every iteration
in an eager partition, was measured at commit 63e338c of branch `loop` and reverted: see
docs/control_flow.md.)

Every variant is a model of its own (select and masked are the same computation written in plain
ONNX ops), run in its own process for `declined`; ORT's CPU EP runs each model as the reference.
Outputs are checked against ORT CPU. Medians of interleaved runs, over --rounds processes, of
wall time and of the process's CPU time (all threads: less disturbed by other processes' load).

    .venv/bin/python bench/bench_control_flow.py [--iters 30] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from timing import median_ms  # noqa: E402

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(0)


def vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, value):
    return onnx.numpy_helper.from_array(np.asarray(value), name)


def model_of(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "cf", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


# ---- If ---------------------------------------------------------------------------------------

def mlp(prefix, x, layers, width):
    """`layers` MatMul + Relu layers of width `width` on x: (nodes, output, initializers)."""
    nodes, inits, h = [], [], x
    for k in range(layers):
        w = f"{prefix}_w{k}"
        inits.append(init(w, (RNG.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)))
        nodes += [helper.make_node("MatMul", [h, w], [f"{prefix}_m{k}"]),
                  helper.make_node("Relu", [f"{prefix}_m{k}"], [f"{prefix}_h{k}"])]
        h = f"{prefix}_h{k}"
    return nodes, h, inits


def elementwise(prefix, x, op):
    return [helper.make_node(op, [x], [f"{prefix}_y"])], f"{prefix}_y", []


IF_CASES = {
    # name: (batch, width, then branch, else branch)
    "small": (8, 256, lambda: elementwise("t", "h", "Tanh"), lambda: elementwise("e", "h", "Sigmoid")),
    "large": (8, 256, lambda: mlp("t", "h", 4, 256), lambda: mlp("e", "h", 4, 256)),
    "large_or_skip": (8, 256, lambda: mlp("t", "h", 8, 256), lambda: elementwise("e", "h", "Identity")),
}


def if_model(case, select):
    batch, width, then_fn, else_fn = IF_CASES[case]
    RNG.bit_generator.state = np.random.default_rng(1).bit_generator.state
    w0 = init("w0", (RNG.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
    w1 = init("w1", (RNG.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
    pre = [helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("ReduceMean", ["h"], ["m"], keepdims=0),
           helper.make_node("Greater", ["m", "zero"], ["c"])]
    tn, ty, ti = then_fn()
    en, ey, ei = else_fn()
    post = [helper.make_node("MatMul", ["y", "w1"], ["z"])]
    if select:
        mid = tn + en + [helper.make_node("Where", ["c", ty, ey], ["y"])]
        inits = ti + ei
    else:
        then_g = helper.make_graph(tn, "then", [], [vi(ty, F32)], ti)
        else_g = helper.make_graph(en, "else", [], [vi(ey, F32)], ei)
        mid = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
        inits = []
    model = model_of(pre + mid + post, [vi("x", F32, [batch, width])], [vi("z", F32, None)],
                     [w0, w1, init("zero", np.float32(0))] + inits)
    # Alternating branches: x and -x give means of opposite signs.
    x = np.random.default_rng(2).standard_normal((batch, width)).astype(np.float32)
    return model, [{"x": x}, {"x": -x}]


# ---- Loop -------------------------------------------------------------------------------------

def converge_body(p, y, inits_out):
    """y' = tanh(y @ W + b); running = max|y' - y| > tol. A fixed-point iteration."""
    nodes = [helper.make_node("MatMul", [y, "lw"], [f"{p}mm"]), helper.make_node("Add", [f"{p}mm", "lb"], [f"{p}a"]),
             helper.make_node("Tanh", [f"{p}a"], [f"{p}y"]), helper.make_node("Sub", [f"{p}y", y], [f"{p}d"]),
             helper.make_node("Abs", [f"{p}d"], [f"{p}ad"]),
             helper.make_node("ReduceMax", [f"{p}ad"], [f"{p}mx"], keepdims=0),
             helper.make_node("Greater", [f"{p}mx", "tol"], [f"{p}c"])]
    return nodes, f"{p}y", f"{p}c"


LOOP_CASES = {
    # name: (batch, width, M, tol, layers of MatMul + Add + Tanh in front of the loop): the real
    # trip count depends on the data and tol
    "converge_8x64_M64": (8, 64, 64, 1e-3, 0),
    "converge_8x64_M16": (8, 64, 16, 1e-3, 0),
    "converge_8x256_M64": (8, 256, 64, 1e-3, 0),
    "converge_8x256_M64_after_8_layers": (8, 256, 64, 1e-3, 8),
}


def loop_model(case, masked):
    batch, width, trips, tol, layers = LOOP_CASES[case]
    r = np.random.default_rng(3)
    inits = [init("lw", (r.standard_normal((width, width)) * 0.5 / np.sqrt(width)).astype(np.float32)),
             init("lb", (r.standard_normal(width) * 0.1).astype(np.float32)),
             init("tol", np.float32(tol)), init("M", np.int64(trips)), init("cond", np.array(True))]
    if masked:
        nodes, y, run = [], "y0", "cond"
        for k in range(trips):
            body, y_new, c_new = converge_body(f"i{k}_", y, inits)
            nodes += body + [helper.make_node("Where", [run, y_new, y], [f"i{k}_ys"]),
                             helper.make_node("And", [run, c_new], [f"i{k}_run"])]
            y, run = f"i{k}_ys", f"i{k}_run"
        nodes.append(helper.make_node("Identity", [y], ["y_final"]))
    else:
        body, y_new, c_new = converge_body("b_", "y_in", inits)
        g = helper.make_graph(body + [helper.make_node("Identity", [c_new], ["cond_out"]),
                                      helper.make_node("Identity", [y_new], ["y_out"])], "body",
                              [vi("i", I64, []), vi("cond_in", BOOL, []), vi("y_in", F32, [batch, width])],
                              [vi("cond_out", BOOL, []), vi("y_out", F32, [batch, width])])
        nodes = [helper.make_node("Loop", ["M", "cond", "y0"], ["y_final"], body=g)]
    pre, x = [], "x"
    for k in range(layers):  # a network in front of the loop, computing its initial value
        inits += [init(f"pw{k}", (r.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)),
                  init(f"pb{k}", (r.standard_normal(width) * 0.1).astype(np.float32))]
        pre += [helper.make_node("MatMul", [x, f"pw{k}"], [f"p{k}m"]),
                helper.make_node("Add", [f"p{k}m", f"pb{k}"], [f"p{k}a"]),
                helper.make_node("Tanh", [f"p{k}a"], [f"p{k}"])]
        x = f"p{k}"
    pre.append(helper.make_node("Identity", [x], ["y0"]))
    model = model_of(pre + nodes, [vi("x", F32, [batch, width])], [vi("y_final", F32, None)], inits)
    y0 = np.random.default_rng(4).standard_normal((batch, width)).astype(np.float32)
    return model, [{"x": y0}, {"x": y0 * 0.5}]


def decode_model(vocab=512, hidden=128, max_len=48):
    """Greedy decoding: h = tanh(E[tok] @ Wx + h @ Wh), tok = argmax(h @ Wo) until tok == eos (134);
    the tokens are a scan output (their count is the real trip count: no masked form)."""
    r = np.random.default_rng(5)
    inits = [init("emb", r.standard_normal((vocab, hidden)).astype(np.float32)),
             init("wx", (r.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)),
             init("wh", (r.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)),
             init("wo", r.standard_normal((hidden, vocab)).astype(np.float32)), init("eos", np.array([134], np.int64)),
             init("M", np.int64(max_len)), init("cond", np.array(True))]
    nodes = [helper.make_node("Gather", ["emb", "tok_in"], ["e"]), helper.make_node("MatMul", ["e", "wx"], ["ex"]),
             helper.make_node("MatMul", ["h_in", "wh"], ["hh"]), helper.make_node("Add", ["ex", "hh"], ["pre"]),
             helper.make_node("Tanh", ["pre"], ["h_out"]), helper.make_node("MatMul", ["h_out", "wo"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
             helper.make_node("Equal", ["tok_out", "eos"], ["is_eos"]), helper.make_node("Not", ["is_eos"], ["going"]),
             helper.make_node("Squeeze", ["going"], ["cond_out"]), helper.make_node("Identity", ["tok_out"], ["tok_scan"])]
    g = helper.make_graph(nodes, "body", [vi("i", I64, []), vi("cond_in", BOOL, []), vi("tok_in", I64, [1]),
                                          vi("h_in", F32, [1, hidden])],
                          [vi("cond_out", BOOL, []), vi("tok_out", I64, [1]), vi("h_out", F32, [1, hidden]),
                           vi("tok_scan", I64, [1])])
    loop = helper.make_node("Loop", ["M", "cond", "tok0", "h0"], ["tok_last", "h_last", "tokens"], body=g)
    model = model_of([loop], [vi("tok0", I64, [1]), vi("h0", F32, [1, hidden])],
                     [vi("tokens", I64, None), vi("tok_last", I64, None), vi("h_last", F32, None)], inits)
    feeds = [{"tok0": np.array([t], np.int64), "h0": np.random.default_rng(t).standard_normal((1, hidden)).astype(np.float32)}
             for t in (1, 2, 3, 4)]
    return model, feeds


def real_trips(case):
    """Iterations the while loop really runs for each feed (ONNX's reference semantics)."""
    batch, width, trips, tol, layers = LOOP_CASES[case]
    model, feeds = loop_model(case, masked=False)
    m = onnx.load_from_string(model)
    w, b = (onnx.numpy_helper.to_array(t) for t in m.graph.initializer[:2])
    pre = [onnx.numpy_helper.to_array(t) for t in m.graph.initializer[5:]]
    counts = []
    for f in feeds:
        y, n = f["x"], 0
        for k in range(layers):
            y = np.tanh(y @ pre[2 * k] + pre[2 * k + 1])
        while n < trips:
            n += 1
            y2 = np.tanh(y @ w + b)
            done = np.max(np.abs(y2 - y)) <= tol
            y = y2
            if done:
                break
        counts.append(n)
    return counts


# ---- runs -------------------------------------------------------------------------------------

def variants(declined):
    """(name, model, feeds, on_mlx) per variant this process measures."""
    out = []
    for case in IF_CASES:
        model, feeds = if_model(case, select=False)
        if declined:
            out.append((f"if/{case}/declined", model, feeds, True))
        else:
            out.append((f"if/{case}/split", model, feeds, True))
            out.append((f"if/{case}/select", if_model(case, select=True)[0], feeds, True))
            out.append((f"if/{case}/ort_cpu", model, feeds, False))
    for case in LOOP_CASES:
        model, feeds = loop_model(case, masked=False)
        if declined:
            out.append((f"loop/{case}/declined", model, feeds, True))
        else:
            out.append((f"loop/{case}/masked", loop_model(case, masked=True)[0], feeds, True))
            out.append((f"loop/{case}/ort_cpu", model, feeds, False))
    model, feeds = decode_model()
    if declined:
        out.append(("loop/greedy_decode/declined", model, feeds, True))
    else:
        out.append(("loop/greedy_decode/ort_cpu", model, feeds, False))
    return out


def worker(declined, iters, only=""):
    import onnxruntime_ep_mlx as mlx_ep
    mlx_ep.register_execution_provider_library()
    results = {}
    sessions = []
    for name, model, feeds, on_mlx in variants(declined):
        if only not in name:
            continue
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if on_mlx:
            mlx_ep.append_to_session_options(so)
            sess = ort.InferenceSession(model, so)
        else:
            sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        diff = max(float(np.max(np.abs(sess.run(None, f)[0] - cpu.run(None, f)[0]))) for f in feeds)
        sessions.append((name, sess, feeds, diff))
    # Interleaved: every variant runs once per round. Wall time, and the process's CPU time (all
    # its threads), which load from other processes on the machine disturbs less.
    fns = [lambda s=sess, fs=feeds: [s.run(None, f) for f in fs] for _, sess, feeds, _ in sessions]
    wall, cpu = median_ms(fns, 3, iters), median_ms(fns, 0, iters, clock=time.process_time)
    for (name, _, feeds, diff), ms, cpu_ms in zip(sessions, wall, cpu):
        results[name] = {"ms": ms / len(feeds), "cpu_ms": cpu_ms / len(feeds), "max_abs_diff": diff}
    print(json.dumps(results))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", choices=["normal", "declined"])
    ap.add_argument("--only", default="", help="measure only the variants whose name contains this")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker == "declined", args.iters, args.only)
        return
    runs = {}
    for _ in range(args.rounds):
        for mode in ("normal", "declined"):
            env = dict(os.environ)
            if mode == "declined":
                env["ONNXRUNTIME_EP_MLX_DECLINE_OPS"] = "If,Loop"
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", mode, "--iters",
                                  str(args.iters), "--only", args.only], env=env, check=True, capture_output=True, text=True).stdout
            for name, r in json.loads(out.strip().splitlines()[-1]).items():
                runs.setdefault(name, []).append(r)
    print(f"medians over {args.rounds} processes of the median of {args.iters} interleaved runs; ms per run")
    for case in LOOP_CASES:
        print(f"loop/{case}: real trip counts {real_trips(case)} of M={LOOP_CASES[case][2]}")
    model, feeds = decode_model()
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    print(f"loop/greedy_decode: tokens per feed {[cpu.run(None, f)[0].shape[0] for f in feeds]} of M=48")
    for name, rs in runs.items():
        ms, cpu = [r["ms"] for r in rs], [r["cpu_ms"] for r in rs]
        print(f"{name:<40}{statistics.median(ms):>8.3f} ms wall (min {min(ms):.3f}, max {max(ms):.3f})"
              f"{statistics.median(cpu):>8.3f} ms CPU (min {min(cpu):.3f})"
              f"  max|diff| {max(r['max_abs_diff'] for r in rs):.1e}")


if __name__ == "__main__":
    main()
