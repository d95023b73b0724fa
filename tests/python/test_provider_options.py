"""The EP's provider options (src/abi/factory.cc): `use_tf32` (runtime/precision.h); any other
key under the EP's prefix is an error.

MLX reads MLX_ENABLE_TF32 once per process, at its first float32 matrix product, so the option
applies process-wide: each case runs in a fresh process and reads the variable MLX will see."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import ctypes, sys
    import numpy as np, onnxruntime as ort
    sys.path[:0] = [{python!r}, {tests!r}]
    import onnxruntime_ep_mlx as mlx_ep
    from harness import make_model

    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    tf32 = lambda: (libc.getenv(b"MLX_ENABLE_TF32") or b"unset").decode()
    model = make_model("MatMul", [("a", np.float32, [2, 3]), ("b", np.float32, [3, 2])],
                       [("y", np.float32, [2, 2])]).SerializeToString()

    def session(options):
        so = ort.SessionOptions()
        mlx_ep.append_to_session_options(so, options)
        try:
            s = ort.InferenceSession(model, so, enable_fallback=0)
        except Exception as e:
            return "error: " + str(e).split("CreateEp: ")[-1].strip()
        assert s.get_providers()[0] == "MLXExecutionProvider", s.get_providers()
        return s

    mlx_ep.register_execution_provider_library()
    print("registered", tf32())
    s = session({{"use_tf32": sys.argv[1]}})
    print("first", tf32(), s if isinstance(s, str) else "ok")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = s.run(None, {{"a": a, "b": a.T.copy()}})[0]
    assert np.allclose(y, a @ a.T), y
    for value in ("0", "1", "yes"):
        r = session({{"use_tf32": value}})
        print("then", value, tf32(), r if isinstance(r, str) else "ok")
    r = session({{"use_tf23": "1"}})
    print("unknown", r if isinstance(r, str) else "ok")
""")


def run(first):
    env = {k: v for k, v in os.environ.items() if k != "MLX_ENABLE_TF32"}
    code = SCRIPT.format(python=os.path.join(ROOT, "python"), tests=os.path.join(ROOT, "tests", "python"))
    p = subprocess.run([sys.executable, "-c", code, first], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    return [line for line in p.stdout.splitlines()
            if line.split(" ")[0] in ("registered", "first", "then", "unknown")]


def test_use_tf32_on_in_the_first_session_applies_to_the_process():
    lines = run("1")
    assert lines[0] == "registered 0", lines  # the EP's default: float32-exact products
    assert lines[1] == "first 1 ok", lines
    # MLX has run: the other setting is refused with the reason, the same one accepted
    assert lines[2].startswith("then 0 1 error: provider option use_tf32=0: MLX reads MLX_ENABLE_TF32 once"), lines
    assert lines[3] == "then 1 1 ok", lines
    assert lines[4] == 'then yes 1 error: provider option use_tf32 must be "0" or "1", not "yes"', lines
    # a misspelt option is an error, not silently ignored
    assert lines[5] == 'unknown error: unknown provider option "use_tf23" (the EP has one: use_tf32)', lines


def test_use_tf32_off_is_the_default_and_accepted():
    lines = run("0")
    assert lines[:2] == ["registered 0", "first 0 ok"], lines
    assert lines[2] == "then 0 0 ok", lines
    assert lines[3].startswith("then 1 0 error: provider option use_tf32=1: MLX reads MLX_ENABLE_TF32 once"), lines


GRAPH_SIZE_SCRIPT = textwrap.dedent("""
    import ctypes, sys
    sys.path[:0] = [{python!r}]
    import onnxruntime as ort
    import onnxruntime_ep_mlx as mlx_ep

    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    mlx_ep.register_execution_provider_library()
    backend = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"][0].ep_metadata["mlx_backend"]
    print("backend", backend, (libc.getenv(b"MLX_MAX_OPS_PER_BUFFER") or b"unset").decode())
""")


def graph_size_after_registration(preset=None):
    env = {k: v for k, v in os.environ.items() if k != "MLX_MAX_OPS_PER_BUFFER"}
    if preset is not None:
        env["MLX_MAX_OPS_PER_BUFFER"] = preset
    code = GRAPH_SIZE_SCRIPT.format(python=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    (line,) = [line for line in p.stdout.splitlines() if line.startswith("backend ")]
    return line.split()[1:]


def test_cuda_graph_size_default_only_on_cuda():
    """runtime/precision.h, SetMlxDefaults: where MLX is its CUDA backend the EP sets
    MLX_MAX_OPS_PER_BUFFER=25 (MLX's own is 100 on Hopper) when the library registers, before MLX
    reads it; elsewhere (Metal reads the same variable, CPU none) it is left unset."""
    backend, value = graph_size_after_registration()
    assert backend in ("cuda", "metal", "cpu"), backend
    assert value == ("25" if backend == "cuda" else "unset"), (backend, value)


def test_cuda_graph_size_set_by_the_user_is_kept():
    assert graph_size_after_registration("7")[1] == "7"
