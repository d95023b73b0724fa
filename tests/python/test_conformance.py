"""Full ONNX node-test conformance run of the MLX EP (tests/conformance/run_conformance.py).

Runs every ONNX backend node test with CPU alone and with MLX + CPU fallback,
then checks build/reports/conformance.json: no test where MLX ran nodes and got
wrong outputs, no crash, and at least tests/conformance/floor.txt tests run
entirely on MLX. Skipped when the EP library has not been built.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "tests" / "conformance" / "run_conformance.py"
FLOOR = REPO / "tests" / "conformance" / "floor.txt"

sys.path.insert(0, str(RUNNER.parent))  # conftest.py puts python/ on the path
import onnxruntime_ep_mlx  # noqa: E402
from run_conformance import read_floor  # noqa: E402


@pytest.fixture(scope="module")
def conformance() -> dict:
    try:
        onnxruntime_ep_mlx.library_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    out_dir = REPO / "build" / "reports"
    report = out_dir / "conformance.json"
    report.unlink(missing_ok=True)  # never judge a stale report
    proc = subprocess.run([sys.executable, str(RUNNER), "--out-dir", str(out_dir), "--list-failures"],
                          capture_output=True, text=True, timeout=1800)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert report.is_file(), f"runner wrote no report (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    result = json.loads(report.read_text())
    result["_runner_output"] = proc.stdout[-4000:]
    return result


def _listed(result: dict, category: str) -> str:
    return "\n".join(f"{t['name']}: {t.get('message', '')[:300]}"
                     for t in result["tests"] if t["category"] == category)


def test_no_claimed_wrong(conformance):
    assert conformance["mlx_claimed_wrong"] == 0, _listed(conformance, "claimed_wrong")


def test_no_crash(conformance):
    assert conformance["mlx_crash"] == 0, _listed(conformance, "mlx_crash")


def test_strict_pass_floor(conformance):
    floor = read_floor(FLOOR)
    assert conformance["mlx_strict_pass"] >= floor, conformance["_runner_output"]
