"""The EP's claim report: which nodes a model's session puts on MLX, in which partitions, and
why the others were declined. The EP writes it (JSON) to ``ONNXRUNTIME_EP_MLX_REPORT`` when a
session is released; ``collect_report`` creates and releases one session to get it."""

from __future__ import annotations

import collections
import gc
import json
import os
import tempfile
from typing import Any

from . import append_to_session_options

_REPORT_ENV = "ONNXRUNTIME_EP_MLX_REPORT"


def collect_report(model_path: str, provider_options: dict[str, str] | None = None) -> dict[str, Any]:
    """Create and release an MLX session for ``model_path``; return the EP's claim report."""
    import onnxruntime as ort

    previous = os.environ.get(_REPORT_ENV)
    with tempfile.TemporaryDirectory(prefix="ep_mlx_report_") as tmp:
        report_path = os.path.join(tmp, "report.json")
        os.environ[_REPORT_ENV] = report_path
        try:
            so = ort.SessionOptions()
            so.log_severity_level = 3  # keep ORT's placement warnings out of the report
            append_to_session_options(so, provider_options)
            sess = ort.InferenceSession(model_path, so, enable_fallback=0)  # surface EP errors
            del sess
            gc.collect()
        finally:
            if previous is None:
                os.environ.pop(_REPORT_ENV, None)
            else:
                os.environ[_REPORT_ENV] = previous
        if not os.path.exists(report_path):
            raise RuntimeError(f"the EP wrote no report; does this library build support {_REPORT_ENV}?")
        with open(report_path, encoding="utf-8") as f:
            return json.load(f)


def _op_summary(nodes: list[dict[str, Any]]) -> str:
    """'MatMul x2, Add' style summary of a partition's op types, most frequent first."""
    counts = collections.Counter(n.get("op_type", "?") for n in nodes)
    return ", ".join(op if c == 1 else f"{op} x{c}" for op, c in counts.most_common())


def _side(partition: int) -> str:
    return "CPU" if partition < 0 else f"partition {partition}"


def format_report(report: dict[str, Any]) -> str:
    """Human-readable rendering of the EP's claim report."""
    lines: list[str] = []
    for g in report.get("graphs", []):
        total = g.get("nodes_total", 0)
        claimed = g.get("nodes_claimed", 0)
        pct = 100.0 * claimed / total if total else 0.0
        lines.append(f"Graph {g.get('graph', '?')!r}: {claimed}/{total} nodes claimed ({pct:.1f}%)")
        partitions = g.get("partitions", [])
        lines.append(f"  Partitions: {len(partitions)}")
        for i, p in enumerate(partitions):
            nodes = p.get("nodes", [])
            lines.append(f"    {p.get('name', f'partition {i}')}: {len(nodes)} nodes: {_op_summary(nodes)}")
        declined = g.get("declined", [])
        lines.append(f"  Declined: {len(declined)}")
        for d in declined:
            domain = d.get("domain") or "ai.onnx"
            lines.append(
                f"    {d.get('node', '?')} ({domain}::{d.get('op_type', '?')}): {d.get('reason', '')}"
            )
        boundaries = g.get("boundaries", [])
        lines.append(f"  Boundaries (values crossing between partitions or to CPU): {len(boundaries)}")
        for b in boundaries:
            lines.append(f"    {b.get('value', '?')!r} {_side(b.get('from_partition', -1))} -> "
                         f"{_side(b.get('to_partition', -1))}: {b.get('reason', '')}")
    if not lines:
        lines.append("The EP reported no graphs.")
    return "\n".join(lines)
