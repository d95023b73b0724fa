"""Concurrent runs: ORT may call Compute from several threads at once (one session shared by
threads, or several sessions). MLX work is serialised inside the EP; results must stay right
and the compile cache must stay consistent while new shapes arrive from different threads."""
import threading

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep


def model():
    f = TensorProto.FLOAT
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "x"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "threads", [helper.make_tensor_value_info("x", f, ["n", 8]),
                                                  helper.make_tensor_value_info("w", f, [8, 8])],
                              [helper.make_tensor_value_info("y", f, ["n", 8])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def reference(x, w):
    s = x @ w + x
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def run_threads(work, n=4):
    """Runs work(tid) on n threads; returns the exceptions they raised."""
    raised = []

    def guarded(tid):
        try:
            work(tid)
        except Exception as e:  # noqa: BLE001 - reported by the test
            raised.append(f"thread {tid}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return raised


def test_one_session_many_threads():
    mlx_ep.register_execution_provider_library()
    sess = ort.InferenceSession(model(), providers=[mlx_ep.ep_name(), "CPUExecutionProvider"])
    errors = []

    def work(tid):
        rng = np.random.default_rng(tid)
        for i in range(25):
            n = 1 + (tid + i) % 5  # several shapes per thread: traces race with cached runs
            x = rng.standard_normal((n, 8)).astype(np.float32)
            w = rng.standard_normal((8, 8)).astype(np.float32)
            y = sess.run(None, {"x": x, "w": w})[0]
            if not np.allclose(y, reference(x, w), rtol=1e-5, atol=1e-6):
                errors.append((tid, i, float(np.abs(y - reference(x, w)).max())))

    assert run_threads(work) == []
    assert not errors, errors


def test_many_sessions_many_threads():
    mlx_ep.register_execution_provider_library()
    data = model()
    errors = []

    def work(tid):
        sess = ort.InferenceSession(data, providers=[mlx_ep.ep_name(), "CPUExecutionProvider"])
        rng = np.random.default_rng(100 + tid)
        for _ in range(10):
            x = rng.standard_normal((3, 8)).astype(np.float32)
            w = rng.standard_normal((8, 8)).astype(np.float32)
            if not np.allclose(sess.run(None, {"x": x, "w": w})[0], reference(x, w), rtol=1e-5, atol=1e-6):
                errors.append(tid)

    assert run_threads(work) == []
    assert not errors, errors
