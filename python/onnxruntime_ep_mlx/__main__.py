"""Command line tools for the MLX execution provider.

    python -m onnxruntime_ep_mlx info
        library path, versions and the OrtEpDevices the EP exposes.

    python -m onnxruntime_ep_mlx report MODEL.onnx [--json]
        which nodes the EP claims (partitions) and which it declines, and why.

``report`` points ``ONNXRUNTIME_EP_MLX_REPORT`` at a temporary file, creates a
session with MLX + CPU fallback, releases it (the EP writes the claim report on
session release) and prints what the EP wrote.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import sys
import tempfile
from typing import Any

from . import (
    append_to_session_options,
    ep_name,
    get_ep_devices,
    library_path,
    version,
)

_REPORT_ENV = "ONNXRUNTIME_EP_MLX_REPORT"


def _cmd_info(_args: argparse.Namespace) -> int:
    import onnxruntime as ort

    print(f"onnxruntime-ep-mlx {version()}")
    print(f"onnxruntime        {ort.__version__}")
    print(f"EP name            {ep_name()}")
    try:
        path = library_path()
    except FileNotFoundError as exc:
        print(f"library            NOT FOUND\n{exc}")
        return 1
    print(f"library            {path}")
    devices = get_ep_devices()
    print(f"EP devices         {len(devices)}")
    for i, d in enumerate(devices):
        hw = d.device
        print(f"  [{i}] {hw.type} vendor={hw.vendor!r} vendor_id={hw.vendor_id} device_id={hw.device_id}")
        print(f"      ep_vendor={d.ep_vendor!r} ep_metadata={dict(d.ep_metadata)} ep_options={dict(d.ep_options)}")
    return 0 if devices else 1


def collect_report(model_path: str, provider_options: dict[str, str] | None = None) -> dict[str, Any]:
    """Create and release an MLX session for ``model_path``; return the EP's claim report."""
    import onnxruntime as ort

    fd, report_path = tempfile.mkstemp(prefix="ep_mlx_report_", suffix=".json")
    os.close(fd)
    os.unlink(report_path)  # the EP creates it; its absence afterwards means "not written"
    previous = os.environ.get(_REPORT_ENV)
    os.environ[_REPORT_ENV] = report_path
    try:
        so = ort.SessionOptions()
        append_to_session_options(so, provider_options)
        sess = ort.InferenceSession(model_path, so)
        del sess
        gc.collect()
        if not os.path.exists(report_path):
            raise RuntimeError(
                f"the EP wrote no report to {report_path}; does this library build support {_REPORT_ENV}?"
            )
        with open(report_path, encoding="utf-8") as f:
            return json.load(f)
    finally:
        if previous is None:
            os.environ.pop(_REPORT_ENV, None)
        else:
            os.environ[_REPORT_ENV] = previous
        if os.path.exists(report_path):
            os.unlink(report_path)


def _op_summary(nodes: list[dict[str, Any]]) -> str:
    """'MatMul x2, Add' style summary of a partition's op types, most frequent first."""
    counts = collections.Counter(n.get("op_type", "?") for n in nodes)
    return ", ".join(op if c == 1 else f"{op} x{c}" for op, c in counts.most_common())


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
        for p in partitions:
            nodes = p.get("nodes", [])
            lines.append(f"    {p.get('name', '?')}: {len(nodes)} nodes: {_op_summary(nodes)}")
        declined = g.get("declined", [])
        lines.append(f"  Declined: {len(declined)}")
        for d in declined:
            domain = d.get("domain") or "ai.onnx"
            lines.append(
                f"    {d.get('node', '?')} ({domain}::{d.get('op_type', '?')}): {d.get('reason', '')}"
            )
    runtime = report.get("runtime", {}).get("partitions", [])
    if runtime:
        lines.append("Runtime:")
        for r in runtime:
            lines.append(
                f"  {r.get('name', '?')}: runs={r.get('runs', 0)} "
                f"cache_hits={r.get('cache_hits', 0)} cache_misses={r.get('cache_misses', 0)}"
            )
    if not lines:
        lines.append("The EP reported no graphs.")
    return "\n".join(lines)


def _cmd_report(args: argparse.Namespace) -> int:
    report = collect_report(args.model)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"Model: {args.model}")
        print(format_report(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onnxruntime_ep_mlx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="library path, versions, EP devices").set_defaults(func=_cmd_info)
    rep = sub.add_parser("report", help="print which nodes of a model the EP claims")
    rep.add_argument("model", help="path of an .onnx model")
    rep.add_argument("--json", action="store_true", help="print the EP's raw JSON report")
    rep.set_defaults(func=_cmd_report)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
