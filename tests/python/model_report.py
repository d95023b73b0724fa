"""Reading the EP's claim report for whole-model tests: partitions, declined nodes and the values
that cross partition boundaries (the report's own explanation), summarised for assertion
messages and benchmark tables."""
import collections

import onnx

import onnxruntime_ep_mlx as mlx_ep


def main_graph(report, model):
    """The report entry of `model`'s main graph (subgraphs of If/Loop get entries of their own)."""
    graphs = report.get("graphs", [])
    named = [g for g in graphs if g.get("graph") == model.graph.name]
    return named[0] if named else (graphs[0] if graphs else {"nodes_total": 0, "nodes_claimed": 0,
                                                              "partitions": [], "declined": []})


def claim_summary(model_path):
    """(report, main graph entry, ModelProto) for the model at `model_path`."""
    model = onnx.load(model_path, load_external_data=False)
    report = mlx_ep.claim_report(model_path)
    return report, main_graph(report, model), model


def describe(graph_entry):
    """One paragraph: claimed/total, partitions with sizes, declined op types with reasons, and
    the values crossing partition boundaries with the EP's reason for each."""
    parts = graph_entry.get("partitions", [])
    sizes = sorted((len(p["nodes"]) for p in parts), reverse=True)
    lines = [f"{graph_entry.get('nodes_claimed', 0)}/{graph_entry.get('nodes_total', 0)} nodes claimed, "
             f"{len(parts)} MLX partition(s) of sizes {sizes}"]
    declined = collections.Counter((d["op_type"], d["reason"]) for d in graph_entry.get("declined", []))
    for (op, reason), count in sorted(declined.items()):
        lines.append(f"  declined {op} x{count}: {reason}")
    for b in graph_entry.get("boundaries", []):
        lines.append(f"  boundary {b['value']!r} ({b['producer']} -> {b['consumer']}): {b['reason']}")
    return "\n".join(lines)


def declined_ops(graph_entry):
    """{op_type: count} of the nodes left to the CPU EP."""
    return dict(collections.Counter(d["op_type"] for d in graph_entry.get("declined", [])))
