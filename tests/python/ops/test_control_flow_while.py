"""Parity tests of while loops: a Loop whose condition the body computes from carried state or
runtime data is declined (docs/control_flow.md measures why: evaluating the condition per
iteration inside the EP was no faster than ORT's CPU Loop driving the body as an MLX partition),
and runs as ORT's CPU Loop with the body's nodes on MLX. Each test checks the outputs (and their
shapes) against ORT's CPU EP, the reason in the claim report, and from ORT's profile that
everything but the declined control-flow nodes ran on MLX."""

import numpy as np
import pytest
from onnx import helper

import onnxruntime_ep_mlx as mlx_ep
from harness import EP, assert_close, mlx_session, profiled_node_events, run_cpu, run_mlx_with_report
from test_control_flow import BOOL, F32, I64, body, const, graph_model, vi


# ORT's own transfer nodes: where the EP has device memory (MLX on a GPU), ORT copies a value
# between MLX and a CPU node through them. They are no node of the model.
TRANSFERS = ("MemcpyToHost", "MemcpyFromHost")


def profiled_run(model, feeds):
    """One MLX run's node events from ORT's profile, as (event name, op type, provider)."""
    sess = mlx_session(model, profile=True)
    sess.run(None, feeds)
    return profiled_node_events(sess)


def declined_loop(model, feeds_list, cpu_nodes=1):
    """Every feed through one session: outputs match CPU (shapes too) and the Loop is declined as
    a data-dependent loop; in a run of the last feed only `cpu_nodes` nodes (the Loop, an If
    holding it) ran on CPU, every other node event (the body's, each iteration) on MLX, besides
    ORT's transfers (TRANSFERS, only where the EP has device memory) of values between the two."""
    outs, report, _ = run_mlx_with_report(model, feeds_list)
    declined = [d for g in report["graphs"] for d in g["declined"] if d["op_type"] == "Loop"]
    assert declined and "data-dependent" in declined[0]["reason"], report["graphs"]
    for f, got in zip(feeds_list, outs):
        for g, r in zip(got, run_cpu(model, f)):
            assert g.shape == r.shape, (g.shape, r.shape)
            assert_close(g, r)
    events = profiled_run(model, feeds_list[-1])  # one run: the profile's events are its own
    transfers = [e for e in events if e[1] in TRANSFERS]
    assert not transfers or mlx_ep.device_memory_info() is not None, events
    assert all(provider == "CPUExecutionProvider" for _, _, provider in transfers), events
    nodes = [(name, provider) for name, op, provider in events if op not in TRANSFERS]
    off = [name for name, provider in nodes if provider != EP]
    assert len(off) == cpu_nodes and len(nodes) > cpu_nodes, events
    return report


def converge_body(with_scan=True):
    """y = tanh(y @ w + b) while max|y_new - y| > tol; scan output: the step size per iteration."""
    nodes = [helper.make_node("MatMul", ["y_in", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["a"]),
             helper.make_node("Tanh", ["a"], ["y_out"]), helper.make_node("Sub", ["y_out", "y_in"], ["d"]),
             helper.make_node("Abs", ["d"], ["ad"]), helper.make_node("ReduceMax", ["ad"], ["step"], keepdims=0),
             helper.make_node("Greater", ["step", "tol"], ["cond_out"])]
    outputs = [vi("cond_out", BOOL, []), vi("y_out", F32, [2, 5])] + ([vi("step", F32, [])] if with_scan else [])
    return body(nodes, outputs, [vi("i", I64, []), vi("cond_in", BOOL, []), vi("y_in", F32, [2, 5])])


def converge_model(m=None, cond=None, with_scan=True, tol=1e-3):
    """Loop(M, cond, y0) over converge_body; M and cond: None (absent), a number (constant) or
    "input" (a graph input)."""
    rng = np.random.default_rng(0)
    inits = [("w", (rng.standard_normal((5, 5)) * 0.2).astype(np.float32)),
             ("b", (rng.standard_normal(5) * 0.1).astype(np.float32)), ("tol", np.float32(tol))]
    inputs = [vi("y0", F32, [2, 5])]
    names = []
    for name, value, elem in (("M", m, I64), ("cond", cond, BOOL)):
        if value is None:
            names.append("")
        elif value == "input":
            inputs.append(vi(name, elem, []))
            names.append(name)
        else:
            inits.append((name, np.array(value, np.int64 if elem == I64 else np.bool_)))
            names.append(name)
    outputs = ["y_final"] + (["steps"] if with_scan else [])
    loop = helper.make_node("Loop", names + ["y0"], outputs, body=converge_body(with_scan))
    return graph_model([loop], inputs, [vi(n, F32, None) for n in outputs], inits)


def y0(seed=0, scale=1.0):
    return {"y0": (np.random.default_rng(seed).standard_normal((2, 5)) * scale).astype(np.float32)}


def trips(model, feeds):
    """Iterations ORT's CPU EP ran (the length of the scan output)."""
    return run_cpu(model, feeds)[1].shape[0]


@pytest.mark.parametrize("m", [64, 3], ids=["exits-early", "runs-to-M"])
def test_while_loop_with_scan_output(m):
    model = converge_model(m=m, cond=True)
    feeds = [y0(0), y0(1, 3.0)]
    assert trips(model, feeds[0]) == 3 if m == 3 else 3 < trips(model, feeds[0]) < 64
    declined_loop(model, feeds)


def test_while_loop_unbounded():
    # M absent: only the condition ends the loop.
    declined_loop(converge_model(m=None, cond=True), [y0(2)])


def test_while_loop_condition_never_false_runs_to_m():
    # tol < 0: max|step| > tol always holds.
    model = converge_model(m=7, cond=True, tol=-1.0)
    assert trips(model, y0()) == 7
    declined_loop(model, [y0()])


@pytest.mark.parametrize("with_scan", [True, False], ids=["scan", "state-only"])
def test_while_loop_false_at_entry_and_zero_trips(with_scan):
    # The initial condition false, or M = 0: carried values pass through, scan outputs are empty.
    model = converge_model(m="input", cond="input", with_scan=with_scan)
    runs = [dict(y0(), M=np.array(m, np.int64), cond=np.array(c)) for m, c in ((10, False), (0, True), (10, True))]
    declined_loop(model, runs)


def test_while_loop_condition_from_data_before_it():
    # The initial condition is computed from y0 in front of the Loop (on MLX).
    model = converge_model(m=50, cond=None)
    loop = model.graph.node[0]
    loop.input[1] = "c0"
    model.graph.node.insert(0, helper.make_node("ReduceSum", ["y0"], ["s"], keepdims=0))
    model.graph.node.insert(1, helper.make_node("Greater", ["s", "tol"], ["c0"]))
    feeds = [y0(0), {"y0": -np.abs(y0(0)["y0"])}]  # true, then false at entry
    declined_loop(model, feeds)


def test_counter_loop_from_an_input():
    # k = k + 1 while k < 3 from k0, a graph input: the condition is data-dependent.
    b = body([const("one", np.int64(1)), const("three", np.int64(3)), helper.make_node("Add", ["k_in", "one"], ["k"]),
              helper.make_node("Less", ["k", "three"], ["cond_out"]), helper.make_node("Add", ["y_in", "x"], ["y"])],
             [vi("cond_out", BOOL, []), vi("k", I64, []), vi("y", F32)],
             [vi("i", I64, []), vi("cond_in", BOOL, []), vi("k_in", I64, []), vi("y_in", F32)])
    loop = helper.make_node("Loop", ["", "cond", "k0", "y0"], ["k_final", "y_final"], body=b)
    model = graph_model([loop], [vi("x", F32, [2, 3]), vi("y0", F32, [2, 3]), vi("k0", I64, [])],
                        [vi("k_final", I64, None), vi("y_final", F32, None)], [("cond", np.array(True))])
    rng = np.random.default_rng(0)
    f = {"x": rng.standard_normal((2, 3)).astype(np.float32), "y0": rng.standard_normal((2, 3)).astype(np.float32)}
    declined_loop(model, [dict(f, k0=np.array(k, np.int64)) for k in (0, 2, 5)])


def test_counter_loop_from_a_constant():
    # k < 50 from a constant k0 would fold, but ORT asks about the body before the Loop, when
    # whether k0 is a constant cannot be read (docs/control_flow.md).
    b = body([const("one", np.int64(1)), const("limit", np.int64(50)), helper.make_node("Add", ["k_in", "one"], ["k"]),
              helper.make_node("Less", ["k", "limit"], ["cond_out"]), helper.make_node("Add", ["y_in", "x"], ["y"])],
             [vi("cond_out", BOOL, []), vi("k", I64, []), vi("y", F32)],
             [vi("i", I64, []), vi("cond_in", BOOL, []), vi("k_in", I64, []), vi("y_in", F32)])
    loop = helper.make_node("Loop", ["", "", "k0", "y0"], ["k_final", "y_final"], body=b)
    model = graph_model([loop], [vi("x", F32, [3]), vi("y0", F32, [3])],
                        [vi("k_final", I64, None), vi("y_final", F32, None)], [("k0", np.array(0, np.int64))])
    f = {"x": np.array([1, 0.5, -2], np.float32), "y0": np.zeros(3, np.float32)}
    assert run_cpu(model, f)[0] == 50
    declined_loop(model, [f])


def greedy_decode_model(max_len, eos):
    """Greedy decoding: h = tanh(E[tok] @ wx + h @ wh); tok = argmax(h @ wo) until tok == eos;
    the tokens are a scan output, so their count is the real trip count."""
    rng = np.random.default_rng(3)
    vocab, hidden = 11, 8
    inits = [("emb", rng.standard_normal((vocab, hidden)).astype(np.float32)),
             ("wx", rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.5),
             ("wh", rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.5),
             ("wo", rng.standard_normal((hidden, vocab)).astype(np.float32)), ("eos", np.array([eos], np.int64)),
             ("M", np.array(max_len, np.int64)), ("cond", np.array(True))]
    b = body([helper.make_node("Gather", ["emb", "tok_in"], ["e"]), helper.make_node("MatMul", ["e", "wx"], ["ex"]),
              helper.make_node("MatMul", ["h_in", "wh"], ["hh"]), helper.make_node("Add", ["ex", "hh"], ["pre"]),
              helper.make_node("Tanh", ["pre"], ["h_out"]), helper.make_node("MatMul", ["h_out", "wo"], ["logits"]),
              helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
              helper.make_node("Equal", ["tok_out", "eos"], ["is_eos"]),
              helper.make_node("Not", ["is_eos"], ["going"]),
              helper.make_node("Squeeze", ["going"], ["cond_out"]), helper.make_node("Identity", ["tok_out"], ["tok_scan"])],
             [vi("cond_out", BOOL, []), vi("tok_out", I64, [1]), vi("h_out", F32, [1, hidden]), vi("tok_scan", I64, [1])],
             [vi("i", I64, []), vi("cond_in", BOOL, []), vi("tok_in", I64, [1]), vi("h_in", F32, [1, hidden])])
    loop = helper.make_node("Loop", ["M", "cond", "tok0", "h0"], ["tok_last", "h_last", "tokens"], body=b)
    return graph_model([loop], [vi("tok0", I64, [1]), vi("h0", F32, [1, hidden])],
                       [vi("tok_last", I64, None), vi("h_last", F32, None), vi("tokens", I64, None)], inits)


def test_greedy_decode_loop():
    model = greedy_decode_model(max_len=30, eos=0)
    runs = [{"tok0": np.array([t], np.int64), "h0": np.random.default_rng(t).standard_normal((1, 8)).astype(np.float32)}
            for t in range(6)]
    lengths = {run_cpu(model, f)[2].shape[0] for f in runs}
    assert len(lengths) > 2 and 30 in lengths, lengths  # data-dependent lengths, and max_len
    declined_loop(model, runs)


def test_while_loop_state_that_grows():
    # A carried value whose shape changes every iteration (Concat), until its sum passes a bound.
    b = body([helper.make_node("Concat", ["acc_in", "x"], ["acc_out"], axis=0),
              helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
              helper.make_node("Less", ["s", "limit"], ["cond_out"])],
             [vi("cond_out", BOOL, []), vi("acc_out", F32, ["n"])],
             [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F32, ["n"])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=b)
    model = graph_model([loop], [vi("x", F32, [2]), vi("acc0", F32, [1]), vi("limit", F32, [])],
                        [vi("acc", F32, None)], [("M", np.array(100, np.int64))])
    runs = [{"x": np.array([0.5, 1.0], np.float32), "acc0": np.zeros(1, np.float32), "limit": np.array(l, np.float32)}
            for l in (4.0, 10.0)]
    declined_loop(model, runs)


def test_nested_while_loops_and_if():
    # An If on a graph input holding a while loop whose body holds a for loop (constant M = 2).
    inner = body([helper.make_node("Mul", ["v_in", "half"], ["v_out"]),
                  helper.make_node("Identity", ["cin"], ["cout"])],
                 [vi("cout", BOOL, []), vi("v_out", F32, [2, 5])],
                 [vi("j", I64, []), vi("cin", BOOL, []), vi("v_in", F32, [2, 5])], name="inner")
    outer = converge_body(with_scan=True)
    outer.node.insert(0, helper.make_node("Loop", ["two", "", "y_in"], ["y_half"], body=inner))
    outer.node[1].input[0] = "y_half"  # MatMul(y_half, w)
    then_g = body([helper.make_node("Loop", ["M", "", "y0"], ["y_final", "steps"], body=outer)],
                  [vi("y_final", F32), vi("steps", F32)], name="then")
    else_g = body([helper.make_node("Neg", ["y0"], ["ny"]), helper.make_node("Identity", ["empty"], ["none"])],
                  [vi("ny", F32), vi("none", F32)], name="else")
    rng = np.random.default_rng(0)
    inits = [("w", (rng.standard_normal((5, 5)) * 0.2).astype(np.float32)), ("b", np.zeros(5, np.float32)),
             ("tol", np.float32(1e-3)), ("M", np.array(40, np.int64)), ("two", np.array(2, np.int64)),
             ("half", np.float32(0.9)), ("empty", np.zeros(0, np.float32))]
    node = helper.make_node("If", ["run"], ["y", "steps"], then_branch=then_g, else_branch=else_g)
    model = graph_model([node], [vi("y0", F32, [2, 5]), vi("run", BOOL, [])],
                        [vi("y", F32, None), vi("steps", F32, None)], inits)
    declined_loop(model, [dict(y0(), run=np.array(False)), dict(y0(), run=np.array(True))], cpu_nodes=2)


def test_while_loop_reading_carried_state_on_the_host():
    # Slice starts = a carried counter: a host read of a value that changes every iteration.
    b = body([const("one", np.int64(1)), helper.make_node("Add", ["k_in", "one"], ["k"]),
              helper.make_node("Slice", ["x", "k_in", "k"], ["piece"]),
              helper.make_node("ReduceSum", ["piece"], ["s"], keepdims=0),
              helper.make_node("Greater", ["s", "zero"], ["cond_out"])],
             [vi("cond_out", BOOL, []), vi("k", I64, [1]), vi("piece_scan", F32)],
             [vi("i", I64, []), vi("cond_in", BOOL, []), vi("k_in", I64, [1])])
    b.node.append(helper.make_node("Identity", ["piece"], ["piece_scan"]))
    loop = helper.make_node("Loop", ["M", "", "k0"], ["k_final", "pieces"], body=b)
    model = graph_model([loop], [vi("x", F32, [6])], [vi("k_final", I64, None), vi("pieces", F32, None)],
                        [("M", np.array(6, np.int64)), ("k0", np.array([0], np.int64)), ("zero", np.float32(0))])
    f = {"x": np.array([1, 2, -5, 3, 4, 5], np.float32)}
    declined_loop(model, [f])
