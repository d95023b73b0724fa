"""Whole models in the layouts real exporters write (tests/models/build_models.py: BERT encoder,
GPT-2 decoder, MobileNet/ResNet CNN, YOLO detector, CRNN), built into build/models/synthetic at
test time with symbolic batch/sequence/spatial dims. Each must match ORT's CPU EP and run as ONE
MLX partition with no node left on the CPU EP (the claim report says so, and ORT's profile shows
one MLX kernel per run). A failure names the declined ops and the partition boundaries."""
import functools
import os
import sys

import numpy as np
import pytest

from harness import EP, assert_close_to_scale, run_cpu, run_mlx_nodes
from model_report import claim_summary, describe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import build_models  # noqa: E402

OUT_DIR = os.path.join(ROOT, "build", "models", "synthetic")


@functools.lru_cache(maxsize=None)
def built(name):
    """(path, model, feeds) of model `name`, written to build/models/synthetic once per session."""
    return build_models.build(name, OUT_DIR)


@functools.lru_cache(maxsize=None)
def mlx_run(name):
    _, model, feeds = built(name)
    return run_mlx_nodes(model, feeds)


@pytest.mark.parametrize("name", list(build_models.MODELS))
def test_model_matches_cpu(name):
    _, model, feeds = built(name)
    ref = run_cpu(model, feeds)
    got, nodes = mlx_run(name)
    assert any(provider == EP for _, provider in nodes), f"{name}: nothing ran on MLX"
    for out, g, r in zip(model.graph.output, got, ref):
        assert_close_to_scale(g, r, what=f"{name}:{out.name}")


@pytest.mark.parametrize("name", list(build_models.MODELS))
def test_model_is_one_mlx_partition(name):
    path, _, _ = built(name)
    _, graph, _ = claim_summary(path)
    summary = describe(graph)
    assert graph["nodes_total"] > 0, f"{name}: the EP saw no nodes"
    one_partition = graph["nodes_claimed"] == graph["nodes_total"] and len(graph["partitions"]) == 1
    assert one_partition, f"{name} is not one MLX partition: {summary}"
    _, nodes = mlx_run(name)
    assert [p for _, p in nodes] == [EP], f"{name}: one MLX kernel per run expected, profile shows {nodes}"


def test_models_are_small_and_deterministic():
    # Builders are seeded: building twice gives the same bytes; each model stays under 1 MB.
    for name, builder in build_models.MODELS.items():
        a, fa = builder()
        b, fb = builder()
        data = a.SerializeToString()
        assert data == b.SerializeToString(), name
        assert len(data) < 1 << 20, (name, len(data))
        assert all(np.array_equal(fa[k], fb[k]) for k in fa), name
        dims = [d for i in a.graph.input for d in i.type.tensor_type.shape.dim]
        assert any(d.dim_param for d in dims), f"{name}: no symbolic input dims"
