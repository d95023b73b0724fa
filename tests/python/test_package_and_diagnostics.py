"""The Python package and the diagnostics: library lookup, idempotent registration, providers by
name, the report CLI, and the ONNXRUNTIME_EP_MLX_* variables (each run in a fresh process, as
a user would set them)."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_mlx as mlx_ep

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mixed_model(path):
    """Add (MLX) -> Det (declined) -> Add (MLX)."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "a"], ["s"], name="first_add"),
         helper.make_node("Det", ["s"], ["d"], name="the_det"),
         helper.make_node("Add", ["d", "d"], ["y"], name="second_add")],
        "mixed", [helper.make_tensor_value_info("a", f, [3, 3])], [helper.make_tensor_value_info("y", f, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


RUN_TWICE = """
import sys, numpy as np, onnxruntime as ort
sys.path.insert(0, {python!r})
import onnxruntime_ep_mlx as m
m.register_execution_provider_library()
s = ort.InferenceSession({model!r}, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
a = np.eye(3, dtype=np.float32)
for _ in range(2):
    y = s.run(None, {{"a": a}})[0]
print("RESULT", float(y))
"""


def run_script(model, **env):
    code = RUN_TWICE.format(python=os.path.join(ROOT, "python"), model=model)
    full_env = {**os.environ, **env}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_package_api():
    assert mlx_ep.ep_name() == "MLXExecutionProvider"
    assert mlx_ep.version() == "0.1.0"
    assert os.path.isfile(mlx_ep.library_path())
    first = mlx_ep.register_execution_provider_library()
    assert mlx_ep.register_execution_provider_library() == first  # idempotent
    assert "MLXExecutionProvider" in ort.get_available_providers()
    devices = mlx_ep.get_ep_devices()
    assert len(devices) == 1 and devices[0].ep_metadata["mlx_device"] in ("cpu", "gpu")


def test_append_to_session_options(tmp_path):
    so = ort.SessionOptions()
    mlx_ep.append_to_session_options(so)
    sess = ort.InferenceSession(mixed_model(str(tmp_path / "m.onnx")), so)
    y = sess.run(None, {"a": np.eye(3, dtype=np.float32)})[0]
    assert float(y) == 16.0  # det(2I) * 2


def test_verbose_summary_counts_compile_cache(tmp_path):
    proc = run_script(mixed_model(str(tmp_path / "m.onnx")), ONNXRUNTIME_EP_MLX_VERBOSE="1")
    assert "RESULT 16.0" in proc.stdout
    assert "claimed 2/3 nodes in 2 partition(s)" in proc.stderr
    # each of the two partitions: first run traces and compiles, second run hits the cache
    assert proc.stderr.count("2 runs, compile cache 1 hits / 1 misses") == 2, proc.stderr


def test_claim_debug_names_declined_nodes(tmp_path):
    proc = run_script(mixed_model(str(tmp_path / "m.onnx")), ONNXRUNTIME_EP_MLX_CLAIM_DEBUG="1")
    assert "declined the_det (ai.onnx::Det): no MLX translation for ai.onnx::Det" in proc.stderr
    assert "unclaimed op types: ai.onnx::Det(x1)" in proc.stderr


def test_claim_debug_explains_boundaries_and_decline_list(tmp_path):
    """ONNXRUNTIME_EP_MLX_DECLINE_OPS leaves the named op types to ORT; every value crossing
    between MLX and CPU is then logged with its reason, and the result does not change."""
    proc = run_script(mixed_model(str(tmp_path / "m.onnx")), ONNXRUNTIME_EP_MLX_CLAIM_DEBUG="1",
                      ONNXRUNTIME_EP_MLX_DECLINE_OPS="Pow,Add")
    assert "RESULT 16.0" in proc.stdout
    assert "declined first_add (ai.onnx::Add): declined by ONNXRUNTIME_EP_MLX_DECLINE_OPS" in proc.stderr
    assert "unclaimed op types: ai.onnx::Add(x2) ai.onnx::Det(x1)" in proc.stderr, proc.stderr
    proc = run_script(mixed_model(str(tmp_path / "m.onnx")), ONNXRUNTIME_EP_MLX_CLAIM_DEBUG="1")
    assert "boundary 's' partition 0 -> CPU: its consumer the_det (Det) runs on CPU: no MLX translation" \
        in proc.stderr, proc.stderr
    assert "boundary 'd' CPU -> partition 1: its producer the_det (Det) runs on CPU" in proc.stderr


ORT_LOGGED_RUN = """
import sys, numpy as np, onnxruntime as ort
sys.path.insert(0, {python!r})
import onnxruntime_ep_mlx as m
ort.set_default_logger_severity({severity})
m.register_execution_provider_library()
so = ort.SessionOptions()
so.log_severity_level = {severity}
s = ort.InferenceSession({model!r}, so, providers=["MLXExecutionProvider", "CPUExecutionProvider"])
s.run(None, {{"a": np.eye(3, dtype=np.float32)}})
del s
"""


def run_logged(model, severity, **env):
    code = ORT_LOGGED_RUN.format(python=os.path.join(ROOT, "python"), model=model, severity=severity)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_log_lines_go_through_ort_logger(tmp_path):
    # ORT's loggers at VERBOSE (the session's and the default one): the claim summary (INFO), the
    # declined node (VERBOSE, session logger) and the session summary (INFO, default logger) are
    # in ORT's log, formatted by ORT, without any ONNXRUNTIME_EP_MLX_* variable.
    model = mixed_model(str(tmp_path / "m.onnx"))
    stderr = run_logged(model, 0)
    lines = [l for l in stderr.splitlines() if "[MLXExecutionProvider]" in l]
    claim = [l for l in lines if "GetCapability: claimed 2/3 nodes in 2 partition(s)" in l]
    assert len(claim) == 1 and ":onnxruntime:" in claim[0], stderr[-3000:]
    assert "[I:" in claim[0], claim  # INFO
    declined = [l for l in lines if "declined the_det (ai.onnx::Det)" in l]
    assert len(declined) == 1 and "[V:" in declined[0], lines  # VERBOSE
    assert any("session summary:" in l and "[I:" in l for l in lines), lines
    # With the variable as well, each line is there once: ORT's log shows it, stderr does not repeat it.
    stderr = run_logged(model, 0, ONNXRUNTIME_EP_MLX_VERBOSE="1")
    assert stderr.count("GetCapability: claimed 2/3 nodes") == 1, stderr[-3000:]
    # ORT at its default level (WARNING): nothing of ours unless a variable asks for it.
    assert "[MLXExecutionProvider]" not in run_logged(model, 2)
    stderr = run_logged(model, 2, ONNXRUNTIME_EP_MLX_VERBOSE="1")
    assert "[MLXExecutionProvider] GetCapability: claimed 2/3 nodes in 2 partition(s)" in stderr
    assert ":onnxruntime:" not in stderr.split("GetCapability")[0].splitlines()[-1]  # our own line


def test_unusable_variable_is_an_ort_warning(tmp_path):
    # Not a diagnostic anyone asked for: a WARNING through ORT's default logger, shown once.
    stderr = run_logged(mixed_model(str(tmp_path / "m.onnx")), 2, ONNXRUNTIME_EP_MLX_THREADS="lots")
    lines = [l for l in stderr.splitlines() if "ONNXRUNTIME_EP_MLX_THREADS=lots is not a thread count" in l]
    assert len(lines) == 1 and "[W:onnxruntime:" in lines[0], stderr[-3000:]


def test_no_compile_kill_switch(tmp_path):
    proc = run_script(mixed_model(str(tmp_path / "m.onnx")), ONNXRUNTIME_EP_MLX_NO_COMPILE="1",
                      ONNXRUNTIME_EP_MLX_VERBOSE="1")
    assert "RESULT 16.0" in proc.stdout
    assert proc.stderr.count("2 runs, compile cache 0 hits / 0 misses") == 2, proc.stderr


def test_report_file(tmp_path):
    report = tmp_path / "report.json"
    run_script(mixed_model(str(tmp_path / "m.onnx")), ONNXRUNTIME_EP_MLX_REPORT=str(report))
    data = json.loads(report.read_text())
    g = data["graphs"][0]
    assert (g["nodes_claimed"], g["nodes_total"], len(g["partitions"])) == (2, 3, 2)
    assert [d["node"] for d in g["declined"]] == ["the_det"]
    assert sorted(p["runs"] for p in data["runtime"]["partitions"]) == [2, 2]


def test_graph_census_logs_each_partitions_primitives(tmp_path):
    # Each partition logs its run's MLX primitives once (the census repeats only when it changes):
    # here one Add each, and the Contiguous that makes an output row-contiguous for ORT.
    proc = run_script(mixed_model(str(tmp_path / "m.onnx")), ONNXRUNTIME_EP_MLX_GRAPH_CENSUS="1")
    lines = [line for line in proc.stderr.splitlines() if "MLX primitives per run" in line]
    assert len(lines) == 2, proc.stderr
    assert all(line.endswith("total 2: Add 1, Contiguous 1") for line in lines), lines
    quiet = run_script(mixed_model(str(tmp_path / "m.onnx")))
    assert "MLX primitives per run" not in quiet.stderr


def test_report_splits_steady_runs_into_phases(tmp_path):
    # Two runs per partition: the first traces, so one steady run whose phases are timed.
    report = tmp_path / "report.json"
    run_script(mixed_model(str(tmp_path / "m.onnx")), ONNXRUNTIME_EP_MLX_REPORT=str(report))
    for part in json.loads(report.read_text())["runtime"]["partitions"]:
        assert (part["runs"], part["traces"], part["steady_runs"]) == (2, 1, 1), part
        assert part["eval_ms"] > 0 and part["graph_ms"] >= 0 and part["write_ms"] >= 0, part
        # the bind phase precedes the graph; the wait is a part of the write
        assert part["bind_ms"] >= 0 and 0 <= part["wait_ms"] <= part["write_ms"], part


def test_report_cli(tmp_path):
    model = mixed_model(str(tmp_path / "m.onnx"))
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")}
    out = subprocess.run([sys.executable, "-m", "onnxruntime_ep_mlx", "report", model],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "2/3 nodes claimed" in out.stdout
    assert "the_det (ai.onnx::Det): no MLX translation" in out.stdout


# ---- The BLAS under MLX (Linux: libmlx's cblas_sgemm must reach OpenBLAS through the EP's shim) ----

LINUX_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the OpenBLAS shim is Linux-only")


def _openblas_shim_precondition_missing():
    """Why the shim's tests cannot hold here, or "": they need scipy-openblas32 (a Linux
    dependency of the package: the shim is built against it) and the mlx-cpu wheel, whose libmlx
    bundles the reference BLAS the shim replaces. The mlx-cuda wheels bundle their own BLAS
    (mlx_cuda_13.libs/libblas), and a GPU image may have no scipy-openblas32."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("scipy_openblas32") is None:
        return "scipy-openblas32 is not installed (the EP's OpenBLAS shim is built against it)"
    try:
        importlib.metadata.version("mlx-cpu")
    except importlib.metadata.PackageNotFoundError:
        return "MLX is not the mlx-cpu wheel (the shim replaces the BLAS bundled in mlx-cpu's libmlx)"
    return ""


OPENBLAS_SHIM = pytest.mark.skipif(bool(_openblas_shim_precondition_missing()),
                                   reason=_openblas_shim_precondition_missing() or "-")

DEVICE_METADATA = """
import ctypes, json, os, sys
import mlx
sys.path.insert(0, {python!r})
import onnxruntime_ep_mlx as m
if {mlx_first!r}:  # what `import mlx.core` does: libmlx.so loaded (and bound) before the EP
    ctypes.CDLL(os.path.join(list(mlx.__path__)[0], "lib", "libmlx.so"))
print("METADATA", json.dumps(dict(m.get_ep_devices()[0].ep_metadata)))
"""


def device_metadata(mlx_first=False, **env):
    """The EP device metadata and the stderr of a fresh process."""
    code = DEVICE_METADATA.format(python=os.path.join(ROOT, "python"), mlx_first=mlx_first)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stdout.splitlines() if l.startswith("METADATA "))
    return json.loads(line[len("METADATA "):]), proc.stderr


@LINUX_ONLY
@OPENBLAS_SHIM
def test_libmlx_sgemm_resolves_to_openblas_in_this_process():
    metadata = mlx_ep.get_ep_devices()[0].ep_metadata
    assert metadata["blas"] == "openblas", dict(metadata)
    assert os.path.basename(metadata["blas_sgemm_library"]) == "libonnxruntime_ep_mlx_blas.so"
    assert os.path.basename(metadata["blas_library"]).startswith("libscipy_openblas")
    # the default policy: the CPUs this process may run on
    assert metadata["blas_threads"] == str(len(os.sched_getaffinity(0)))


@LINUX_ONLY
@OPENBLAS_SHIM
def test_libmlx_loaded_first_is_detected_with_its_remedy():
    metadata, stderr = device_metadata(mlx_first=True, ONNXRUNTIME_EP_MLX_VERBOSE="1")
    assert metadata["blas"] == "bundled", metadata
    assert "mlx_cpu.libs/libblas" in metadata["blas_sgemm_library"]
    assert "LD_PRELOAD=" in stderr and "libonnxruntime_ep_mlx_blas.so" in stderr, stderr
    # the remedy it prints works
    shim = os.path.join(os.path.dirname(mlx_ep.library_path()), "libonnxruntime_ep_mlx_blas.so")
    metadata, _ = device_metadata(mlx_first=True, LD_PRELOAD=shim)
    assert metadata["blas"] == "openblas", metadata


@LINUX_ONLY
@OPENBLAS_SHIM
def test_blas_threads_variable():
    metadata, stderr = device_metadata(ONNXRUNTIME_EP_MLX_BLAS_THREADS="3", ONNXRUNTIME_EP_MLX_VERBOSE="1")
    assert metadata["blas_threads"] == "3"
    assert "OpenBLAS" in stderr and "3 threads" in stderr, stderr
    metadata, stderr = device_metadata(ONNXRUNTIME_EP_MLX_BLAS_THREADS="1")
    assert metadata["blas_threads"] == "1"
    metadata, stderr = device_metadata(ONNXRUNTIME_EP_MLX_BLAS_THREADS="lots")
    assert metadata["blas_threads"] == str(len(os.sched_getaffinity(0)))
    assert "ONNXRUNTIME_EP_MLX_BLAS_THREADS=lots is not a thread count" in stderr


@LINUX_ONLY
@OPENBLAS_SHIM
def test_info_cli_names_the_blas():
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")}
    out = subprocess.run([sys.executable, "-m", "onnxruntime_ep_mlx", "info"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "BLAS               openblas" in out.stdout, out.stdout


def test_report_keeps_what_earlier_capability_passes_declined(tmp_path):
    """ORT expands a function op no EP claims (here a float16 Softmax, which ORT's CPU EP has no
    kernel for, declined through ONNXRUNTIME_EP_MLX_DECLINE_OPS) and asks the EP again: the
    report must still say why the graph split, not only what the last pass saw."""
    from onnx import TensorProto, helper
    import onnx

    f16 = TensorProto.FLOAT16
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["p"], axis=-1),
             helper.make_node("Relu", ["p"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f16, [2, 8])],
                              [helper.make_tensor_value_info("y", f16, [2, 8])])
    path = str(tmp_path / "softmax16.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    report = tmp_path / "report.json"
    code = (f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'python')!r}); import numpy as np, "
            "onnxruntime as ort, onnxruntime_ep_mlx as m; so = ort.SessionOptions(); "
            f"m.append_to_session_options(so); s = ort.InferenceSession({path!r}, so); "
            "s.run(None, {'x': np.ones((2, 8), np.float16)})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ONNXRUNTIME_EP_MLX_DECLINE_OPS": "Softmax",
                               "ONNXRUNTIME_EP_MLX_REPORT": str(report), "ONNXRUNTIME_EP_MLX_VERBOSE": "1"})
    assert proc.returncode == 0, proc.stderr
    (g,) = json.loads(report.read_text())["graphs"]
    assert g["capability_passes"] == 2, g
    assert g["partitions_from_earlier_passes"] == 2, g  # the two Relus, either side of the Softmax
    assert [(d["op_type"], d["reason"]) for d in g["declined_in_earlier_passes"]] == \
        [("Softmax", "declined by ONNXRUNTIME_EP_MLX_DECLINE_OPS")], g
    assert g["declined"] == [], g  # the expansion's nodes were all claimed in the second pass
    assert "in pass 2, after 2 partition(s) of earlier passes, which declined 1 node(s)" in proc.stderr
