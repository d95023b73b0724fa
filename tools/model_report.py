"""Prints, for each ONNX model given, the EP's claim summary as a markdown row: nodes claimed /
total, partitions, boundaries, and the declined op types (with counts).

    python tools/model_report.py MODEL.onnx [...]
"""
import collections
import sys

import onnxruntime_ep_mlx as mlx_ep


def main(paths):
    print("| model | claimed/total | partitions | boundaries | declined |")
    print("| --- | ---: | ---: | ---: | --- |")
    for path in paths:
        try:
            report = mlx_ep.claim_report(path)
        except Exception as e:  # noqa: BLE001 - one bad model must not hide the others
            print(f"| {path} | error: {str(e)[:120]} | | | |")
            continue
        for g in report["graphs"]:
            declined = collections.Counter(d["op_type"] for d in g["declined"])
            ops = ", ".join(f"{op} x{c}" if c > 1 else op for op, c in declined.most_common())
            print(f"| {path.split('/')[-1]} | {g['nodes_claimed']}/{g['nodes_total']} | {len(g['partitions'])} "
                  f"| {len(g.get('boundaries', []))} | {ops} |")


if __name__ == "__main__":
    main(sys.argv[1:])
