"""Parity of the recurrent family (RNN, GRU, LSTM; src/ops/recurrent*.cc) against ORT's CPU EP.

ORT's CPU kernels refuse layout=1, so batch-major nodes are compared with ORT on the equivalent
layout-0 node (inputs and outputs transposed). ORT runs float16 nodes in float32 between casts;
bfloat16 (opset 22) has no ORT kernel and is compared with float32 ORT on the bfloat16 inputs."""
import numpy as np
import pytest
from onnx import helper

from harness import (BF16, assert_close, assert_declined, assert_mlx_error, check_parity, make_graph_model, mlx_device,
                     run_cpu, run_mlx)
from harness_bf16 import check_bf16

import onnxruntime_ep_mlx as mlx_ep

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OUTPUTS = {"RNN": ("Y", "Y_h"), "GRU": ("Y", "Y_h"), "LSTM": ("Y", "Y_h", "Y_c")}
OPS = ["RNN", "GRU", "LSTM"]
DIRECTIONS = ["forward", "reverse", "bidirectional"]


def recurrent_model(op, seq=5, batch=3, input_size=4, hidden=5, direction="forward", bias=True, lens=None,
                    initial=False, peepholes=False, layout=0, attrs=None, outputs=None, dtype=np.float32,
                    constants=(), opset=14, seed=0):
    """(model, feeds) of one `op` node. `lens`: per-batch sequence lengths or None; `initial`: pass
    initial_h (and initial_c); `outputs`: the outputs to request (others left out), default all;
    `constants`: names of inputs (W, R, B, sequence_lens, ...) made constant initializers."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]

    def rand(*shape, scale=0.5):
        return rng.uniform(-scale, scale, size=shape).astype(np.float32)

    def batch_major(a):
        return np.ascontiguousarray(np.swapaxes(a, 0, 1)) if layout else a

    values = {"X": batch_major(rand(seq, batch, input_size, scale=1.0)), "W": rand(dirs, g * hidden, input_size),
              "R": rand(dirs, g * hidden, hidden)}
    if bias:
        values["B"] = rand(dirs, 2 * g * hidden)
    if lens is not None:
        values["sequence_lens"] = np.asarray(lens, np.int32)
    if initial:
        values["initial_h"] = batch_major(rand(dirs, batch, hidden, scale=1.0))
        if op == "LSTM":
            values["initial_c"] = batch_major(rand(dirs, batch, hidden, scale=1.0))
    if peepholes:
        values["P"] = rand(dirs, 3 * hidden)
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][:8 if op == "LSTM" else 6]
    while order[-1] not in values:
        order.pop()
    for k, v in values.items():
        if v.dtype == np.float32:
            values[k] = v.astype(dtype)
    inputs = [(n, values[n].dtype, list(values[n].shape)) if n in values else ("", None, None) for n in order]
    wanted = outputs or OUTPUTS[op]
    out_names = [n if n in wanted else "" for n in OUTPUTS[op]]
    while not out_names[-1]:
        out_names.pop()
    node_attrs = {"hidden_size": hidden, "direction": direction, **(attrs or {})}
    if opset >= 14:
        node_attrs["layout"] = layout
    node = helper.make_node(op, [n for n, _, _ in inputs], out_names, name=f"{op}_node", **node_attrs)
    inits = {n: values[n] for n in constants if n in values}
    model = make_graph_model([node], inputs, [(n, values["X"].dtype, None) for n in out_names if n], inits, opset)
    feeds = {n: values[n] for n, _, _ in inputs if n and n not in inits}
    return model, feeds


def batch_major_reference(op, kwargs):
    """ORT CPU's outputs of the layout=1 node, from the same node in layout 0 (transposed in and out)."""
    model, feeds = recurrent_model(op, **{**kwargs, "layout": 0})
    outs = run_cpu(model, feeds)
    wanted = kwargs.get("outputs") or OUTPUTS[op]
    names = [n for n in OUTPUTS[op] if n in wanted]
    return [np.ascontiguousarray(np.transpose(o, (2, 0, 1, 3)) if n == "Y" else np.swapaxes(o, 0, 1))
            for n, o in zip(names, outs)]


def check(op, **kwargs):
    """check_parity of recurrent_model(op, **kwargs) (layout 1 against the transposed layout-0 node)."""
    model, feeds = recurrent_model(op, **kwargs)
    expected = batch_major_reference(op, kwargs) if kwargs.get("layout") else None
    return check_parity(model, feeds, expected=expected)


LENGTHS = {1: [3], 3: [5, 2, 4]}  # a full-length and a short sequence (seq=5)


@pytest.mark.parametrize("initial", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("with_lens", [False, True], ids=["full", "lens"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", OPS)
def test_directions(op, direction, with_lens, initial):
    check(op, direction=direction, lens=LENGTHS[3] if with_lens else None, initial=initial)


@pytest.mark.parametrize("with_lens", [False, True], ids=["full", "lens"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", OPS)
def test_batch_major_layout(op, direction, with_lens):
    check(op, direction=direction, lens=LENGTHS[3] if with_lens else None, initial=True, layout=1)


@pytest.mark.parametrize("op", OPS)
def test_batch_major_lstm_peepholes_and_outputs(op):
    """layout=1 with only the final states requested."""
    check(op, direction="bidirectional", lens=[1, 5, 3], initial=True, layout=1, outputs=OUTPUTS[op][1:],
          peepholes=op == "LSTM")


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", OPS)
def test_empty_sequences(op, direction):
    """A length-0 entry: its Y rows and final states are 0 (not the initial state), like ORT's."""
    check(op, direction=direction, lens=[0, 5, 2], initial=True)


@pytest.mark.parametrize("input_forget", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_lstm_peepholes(direction, input_forget):
    check("LSTM", direction=direction, lens=LENGTHS[3], initial=True, peepholes=True,
          attrs={"input_forget": input_forget})


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("with_lens", [False, True], ids=["full", "lens"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset(direction, with_lens, bias):
    check("GRU", direction=direction, lens=LENGTHS[3] if with_lens else None, initial=True, bias=bias,
          attrs={"linear_before_reset": 1})


@pytest.mark.parametrize("op", OPS)
def test_clip(op):
    """A clip that most gate inputs exceed (the test asserts that it changes the result)."""
    kwargs = dict(direction="bidirectional", lens=LENGTHS[3], initial=True, peepholes=op == "LSTM")
    got = check(op, attrs={"clip": 0.3}, **kwargs)
    unclipped = run_cpu(*recurrent_model(op, **kwargs))
    assert np.abs(got[0] - unclipped[0]).max() > 0.1


# (op, activations, alpha, beta): non-default functions, alpha/beta given or ORT's agreed defaults.
ACTIVATIONS = [
    ("RNN", ["Relu"], None, None),
    ("RNN", ["Sigmoid"], None, None),
    ("RNN", ["Affine"], [0.7], [0.1]),
    ("RNN", ["LeakyRelu"], [0.2], None),
    ("RNN", ["ThresholdedRelu"], [0.1], None),
    ("RNN", ["ScaledTanh"], [1.5], [0.8]),
    ("RNN", ["HardSigmoid"], [0.3], [0.4]),
    ("RNN", ["Elu"], [0.9], None),
    ("RNN", ["Softsign"], None, None),
    ("RNN", ["Softplus"], None, None),
    ("RNN", ["Relu", "LeakyRelu"], [0.5, 0.3], None),  # consumed in order: LeakyRelu takes 0.5
    ("RNN", ["HardSigmoid", "LeakyRelu"], None, None),  # ORT's (= ONNX's) defaults
    ("GRU", ["HardSigmoid", "Softsign"], None, None),  # ORT's (= ONNX's) HardSigmoid defaults
    ("GRU", ["Sigmoid", "Relu"], None, None),
    ("GRU", ["LeakyRelu", "Affine"], [0.1, 0.6], [0.2]),
    ("GRU", ["sigmoid", "ScaledTanh"], [1.2], [0.7]),  # case-insensitive like ORT
    ("GRU", ["Elu", "ThresholdedRelu", "Sigmoid", "Softplus"], [0.8, 0.05], None),
    ("LSTM", ["HardSigmoid", "Elu", "Softsign"], [0.25], [0.45]),
    ("LSTM", ["Sigmoid", "Affine", "LeakyRelu"], [0.8], [0.1]),  # LeakyRelu alpha: ORT's default
    ("LSTM", ["Sigmoid", "Softplus", "ScaledTanh"], [1.1], [0.9]),
    ("LSTM", ["Sigmoid", "Relu", "ThresholdedRelu", "HardSigmoid", "Tanh", "Tanh"], [0.2, 0.3], [0.6]),
]


@pytest.mark.parametrize("op,acts,alpha,beta", ACTIVATIONS,
                         ids=[f"{o}-{'-'.join(a)}" for o, a, _, _ in ACTIVATIONS])
def test_activations(op, acts, alpha, beta):
    dirs = len(acts) // {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    attrs = {"activations": acts}
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    check(op, direction="bidirectional" if dirs == 2 else "forward", lens=LENGTHS[3], initial=True, attrs=attrs)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (4, 1, 3, 7), (6, 3, 1, 13), (3, 2, 5, 1)],
                         ids=lambda s: "seq{}-batch{}-in{}-hidden{}".format(*s))
@pytest.mark.parametrize("op", OPS)
def test_odd_sizes(op, shape):
    seq, batch, input_size, hidden = shape
    lens = list(np.random.default_rng(seq).integers(1, seq + 1, batch))
    lens[0] = seq
    check(op, seq=seq, batch=batch, input_size=input_size, hidden=hidden, direction="bidirectional", lens=lens,
          initial=True)


OUTPUT_SUBSETS = [(op, wanted) for op in OPS
                  for wanted in [("Y",), ("Y_h",), ("Y_c",), ("Y", "Y_c"), ("Y_h", "Y_c")]
                  if op == "LSTM" or "Y_c" not in wanted]


@pytest.mark.parametrize("op,wanted", OUTPUT_SUBSETS, ids=[f"{o}-{'+'.join(w)}" for o, w in OUTPUT_SUBSETS])
def test_output_subsets(op, wanted):
    check(op, direction="bidirectional", lens=LENGTHS[3], initial=True, outputs=wanted)


@pytest.mark.parametrize("op", OPS)
def test_constant_inputs(op):
    """W, R, B, sequence_lens and the initial states as constant initializers."""
    check(op, direction="bidirectional", lens=LENGTHS[3], initial=True, peepholes=op == "LSTM",
          constants=("W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"))


@pytest.mark.parametrize("opset", [7, 13, 22])
@pytest.mark.parametrize("op", OPS)
def test_opsets(op, opset):
    check(op, direction="bidirectional", lens=LENGTHS[3], initial=True, opset=opset)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("op", OPS)
def test_float16(op, direction, batch):
    check(op, batch=batch, direction=direction, lens=LENGTHS[batch], initial=True, dtype=np.float16,
          peepholes=op == "LSTM")


@pytest.mark.parametrize("op", OPS)
def test_bfloat16(op):
    kwargs = dict(direction="bidirectional", lens=LENGTHS[3], initial=True, opset=22, peepholes=op == "LSTM")
    model, feeds = recurrent_model(op, dtype=BF16, **kwargs)
    ref_model, _ = recurrent_model(op, **kwargs)
    f32 = {k: (v.astype(np.float32) if v.dtype == BF16 else v) for k, v in feeds.items()}
    check_bf16(model, feeds, run_cpu(ref_model, f32))


def test_longer_sequence():
    """A longer unrolled loop (64 steps) stays at float32 parity."""
    for op in OPS:
        check(op, seq=64, batch=2, input_size=8, hidden=16, direction="bidirectional", lens=[64, 37], initial=True)


def test_empty_batch_and_sequence():
    """RNN with batch 0 and with sequence length 0 (ORT's LSTM/GRU kernels abort on these or return
    uninitialized Y_c)."""
    check("RNN", batch=0, direction="bidirectional")
    check("RNN", seq=0, direction="bidirectional", initial=True)


def test_declined_rnn_activation_spelling():
    """ORT's RNN kernel rejects names not spelled as ONNX does; so does the claim."""
    assert_mlx_error(*recurrent_model("RNN", attrs={"activations": ["relu"]}))


# ---- declined ----------------------------------------------------------------------------------

DECLINED = [
    # ORT's default Affine/ThresholdedRelu alpha is 0, ONNX's 1; ScaledTanh has no ONNX default.
    ("RNN", {"activations": ["Affine"]}),
    ("LSTM", {"activations": ["Sigmoid", "Affine", "Tanh"]}),
    ("GRU", {"activations": ["Sigmoid", "ThresholdedRelu"]}),
    ("GRU", {"activations": ["Sigmoid", "ScaledTanh"], "activation_alpha": [1.0]}),
    # A negative clip is "no clip" for ORT's RNN kernel.
    ("RNN", {"clip": -1.0}),
]


@pytest.mark.parametrize("op,attrs", DECLINED, ids=[f"{o}-{i}" for i, (o, _) in enumerate(DECLINED)])
def test_declined(op, attrs):
    assert_declined(*recurrent_model(op, attrs=attrs))


def test_declined_out_of_range_constant_lengths():
    """ORT rejects a length above seq_length; known when constant, so the node is left to ORT."""
    assert_mlx_error(*recurrent_model("GRU", lens=[6, 2, 4], constants=("sequence_lens",)))


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_declined_float64(op, tmp_path):
    """ORT's CPU kernels have no float64 implementation (they fail at run time): not claimed."""
    model, _ = recurrent_model(op, dtype=np.float64)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    report = mlx_ep.claim_report(str(path))
    declined = report["graphs"][0]["declined"]
    assert [d["node"] for d in declined] == [f"{op}_node"]
    # "not float32 ..." where MLX has float64 (its CPU device), "has type double, which MLX does
    # not support on this device" on GPUs.
    assert "float64" in declined[0]["reason"] or "type double" in declined[0]["reason"]


def test_runtime_lengths_match_constant_lengths():
    """The same lengths fed at run time and as a constant give the same outputs."""
    kwargs = dict(direction="bidirectional", lens=[5, 0, 3], initial=True, peepholes=True)
    got_runtime, mlx, total = run_mlx(*recurrent_model("LSTM", **kwargs))
    assert mlx == total == 1
    got_const, mlx, total = run_mlx(*recurrent_model("LSTM", constants=("sequence_lens",), **kwargs))
    assert mlx == total == 1
    for a, b in zip(got_runtime, got_const):
        assert_close(a, b, rtol=0, atol=0)


def test_wrong_weight_shape_errors():
    """W of the wrong shape: ORT and MLX both fail (no made-up output)."""
    model, feeds = recurrent_model("GRU", hidden=5)
    feeds["W"] = np.zeros((1, 12, 4), np.float32)
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 12
    assert_mlx_error(model, feeds)



@pytest.mark.skipif(mlx_device() != "cpu", reason="the recurrence primitive is MLX's CPU device's")
def test_recurrence_primitive():
    """On MLX's CPU device each direction of an RNN, GRU or LSTM is one RecurrenceCpu (the time loop
    in C++, src/ops/recurrent_cpu.cc), where the unrolled form (ONNXRUNTIME_EP_MLX_RECURRENT_CPU_KERNEL=0,
    which passes the same cases) takes ~10 primitives a step."""
    import os
    from harness import census_total, census_with_and_without
    cases = ["test_directions[LSTM-bidirectional-lens-initial_state]",
             "test_directions[GRU-bidirectional-lens-zero_state]", "test_lstm_peepholes[reverse-1]",
             "test_gru_linear_before_reset[forward-lens-bias]", "test_directions[RNN-reverse-lens-initial_state]",
             "test_longer_sequence"]
    kernel, unrolled = census_with_and_without(os.path.abspath(__file__), cases,
                                               "ONNXRUNTIME_EP_MLX_RECURRENT_CPU_KERNEL")
    assert sum("RecurrenceCpu" in line for line in kernel) >= len(cases), kernel
    assert not any("RecurrenceCpu" in line for line in unrolled), unrolled
    assert sum(map(census_total, kernel)) * 3 < sum(map(census_total, unrolled)), (kernel, unrolled)


@pytest.mark.skipif(mlx_device() != "cpu", reason="the recurrence primitive is MLX's CPU device's")
def test_recurrence_primitive_portable_products():
    """The primitive's h·R^T without OpenBLAS (ONNXRUNTIME_EP_MLX_RECURRENT_CPU_KERNEL=portable: the
    dot products that builds without the EP's BLAS shim, macOS's, run) passes the same cases."""
    import os
    from harness import census_of_tests
    cases = ["test_directions[LSTM-bidirectional-lens-initial_state]",
             "test_directions[GRU-bidirectional-lens-zero_state]", "test_gru_linear_before_reset[forward-lens-bias]",
             "test_directions[RNN-reverse-lens-initial_state]", "test_longer_sequence",
             "test_odd_sizes[GRU-seq6-batch3-in1-hidden13]"]
    census, _ = census_of_tests(os.path.abspath(__file__), cases,
                                env={"ONNXRUNTIME_EP_MLX_RECURRENT_CPU_KERNEL": "portable"})
    assert sum("RecurrenceCpu" in line for line in census) >= len(cases), census
