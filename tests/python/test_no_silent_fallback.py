"""The harness cannot pass on CPU silently. onnxruntime's Python InferenceSession recreates a
session on the CPU EP alone, printing "EP Error", when creation raises RuntimeError/ValueError
(an EP whose GetCapability or Compile fails that way, an EP ORT does not know), and reruns on
CPU when a run raises EPFail. These tests make each of those happen and show that a plain
session passes on CPU while harness.mlx_session raises, and that check_parity fails when the
nodes did not run on MLX."""
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import onnxruntime.capi.onnxruntime_pybind11_state as C
import pytest

import harness
from harness import EP, assert_mlx_session, check_parity, make_model, mlx_session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_model():
    return make_model("Add", [("a", np.float32, [2, 3]), ("b", np.float32, [2, 3])],
                      [("y", np.float32, [2, 3])])


FEEDS = {"a": np.ones((2, 3), np.float32), "b": np.full((2, 3), 2.0, np.float32)}


@pytest.fixture
def ep_creation_fails(monkeypatch):
    """Session creation with the MLX EP raises RuntimeError, as a failing GetCapability/Compile
    surfaces through the Python bindings; creation with the CPU EP alone still works."""
    real = ort.InferenceSession._create_inference_session

    def create(self, providers, provider_options, *args, **kwargs):
        if providers and any(p == EP or (isinstance(p, tuple) and p[0] == EP) for p in providers):
            self._fallback_providers = ["CPUExecutionProvider"]  # set first by the real method too
            raise RuntimeError(f"{EP}: Compile failed (simulated)")
        return real(self, providers, provider_options, *args, **kwargs)

    monkeypatch.setattr(ort.InferenceSession, "_create_inference_session", create)


def test_plain_session_falls_back_silently_when_the_ep_fails(ep_creation_fails, capsys):
    # The hole this file closes: no exception, the session simply has no MLX EP.
    sess = ort.InferenceSession(add_model().SerializeToString(), providers=[EP, "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(sess.run(None, FEEDS)[0], np.full((2, 3), 3.0, np.float32))
    assert "Falling back" in capsys.readouterr().out


def test_harness_session_raises_when_the_ep_fails(ep_creation_fails):
    with pytest.raises(RuntimeError, match="simulated"):
        mlx_session(add_model())
    with pytest.raises(RuntimeError, match="simulated"):
        check_parity(add_model(), FEEDS)


def test_harness_session_does_not_rerun_on_cpu_after_ep_fail(monkeypatch):
    # A run that raises EPFail: a plain session swaps to CPU and reruns; ours raises.
    plain = ort.InferenceSession(add_model().SerializeToString(), providers=[EP, "CPUExecutionProvider"])
    ours = mlx_session(add_model())
    for sess in (plain, ours):
        inner = sess._sess

        class FailingRun:
            def __getattr__(self, name, inner=inner):
                return getattr(inner, name)

            def run(self, *args):
                raise C.EPFail("simulated EP failure")

        sess._sess = FailingRun()
    plain.run(None, FEEDS)  # silently recreated on CPU
    assert plain.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(C.EPFail, match="simulated"):
        ours.run(None, FEEDS)


def test_guard_rejects_a_cpu_only_session():
    sess = ort.InferenceSession(add_model().SerializeToString(), providers=["CPUExecutionProvider"],
                                enable_fallback=0)
    with pytest.raises(AssertionError, match=EP):
        assert_mlx_session(sess)


def test_guard_rejects_a_session_that_can_fall_back():
    harness.mlx_ep.register_execution_provider_library()
    sess = ort.InferenceSession(add_model().SerializeToString(), providers=[EP, "CPUExecutionProvider"])
    with pytest.raises(AssertionError, match="fall back"):
        assert_mlx_session(sess)


def test_check_parity_fails_when_nodes_ran_on_cpu():
    # Det has no MLX translation: outputs match, but check_parity must not pass.
    model = make_model("Det", [("x", np.float32, [3, 3])], [("y", np.float32, [])])
    with pytest.raises(AssertionError, match="0/1 nodes ran on MLX"):
        check_parity(model, {"x": np.eye(3, dtype=np.float32)})


UNREGISTERED = """
import sys
sys.path[:0] = [{tests!r}, {python!r}]
import numpy as np, onnxruntime as ort, pytest
import harness
harness.mlx_ep.register_execution_provider_library = lambda *a: None  # the registration never happened
model = harness.make_model("Relu", [("a", np.float32, [2])], [("y", np.float32, [2])]).SerializeToString()
plain = ort.InferenceSession(model, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
print("PLAIN", plain.get_providers())
try:
    harness.mlx_session(model)
    print("GUARD passed")
except Exception as e:
    print("GUARD raised", type(e).__name__, e)
"""


def test_unregistered_ep_is_an_error_not_a_cpu_run():
    # In a fresh process where the library is not registered, ORT does not know the EP: a plain
    # session warns and runs on CPU, the harness raises.
    code = UNREGISTERED.format(tests=os.path.join(ROOT, "tests", "python"), python=os.path.join(ROOT, "python"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "PLAIN ['CPUExecutionProvider']" in proc.stdout, proc.stdout
    assert "GUARD raised RuntimeError Unknown Provider Type: MLXExecutionProvider" in proc.stdout, proc.stdout
