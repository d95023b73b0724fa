"""Reading the EP's claim report for whole-model tests: partitions, declined nodes and the values
that cross partition boundaries, summarised for assertion messages and benchmark tables."""
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


def crossing_values(graph_entry, model):
    """Values a partition reads from another partition or from a CPU node, as
    'producer_op -> consumer_op[input k]' counts. Nodes are matched by name to `model`; nodes ORT
    created while optimizing (fusions) are not in the model and are skipped."""
    where = {}
    for i, p in enumerate(graph_entry.get("partitions", [])):
        for n in p["nodes"]:
            where[n["name"]] = f"p{i}"
    for d in graph_entry.get("declined", []):
        where[d["node"]] = "cpu"
    producer = {}
    for node in model.graph.node:
        for out in node.output:
            producer[out] = node
    cuts = collections.Counter()
    for node in model.graph.node:
        here = where.get(node.name)
        if here is None or here == "cpu":
            continue
        for k, value in enumerate(node.input):
            src = producer.get(value)
            if src is None or src.name not in where or where[src.name] == here:
                continue
            origin = "CPU " if where[src.name] == "cpu" else ""
            cuts[f"{origin}{src.op_type} -> {node.op_type}[{k}]"] += 1
    return cuts


def describe(graph_entry, model=None):
    """One paragraph: claimed/total, partitions with sizes, declined op types with reasons, and
    (given the model) the boundary edges."""
    parts = graph_entry.get("partitions", [])
    sizes = sorted((len(p["nodes"]) for p in parts), reverse=True)
    lines = [f"{graph_entry.get('nodes_claimed', 0)}/{graph_entry.get('nodes_total', 0)} nodes claimed, "
             f"{len(parts)} MLX partition(s) of sizes {sizes}"]
    declined = collections.Counter((d["op_type"], d["reason"]) for d in graph_entry.get("declined", []))
    for (op, reason), count in sorted(declined.items()):
        lines.append(f"  declined {op} x{count}: {reason}")
    if model is not None:
        for edge, count in crossing_values(graph_entry, model).most_common():
            lines.append(f"  boundary {edge} x{count}")
    return "\n".join(lines)


def declined_ops(graph_entry):
    """{op_type: count} of the nodes left to the CPU EP."""
    return dict(collections.Counter(d["op_type"] for d in graph_entry.get("declined", [])))
