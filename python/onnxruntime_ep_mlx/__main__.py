"""Command line tools for the MLX execution provider.

    python -m onnxruntime_ep_mlx info
        library path, versions and the OrtEpDevices the EP exposes.

    python -m onnxruntime_ep_mlx report MODEL.onnx [--json]
        which nodes the EP claims (partitions) and which it declines, and why;
        --json prints the EP's whole report (including its runtime section).

``report`` points ``ONNXRUNTIME_EP_MLX_REPORT`` at a temporary file, creates a
session with MLX + CPU fallback, releases it (the EP writes the claim report on
session release) and prints what the EP wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import ep_name, get_ep_devices, library_path, version
from .report import collect_report, format_report


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
    if devices:
        md = devices[0].ep_metadata
        blas = md.get("blas", "?")
        where = md.get("blas_library") or md.get("blas_sgemm_library", "")
        threads = f", {md['blas_threads']} thread(s)" if "blas_threads" in md else ""
        print(f"BLAS               {blas} {where}{threads}")
        if md.get("blas_note"):
            print(f"                   {md['blas_note']}")
    for i, d in enumerate(devices):
        hw = d.device
        print(f"  [{i}] {hw.type} vendor={hw.vendor!r} vendor_id={hw.vendor_id} device_id={hw.device_id}")
        print(f"      ep_vendor={d.ep_vendor!r} ep_metadata={dict(d.ep_metadata)} ep_options={dict(d.ep_options)}")
    return 0 if devices else 1


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
    try:
        return args.func(args)
    except Exception as exc:  # report failures (missing model, EP errors) without a traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
