"""One ONNX backend node test at a time: generating the node-test data when the onnx wheel ships
none, loading a test's inputs and expected outputs, comparing outputs the way onnx's backend
runner does, and running a test on ORT's CPU EP alone and on MLX + CPU (counting, from ORT's
profile, which EP ran each node). run_conformance.py drives these over every test."""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import time
import warnings
from pathlib import Path

EP_NAME = "MLXExecutionProvider"
RTOL, ATOL = 1e-3, 1e-7
MEMCPY_OPS = {"MemcpyToHost", "MemcpyFromHost"}
REPORT_ENV = "ONNXRUNTIME_EP_MLX_REPORT"  # the EP writes its claim report there on session release
EXPANDED_RE = re.compile(r"_expanded(_ver\d+)?$")


# --------------------------------------------------------------------------- test data

def _serialize_value(value, type_proto, name):
    """Serialize one test value like onnx's ``cmd_tools generate-data`` does."""
    from onnx import TensorProto, numpy_helper
    import numpy as np

    if type_proto.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    if type_proto.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if type_proto.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(np.asarray(value), name).SerializeToString()


def generate_node_tests(dest: Path) -> None:
    """Write onnx's node test cases to ``dest/<test>/`` (model.onnx + test_data_set_*)."""
    import numpy as np
    import onnx.backend.test.case.node as node_cases

    np.random.seed(0)  # several generators draw random inputs
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for case in cases:
        case_dir = tmp / case.name
        case_dir.mkdir(parents=True)
        (case_dir / "model.onnx").write_bytes(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            set_dir = case_dir / f"test_data_set_{i}"
            set_dir.mkdir()
            for kind, values, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
                for j, value in enumerate(values):
                    data = _serialize_value(value, infos[j].type, infos[j].name)
                    (set_dir / f"{kind}_{j}.pb").write_bytes(data)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def node_test_dir(build_dir: Path) -> tuple[Path, str]:
    """Return (directory holding the node test dirs, 'installed' | 'generated')."""
    import onnx

    installed = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    if installed.is_dir() and any(installed.iterdir()):
        return installed, "installed"
    cache = build_dir / "onnx-node-tests" / f"onnx-{onnx.__version__}" / "node"
    if not cache.is_dir():
        print(f"onnx {onnx.__version__} ships no node test data; generating it into {cache} ...", flush=True)
        t0 = time.monotonic()
        generate_node_tests(cache)
        print(f"  generated {len(list(cache.iterdir()))} tests in {time.monotonic() - t0:.1f}s", flush=True)
    return cache, "generated"


def op_key(test_dir: Path) -> str:
    """Per-op grouping key of a test (see module docstring)."""
    import onnx

    suffix = ""
    base = EXPANDED_RE.sub("", test_dir.name)
    if base != test_dir.name and (test_dir.parent / base / "model.onnx").is_file():
        test_dir, suffix = test_dir.parent / base, "_expanded"
    nodes = onnx.load(str(test_dir / "model.onnx"), load_external_data=False).graph.node
    if not nodes:
        return "(no nodes)"
    domain = nodes[0].domain
    prefix = f"{domain}::" if domain not in ("", "ai.onnx") else ""
    return prefix + nodes[0].op_type + suffix


# --------------------------------------------------------------------------- running one test

def tensor_only(model) -> bool:
    return all(vi.type.HasField("tensor_type") for vi in (*model.graph.input, *model.graph.output))


def load_data_sets(test_dir: Path, model):
    """[(feeds dict, expected outputs list)] for every test_data_set_* of a test."""
    import onnx
    from onnx import numpy_helper

    initializers = {init.name for init in model.graph.initializer}
    input_names = [vi.name for vi in model.graph.input if vi.name not in initializers]

    def load(set_dir: Path, kind: str):
        files = sorted(set_dir.glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        return [numpy_helper.to_array(onnx.load_tensor(str(f))) for f in files]

    sets = []
    for set_dir in sorted(test_dir.glob("test_data_set_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])):
        sets.append((dict(zip(input_names, load(set_dir, "input"))), load(set_dir, "output")))
    return sets


def compare_outputs(expected, actual) -> str | None:
    """None if ``actual`` matches ``expected`` (onnx backend runner rules), else why not."""
    import numpy as np

    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (ref, out) in enumerate(zip(expected, actual)):
        out = np.asarray(out)
        if out.shape != ref.shape:
            return f"output {i}: shape {out.shape}, expected {ref.shape}"
        try:
            if ref.dtype == object:
                np.testing.assert_array_equal(out, ref)
                continue
            if out.dtype != ref.dtype:
                return f"output {i}: dtype {out.dtype}, expected {ref.dtype}"
            if ref.dtype.kind in "biu":
                np.testing.assert_array_equal(out, ref)
            elif ref.dtype.name == "bfloat16":
                np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32),
                                           rtol=max(RTOL, 2 ** -6), atol=ATOL)
            else:
                np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
        except (AssertionError, TypeError) as exc:
            return f"output {i}: {str(exc).strip()[:600]}"
    return None


def _session_options(ort):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # the workers already use the cores in parallel
    so.log_severity_level = 3
    return so


def _node_counts(profile_path: str) -> tuple[int, int, list[str]]:
    """(nodes run on MLX, nodes run in total, op types run elsewhere) of a one-run profile."""
    with open(profile_path, encoding="utf-8") as f:
        events = json.load(f)
    on_mlx, total, elsewhere = 0, 0, []
    for ev in events:
        if ev.get("cat") != "Node" or ev.get("name", "").endswith(("_fence_before", "_fence_after")):
            continue
        args = ev.get("args", {})
        if args.get("op_name") in MEMCPY_OPS:
            continue
        total += 1
        if args.get("provider") == EP_NAME:
            on_mlx += 1
        else:
            elsewhere.append(f"{args.get('op_name', '?')}@{args.get('provider', '?')}")
    return on_mlx, total, sorted(set(elsewhere))


def run_cpu(ort, model_path: str, data_sets) -> dict:
    try:
        sess = ort.InferenceSession(model_path, _session_options(ort), providers=["CPUExecutionProvider"])
        for feeds, expected in data_sets:
            why = compare_outputs(expected, sess.run(None, feeds))
            if why:
                return {"result": "fail", "message": why}
        return {"result": "pass"}
    except Exception as exc:  # noqa: BLE001 - any ORT failure is a result
        return {"result": "error", "message": f"{type(exc).__name__}: {str(exc)[:600]}"}


def _declined(report_path: str) -> list[str]:
    """'reason' strings of the nodes the EP declined, from its claim report (if written)."""
    if not os.path.exists(report_path):
        return []
    with open(report_path, encoding="utf-8") as f:
        report = json.load(f)
    os.unlink(report_path)
    return sorted({d.get("reason", "?") for g in report.get("graphs", []) for d in g.get("declined", [])})


def run_mlx(ort, ep, model_path: str, data_sets, profile_prefix: str) -> dict:
    res: dict = {"nodes_mlx": 0, "nodes_total": 0}
    os.environ[REPORT_ENV] = profile_prefix + ".report.json"
    try:
        so = _session_options(ort)
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
        ep.append_to_session_options(so)
        # enable_fallback=0: otherwise the Python API silently retries on CPU alone.
        sess = ort.InferenceSession(model_path, so, enable_fallback=0)
        outputs = []
        for k, (feeds, _) in enumerate(data_sets):
            outputs.append(sess.run(None, feeds))
            if k == 0:
                profile = sess.end_profiling()
                res["nodes_mlx"], res["nodes_total"], res["fallback_ops"] = _node_counts(profile)
                os.unlink(profile)
        del sess
        gc.collect()  # release the session now: the EP writes its report then
        res["declined"] = _declined(os.environ[REPORT_ENV])
        for (_, expected), out in zip(data_sets, outputs):
            why = compare_outputs(expected, out)
            if why:
                res.update(result="fail", message=why)
                return res
        res["result"] = "pass"
    except Exception as exc:  # noqa: BLE001
        res.update(result="error", message=f"{type(exc).__name__}: {str(exc)[:600]}")
    return res
