"""Trained models shipped inside PyPI wheels (scripts/fetch_models.sh puts them in
build/models/real; never committed): PP-OCRv4 text detector and recognizer and the PP-OCR
direction classifier (rapidocr-onnxruntime), NudeNet's YOLOv8n detector (nudenet), Magika's
file-type model (magika) and Silero's LSTM voice-activity detectors (silero-vad: the sequence model,
and the streaming one whose network sits in an If on the sample rate). Each runs on ORT's
CPU EP and on MLX (no silent fallback), as one MLX partition, with realistic inputs and must match; claimed/total nodes,
partitions and differences go to build/reports/real_models.md (the baseline the partitioning and
op work is measured against).

Tolerance: the harness's fp32 1e-5, relative to each output's scale (assert_close_to_scale), for
every model but the PP-OCRv4 detector. The detector's probability map comes out of 62
convolutions with BatchNormalization folded in and bilinear-upsampled feature sums; ORT's CPU EP
differs from itself by 9.2e-6 of the scale between its basic and disabled graph optimizations on
this input, so 1e-5 would not separate a wrong result from rounding: 3e-5 (3x ORT's own spread).
For the others ORT's own spread is <= 4.4e-6 (PP-OCRv4 recognizer), 5.4e-7 (classifier),
5.3e-7 (NudeNet), 8e-9 (Magika), 0 (Silero sequence model)."""
import os
import sys

import numpy as np
import onnxruntime as ort
import pytest

from harness import EP, assert_close_to_scale, run_mlx_nodes, scaled_difference
from model_report import claim_summary, declined_ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import real_models  # noqa: E402

TOLERANCE = {"ppocr_v4_det": 3e-5}  # everything else: 1e-5 (see the module docstring)
REPORT = os.path.join(ROOT, "build", "reports", "real_models.md")


@pytest.fixture(scope="module")
def table():
    rows = []
    yield rows
    if rows:
        os.makedirs(os.path.dirname(REPORT), exist_ok=True)
        with open(REPORT, "w") as f:
            f.write("| model | nodes claimed/total | MLX partitions | max abs diff | diff / output scale | "
                    "declined ops |\n|---|---|---|---|---|---|\n")
            f.writelines(rows)


@pytest.mark.parametrize("name", list(real_models.REAL_MODELS))
def test_real_model_matches_cpu(name, table):
    path = real_models.model_path(name)
    if not os.path.exists(path):
        pytest.skip(f"{path} missing: run scripts/fetch_models.sh (EP_MLX_FETCH_MODELS=0 skipped it)")
    feeds = real_models.REAL_MODELS[name][1]()
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    got, nodes = run_mlx_nodes(path, feeds)
    assert any(provider == EP for _, provider in nodes), f"{name}: nothing ran on MLX"
    _, graph, model = claim_summary(path)
    outputs = [o.name for o in model.graph.output]
    max_abs = max(float(np.abs(g.astype(np.float64) - r).max()) for g, r in zip(got, ref))
    scaled = max(scaled_difference(g, r) for g, r in zip(got, ref))
    declined = ", ".join(f"{op} x{n}" for op, n in sorted(declined_ops(graph).items())) or "-"
    table.append(f"| {name} | {graph['nodes_claimed']}/{graph['nodes_total']} | {len(graph['partitions'])} | "
                 f"{max_abs:.3g} | {scaled:.2e} | {declined} |\n")
    for out, g, r in zip(outputs, got, ref):
        assert_close_to_scale(g, r, rtol=TOLERANCE.get(name, 1e-5), what=f"{name}:{out}")


@pytest.mark.parametrize("name", list(real_models.REAL_MODELS))
def test_real_model_is_one_mlx_partition(name):
    """Every node on MLX in one partition (silero_vad's If on the sample rate included: the
    condition reads the scalar input `sr` on the host and the compiled function is specialised
    on it)."""
    path = real_models.model_path(name)
    if not os.path.exists(path):
        pytest.skip(f"{path} missing: run scripts/fetch_models.sh (EP_MLX_FETCH_MODELS=0 skipped it)")
    _, graph, _ = claim_summary(path)
    assert graph["nodes_claimed"] == graph["nodes_total"] and len(graph["partitions"]) == 1, \
        f"{name}: {graph['nodes_claimed']}/{graph['nodes_total']} claimed, {len(graph['partitions'])} partitions, " \
        f"boundaries {graph.get('boundaries')}"
    _, nodes = run_mlx_nodes(path, real_models.REAL_MODELS[name][1]())
    assert [p for _, p in nodes] == [EP], f"{name}: one MLX kernel per run expected, profile shows {nodes}"
