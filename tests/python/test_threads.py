"""Concurrent runs: ORT may call Compute from several threads at once (one session shared by
threads, or several sessions). The EP hands runs to a pool of MLX worker threads, each with its
own streams and compiled functions (src/runtime/mlx_thread.h); results must stay right (and
bit-identical to a single thread's) and the compile cache must stay consistent and bounded while
new shapes arrive from different threads. Sessions cannot fall back to CPU silently, and ORT's
profile shows every run was on MLX."""
import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import onnxruntime as ort
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


def dense_model():
    """x [n, 64] -> MatMul -> Add -> Tanh -> MatMul -> Softmax, weights as initializers: a GEMM,
    fused elementwise kernels and a reduction, whose rounding depends on the operation order."""
    rng = np.random.default_rng(5)
    f = TensorProto.FLOAT
    w = helper.make_tensor("w", f, [64, 64], (rng.standard_normal((64, 64)) * 0.2).astype(np.float32).ravel())
    b = helper.make_tensor("b", f, [64], rng.standard_normal(64).astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Tanh", ["a"], ["t"]), helper.make_node("MatMul", ["t", "w"], ["u"]),
             helper.make_node("Softmax", ["u"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", f, ["n", 64])],
                              [helper.make_tensor_value_info("y", f, ["n", 64])], [w, b])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def test_threads_and_sessions_give_the_bytes_of_one_thread():
    # 8 threads on 3 sessions, 4 shapes: runs land on different MLX workers, each of which
    # compiles its own functions; every result must equal the single-threaded one bit for bit.
    data = dense_model()
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((n, 64)).astype(np.float32) for n in (1, 3, 16, 33, 3, 16)]
    single = mlx_session(data)
    want = [single.run(None, {"x": x})[0] for x in inputs]
    cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for x, y in zip(inputs, want):  # the reference itself is right
        np.testing.assert_allclose(y, cpu.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    sessions = [mlx_session(data, profile=True) for _ in range(3)]
    wrong = []

    def work(tid):
        for i in range(15):
            k = (tid + i) % len(inputs)
            if not np.array_equal(sessions[(tid + i) % 3].run(None, {"x": inputs[k]})[0], want[k]):
                wrong.append((tid, i))

    assert run_threads(work, n=8) == []
    assert not wrong, wrong
    counts = []
    for s in sessions:
        nodes = profiled_nodes(s)
        assert_ran_on_mlx(nodes)
        counts.append(len(nodes))
    assert sum(counts) == 8 * 15, counts


BOUND_SCRIPT = textwrap.dedent("""
    import sys, threading
    sys.path[:0] = {paths!r}
    import numpy as np
    from test_threads import model, reference
    from harness import mlx_session
    sess = mlx_session(model())
    wrong = []
    def work(tid):
        for i in range(24):
            n = 1 + (i * (tid + 1)) % 8
            x = np.full((n, 8), tid / 4, np.float32)
            w = np.eye(8, dtype=np.float32)
            if not np.allclose(sess.run(None, {{"x": x, "w": w}})[0], reference(x, w), rtol=1e-5, atol=1e-6):
                wrong.append((tid, i))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not wrong, wrong
    del sess  # writes the report
    print("DONE")
""")


def test_compile_cache_bound_holds_under_many_shapes_from_many_threads(tmp_path):
    # 8 shapes from 4 threads on 2 MLX workers with ONNXRUNTIME_EP_MLX_MAX_COMPILED=2: each
    # worker keeps at most 2 compiled functions (live = misses - evictions <= 2 x 2), and results
    # stay right while functions are evicted and compiled again.
    here = os.path.dirname(os.path.abspath(__file__))
    report = tmp_path / "report.json"
    env = dict(os.environ, ONNXRUNTIME_EP_MLX_THREADS="2", ONNXRUNTIME_EP_MLX_MAX_COMPILED="2",
               ONNXRUNTIME_EP_MLX_REPORT=str(report))
    paths = [here, os.path.join(os.path.dirname(os.path.dirname(here)), "python")]
    out = subprocess.run([sys.executable, "-c", BOUND_SCRIPT.format(paths=paths)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "DONE" in out.stdout, out.stderr[-3000:]
    parts = json.loads(report.read_text())["runtime"]["partitions"]
    assert len(parts) == 1, parts
    p = parts[0]
    assert p["runs"] == 4 * 24
    assert p["cache_misses"] >= 8  # every shape compiled at least once
    assert p["evictions"] > 0
    assert p["cache_misses"] - p["evictions"] <= 2 * 2, p
