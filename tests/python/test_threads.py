"""Concurrent runs: ORT may call Compute from several threads at once (one session shared by
threads, or several sessions). MLX work is serialised inside the EP; results must stay right
and the compile cache must stay consistent while new shapes arrive from different threads.
Sessions cannot fall back to CPU silently, and ORT's profile shows every run was on MLX."""
import threading

import numpy as np
from onnx import TensorProto, helper

from harness import assert_ran_on_mlx, mlx_session, profiled_nodes


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
    sess = mlx_session(model(), profile=True)
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
    # The three nodes are one MLX partition: one kernel event per run, 4 threads x 25 runs.
    nodes = profiled_nodes(sess)
    assert_ran_on_mlx(nodes)
    assert len(nodes) == 4 * 25, len(nodes)


def test_many_sessions_many_threads():
    data = model()
    errors = []
    profiles = {}

    def work(tid):
        sess = mlx_session(data, profile=True)
        rng = np.random.default_rng(100 + tid)
        for _ in range(10):
            x = rng.standard_normal((3, 8)).astype(np.float32)
            w = rng.standard_normal((8, 8)).astype(np.float32)
            if not np.allclose(sess.run(None, {"x": x, "w": w})[0], reference(x, w), rtol=1e-5, atol=1e-6):
                errors.append(tid)
        profiles[tid] = profiled_nodes(sess)

    assert run_threads(work) == []
    assert not errors, errors
    assert sorted(profiles) == [0, 1, 2, 3]
    for tid, nodes in profiles.items():
        assert_ran_on_mlx(nodes, f"thread {tid}")
        assert len(nodes) == 10, (tid, len(nodes))
