"""Parity tests of If, Loop and Scan (src/ops/control_flow*.cc): bodies traced inline into the
enclosing MLX function, so the whole node runs on MLX (the profile shows it) and, with its
neighbours, as one partition."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from harness import EP, assert_close, check_parity, run_cpu, run_mlx_nodes, run_mlx_with_report

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value)))


def graph_model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "cf", inputs, outputs,
                              [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8

    return model


def body(nodes, outputs, inputs=(), name="body", inits=()):
    return helper.make_graph(nodes, name, list(inputs), outputs,
                             [onnx.numpy_helper.from_array(np.asarray(v), n) for n, v in inits])


def branches():
    """then: x + 1 (shape of x); else: sum over axis 0 times w (shape [1, n]): outer-scope x and w."""
    then_g = body([const("then_one", np.float32(1)), helper.make_node("Add", ["x", "then_one"], ["then_y"])],
                  [vi("then_y", F32)], name="then")
    else_g = body([helper.make_node("ReduceSum", ["x", "else_axes"], ["else_s"], keepdims=1),
                   helper.make_node("Mul", ["else_s", "w"], ["else_y"])],
                  [vi("else_y", F32)], name="else", inits=[("else_axes", np.array([0], np.int64))])
    return then_g, else_g


def if_model(cond_nodes, cond_inputs=(), inits=()):
    then_g, else_g = branches()
    nodes = cond_nodes + [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
                          helper.make_node("Relu", ["y"], ["z"])]
    return graph_model(nodes, [vi("x", F32, ["a", 4]), vi("w", F32, [4])] + list(cond_inputs),
                       [vi("z", F32, None)], inits)


def feeds(rows=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((rows, 4)).astype(np.float32), "w": rng.standard_normal(4).astype(np.float32)}


def one_partition(model, feeds_list):
    """Runs every feed through one session: outputs match CPU, one partition, only MLX ran."""
    outs, report, providers = run_mlx_with_report(model, feeds_list)
    graph = report["graphs"][-1]
    assert graph["declined"] == [], graph["declined"]
    assert len(graph["partitions"]) == 1, graph["partitions"]
    assert providers == [EP], providers
    for f, got in zip(feeds_list, outs):
        for g, r in zip(got, run_cpu(model, f)):
            assert g.shape == r.shape
            assert_close(g, r)
    return report


@pytest.mark.parametrize("value", [True, False])
def test_if_constant_condition(value):
    check_parity(if_model([], inits=[("c", np.array(value))]), feeds())


@pytest.mark.parametrize("rows", [2, 5])
def test_if_shape_derived_condition_folds(rows):
    cond = [helper.make_node("Shape", ["x"], ["s"]), const("zero", np.int64(0)), const("three", np.int64(3)),
            helper.make_node("Gather", ["s", "zero"], ["d"]), helper.make_node("Greater", ["d", "three"], ["c"])]
    report = one_partition(if_model(cond), [feeds(rows)])
    assert report["runtime"]["partitions"][0]["traces"] == 1


def test_if_graph_input_condition_specialises():
    model = if_model([], cond_inputs=[vi("c", BOOL, [])])
    runs = [dict(feeds(), c=np.array(True)), dict(feeds(), c=np.array(False)), dict(feeds(seed=1), c=np.array(True))]
    report = one_partition(model, runs)
    (part,) = report["runtime"]["partitions"]
    assert part["cache_misses"] == 2 and part["cache_hits"] == 1, part  # one function per value


def test_if_condition_from_data_is_a_partition_input():
    # The condition depends on x's values: computed in one partition, read on the host by the
    # next one (specialised on its value); everything still runs on MLX.
    cond = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0), const("zero", np.float32(0)),
            helper.make_node("Greater", ["total", "zero"], ["c"])]
    model = if_model(cond)
    for seed in (0, 1, 2):
        check_parity(model, feeds(seed=seed))


def test_nested_if():
    then_g, else_g = branches()
    inner = helper.make_node("If", ["c2"], ["y_in"], then_branch=then_g, else_branch=else_g)
    outer_then = body([inner, helper.make_node("Neg", ["y_in"], ["o"])], [vi("o", F32)], name="outer_then")
    outer_else = body([helper.make_node("Sigmoid", ["x"], ["o2"])], [vi("o2", F32)], name="outer_else")
    nodes = [helper.make_node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)]
    model = graph_model(nodes, [vi("x", F32, ["a", 4]), vi("w", F32, [4]), vi("c1", BOOL, []), vi("c2", BOOL, [])],
                        [vi("y", F32, None)])
    for c1 in (True, False):
        for c2 in (True, False):
            check_parity(model, dict(feeds(), c1=np.array(c1), c2=np.array(c2)))


def test_if_branches_of_different_shapes_with_shape_arithmetic_inside():
    # then: reshape x to [-1] by a shape computed inside the branch from an outer value (folds);
    # else: x itself. Outputs differ in rank.
    then_g = body([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1),
                   helper.make_node("Reshape", ["x", "n"], ["flat"])], [vi("flat", F32)], name="then")
    else_g = body([helper.make_node("Identity", ["x"], ["same"])], [vi("same", F32)], name="else")
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    model = graph_model(nodes, [vi("x", F32, ["a", 4]), vi("c", BOOL, [])], [vi("y", F32, None)])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    one_partition(model, [{"x": x, "c": np.array(True)}, {"x": x, "c": np.array(False)}])


def loop_body(cond_nodes=None):
    """Carried y += x (outer x) and a scan output y * i; cond_out from `cond_nodes` or cond_in."""
    nodes = [helper.make_node("Add", ["y_in", "x"], ["y_out"]),
             helper.make_node("Cast", ["i"], ["fi"], to=F32),
             helper.make_node("Mul", ["y_out", "fi"], ["scan"])]
    nodes += cond_nodes or [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    return body(nodes, [vi("cond_out", BOOL, []), vi("y_out", F32), vi("scan", F32)],
                [vi("i", I64, []), vi("cond_in", BOOL, []), vi("y_in", F32)], name="loop_body")


def loop_model(m_nodes, cond_nodes=None, m_inits=(), inputs=()):
    nodes = m_nodes + [helper.make_node("Loop", ["M", "cond"], [], body=loop_body(cond_nodes))]
    nodes[-1].input.append("y0")
    nodes[-1].output.extend(["y_final", "scans"])
    return graph_model(nodes, [vi("x", F32, [2, 3]), vi("y0", F32, [2, 3])] + list(inputs),
                       [vi("y_final", F32, None), vi("scans", F32, None)],
                       list(m_inits) + [("cond", np.array(True))])


def loop_feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3)).astype(np.float32), "y0": rng.standard_normal((2, 3)).astype(np.float32)}


@pytest.mark.parametrize("trips", [1, 5])
def test_loop_constant_trip_count(trips):
    one_partition(loop_model([], m_inits=[("M", np.array(trips, np.int64))]), [loop_feeds()])


@pytest.mark.parametrize("scan_shape", [None, [2, 3], ["a", 3]], ids=["unknown", "static", "symbolic"])
def test_loop_zero_trips(scan_shape):
    # ORT shapes the empty scan output from the body's declared shape: [0] when unknown.
    model = loop_model([], m_inits=[("M", np.array(0, np.int64))])
    if scan_shape:
        model.graph.node[-1].attribute[0].g.output[2].CopyFrom(vi("scan", F32, scan_shape))
    check_parity(model, loop_feeds())


def test_loop_trip_count_from_shape():
    nodes = [helper.make_node("Shape", ["t"], ["s"]), const("zero", np.int64(0)),
             helper.make_node("Gather", ["s", "zero"], ["M"])]
    model = loop_model(nodes, inputs=[vi("t", F32, ["n"])])
    for n in (3, 6):
        one_partition(model, [dict(loop_feeds(), t=np.zeros(n, np.float32))])


def test_loop_trip_count_from_graph_input():
    model = loop_model([], inputs=[vi("M", I64, [])])
    for m in (2, 4):
        check_parity(model, dict(loop_feeds(), M=np.array(m, np.int64)))


def test_loop_early_exit_that_folds():
    # cond_out = i < 3: four iterations of the ten allowed.
    cond = [const("three", np.int64(3)), helper.make_node("Less", ["i", "three"], ["cond_out"])]
    model = loop_model([], cond, m_inits=[("M", np.array(10, np.int64))])
    got = one_partition(model, [loop_feeds()])
    assert run_cpu(model, loop_feeds())[1].shape[0] == 4


def counter_loop():
    """A while loop on a carried counter: k = k + 1 while k < 3, k starting from constant k0."""
    b = body([const("one", np.int64(1)), const("three", np.int64(3)), helper.make_node("Add", ["k_in", "one"], ["k"]),
              helper.make_node("Less", ["k", "three"], ["cond_out"]), helper.make_node("Add", ["y_in", "x"], ["y"])],
             [vi("cond_out", BOOL, []), vi("k", I64, []), vi("y", F32)],
             [vi("i", I64, []), vi("cond_in", BOOL, []), vi("k_in", I64, []), vi("y_in", F32)])
    return helper.make_node("Loop", ["", "cond", "k0", "y0"], ["k_final", "y_final"], body=b)


def test_loop_counter_state_condition_is_declined_whole():
    # ORT asks about the body before the Loop, when whether k0 is a constant cannot be read: the
    # body is partitioned on its own (on MLX), the Loop runs on CPU, the reason says why.
    model = graph_model([counter_loop()], [vi("x", F32, [2, 3]), vi("y0", F32, [2, 3])],
                        [vi("k_final", I64, None), vi("y_final", F32, None)],
                        [("cond", np.array(True)), ("k0", np.array(0, np.int64))])
    outs, report, providers = run_mlx_with_report(model, [loop_feeds()])
    (declined,) = [d for g in report["graphs"] for d in g["declined"] if d["op_type"] == "Loop"]
    assert "'k0', which is not a constant" in declined["reason"], declined
    assert EP in providers
    for g, r in zip(outs[0], run_cpu(model, loop_feeds())):
        assert_close(g, r)


def test_loop_data_dependent_condition_is_declined():
    cond = [helper.make_node("ReduceSum", ["y_out"], ["t"], keepdims=0), const("ten", np.float32(10)),
            helper.make_node("Less", ["t", "ten"], ["cond_out"])]
    model = loop_model([], cond, m_inits=[("M", np.array(20, np.int64))])
    f = loop_feeds()
    outs, report, _ = run_mlx_with_report(model, [f])
    declined = [d for g in report["graphs"] for d in g["declined"] if d["op_type"] == "Loop"]
    assert declined and "data-dependent" in declined[0]["reason"], report["graphs"]
    for g, r in zip(outs[0], run_cpu(model, f)):
        assert_close(g, r)


def scan_model(num_states, scan_inputs, scan_outputs, nodes, attrs, opset=17):
    """One Scan node; body inputs/outputs from the (name, elem, shape) lists."""
    b = body(nodes, [vi(n, e, s) for n, e, s in scan_outputs[1]],
             [vi(n, e, s) for n, e, s in scan_inputs[1]])
    outer_in, outer_out = scan_inputs[0], scan_outputs[0]
    node = helper.make_node("Scan", [n for n, _, _ in outer_in], [n for n, _, _ in outer_out],
                            body=b, num_scan_inputs=len(outer_in) - num_states, **attrs)
    return graph_model([node], [vi(n, e, s) for n, e, s in outer_in], [vi(n, e, None) for n, e, _ in outer_out],
                       opset=opset)


def cumsum_scan(attrs, x_shape_body):
    """state s (shape of a slice), scan input x: s += x_t * w (outer-scope w... none: a constant), out s."""
    nodes = [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Tanh", ["s_out"], ["y_t"])]
    return scan_model(1, ([("s0", F32, None), ("x", F32, None)],
                          [("s_in", F32, x_shape_body), ("x_t", F32, x_shape_body)]),
                      ([("s", F32, None), ("y", F32, None)], [("s_out", F32, None), ("y_t", F32, None)]),
                      nodes, attrs)


@pytest.mark.parametrize("attrs, x_shape, slice_shape", [
    ({}, (5, 2, 3), (2, 3)),
    ({"scan_input_directions": [1], "scan_output_directions": [1]}, (4, 3), (3,)),
    ({"scan_input_axes": [1], "scan_output_axes": [1]}, (2, 5, 3), (2, 3)),
    ({"scan_input_axes": [-1], "scan_input_directions": [1], "scan_output_axes": [-1]}, (2, 3, 4), (2, 3)),
    ({}, (0, 3), (3,)),
], ids=["forward", "reverse", "axis1", "neg-axis-reverse", "zero-length"])
def test_scan(attrs, x_shape, slice_shape):
    rng = np.random.default_rng(0)
    model = cumsum_scan(attrs, list(slice_shape))
    f = {"s0": rng.standard_normal(slice_shape).astype(np.float32), "x": rng.standard_normal(x_shape).astype(np.float32)}
    # ORT's CPU EP (and ONNX's reference evaluator) fail on a zero-length scan; by the spec the
    # state passes through and the scan output is empty.
    expected = [f["s0"], np.zeros((0,) + slice_shape, np.float32)] if 0 in x_shape else None
    check_parity(model, f, expected=expected)


def test_scan_multiple_states_and_inputs():
    nodes = [helper.make_node("Add", ["a_in", "u_t"], ["a_out"]), helper.make_node("Mul", ["b_in", "v_t"], ["b_out"]),
             helper.make_node("Sub", ["a_out", "b_out"], ["y_t"]), helper.make_node("Neg", ["a_out"], ["a_neg"])]
    model = scan_model(2, ([("a0", F32, None), ("b0", F32, None), ("u", F32, None), ("v", F32, None)],
                           [("a_in", F32, [3]), ("b_in", F32, [3]), ("u_t", F32, [3]), ("v_t", F32, [3])]),
                       ([("a", F32, None), ("b", F32, None), ("y", F32, None), ("y2", F32, None)],
                        [("a_out", F32, None), ("b_out", F32, None), ("y_t", F32, None), ("a_neg", F32, None)]),
                       nodes, {"scan_input_directions": [0, 1], "scan_input_axes": [0, 1]})
    rng = np.random.default_rng(0)
    f = {"a0": rng.standard_normal(3).astype(np.float32), "b0": rng.standard_normal(3).astype(np.float32),
         "u": rng.standard_normal((4, 3)).astype(np.float32), "v": rng.standard_normal((3, 4)).astype(np.float32)}
    one_partition(model, [f])


def test_if_around_conv_lstm_is_one_partition():
    # The "done when" model: an If on a host scalar (graph input) holding a conv + LSTM
    # network, the shape arithmetic in front of it folding into the same partition.
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 4, 3)).astype(np.float32) * 0.3
    wl = rng.standard_normal((1, 4 * 6, 8)).astype(np.float32) * 0.3
    rl = rng.standard_normal((1, 4 * 6, 6)).astype(np.float32) * 0.3
    then_g = body([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]), helper.make_node("Relu", ["c"], ["r"]),
                   helper.make_node("Transpose", ["r"], ["seq"], perm=[2, 0, 1]),
                   helper.make_node("LSTM", ["seq", "wl", "rl"], ["h", "h_last"], hidden_size=6),
                   helper.make_node("Squeeze", ["h_last", "ax0"], ["o"])],
                  [vi("o", F32)], name="net", inits=[("ax0", np.array([0], np.int64))])
    else_g = body([helper.make_node("ReduceMean", ["x"], ["m"], axes=[2], keepdims=0),
                   helper.make_node("Slice", ["m", "st", "en", "ax1"], ["o2"])], [vi("o2", F32)],
                  name="skip", inits=[("st", np.array([0], np.int64)),
                                      ("en", np.array([6], np.int64)), ("ax1", np.array([1], np.int64))])
    nodes = [helper.make_node("If", ["use_net"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Sigmoid", ["y"], ["z"])]
    model = graph_model(nodes, [vi("x", F32, [2, 4, 7]), vi("use_net", BOOL, [])], [vi("z", F32, None)],
                        [("w", w), ("wl", wl), ("rl", rl)])
    x = rng.standard_normal((2, 4, 7)).astype(np.float32)
    one_partition(model, [{"x": x, "use_net": np.array(True)}, {"x": x, "use_net": np.array(False)}])


def test_if_branch_reads_a_value_computed_on_cpu():
    # d = Det(m) runs on CPU (no MLX translation); the branches read it only as an outer-scope
    # value (an implicit input of the If). ORT's fusion passes it to the fused node as an input.
    then_g = body([helper.make_node("Mul", ["x", "d"], ["p"])], [vi("p", F32)], name="then")
    else_g = body([helper.make_node("Sub", ["x", "d"], ["q"])], [vi("q", F32)], name="else")
    nodes = [helper.make_node("Det", ["m"], ["d"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    model = graph_model(nodes, [vi("x", F32, [3, 4]), vi("m", F32, [2, 2]), vi("c", BOOL, [])], [vi("y", F32, None)])
    rng = np.random.default_rng(0)
    for c in (True, False):
        f = {"x": rng.standard_normal((3, 4)).astype(np.float32), "m": rng.standard_normal((2, 2)).astype(np.float32),
             "c": np.array(c)}
        _, nodes_run = run_mlx_nodes(model, f)
        assert [p for _, p in nodes_run].count(EP) == 1, nodes_run  # the If's partition
        for g, r in zip(run_mlx_nodes(model, f)[0], run_cpu(model, f)):
            assert_close(g, r)


def scan8_model(directions, with_lens=False):
    """Scan-8: batch axis 0, sequence axis 1; sequence_lens first (absent unless `with_lens`)."""
    nodes = [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Tanh", ["s_out"], ["y_t"])]
    b = body(nodes, [vi("s_out", F32, None), vi("y_t", F32, None)], [vi("s_in", F32, [3]), vi("x_t", F32, [3])])
    node = helper.make_node("Scan", ["lens" if with_lens else "", "s0", "x"], ["s", "y"], body=b, num_scan_inputs=1,
                            directions=directions)
    inputs = [vi("s0", F32, [2, 3]), vi("x", F32, [2, 4, 3])] + ([vi("lens", I64, [2])] if with_lens else [])
    return graph_model([node], inputs, [vi("s", F32, None), vi("y", F32, None)], opset=8)


@pytest.mark.parametrize("directions", [[0], [1]], ids=["forward", "reverse"])
def test_scan8(directions):
    rng = np.random.default_rng(0)
    f = {"s0": rng.standard_normal((2, 3)).astype(np.float32), "x": rng.standard_normal((2, 4, 3)).astype(np.float32)}
    one_partition(scan8_model(directions), [f])


def test_scan8_sequence_lens_is_declined():
    rng = np.random.default_rng(0)
    f = {"s0": rng.standard_normal((2, 3)).astype(np.float32), "x": rng.standard_normal((2, 4, 3)).astype(np.float32),
         "lens": np.array([4, 2], np.int64)}
    model = scan8_model([0], with_lens=True)
    outs, report, _ = run_mlx_with_report(model, [f])
    (declined,) = [d for g in report["graphs"] for d in g["declined"] if d["op_type"] == "Scan"]
    assert "sequence_lens" in declined["reason"], declined
    for g, r in zip(outs[0], run_cpu(model, f)):
        assert_close(g, r)
