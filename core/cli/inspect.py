"""``rammer inspect``: what a model contains, as rammer sees it after import."""

from __future__ import annotations

import argparse
import json

from ..cost import graph_flops, node_flops
from .common import add_model_args, load_graph, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show a model's ops, shapes, parameters and FLOPs")
    add_model_args(p)
    p.add_argument("--nodes", action="store_true", help="list every node with its output shapes")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _human(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000
    return f"{n:.3g}P"


def run(args: argparse.Namespace) -> int:
    graph, label = load_graph(args)
    counts = graph.op_counts()
    flops_by_op: dict[str, int] = {}
    for n in graph.nodes:
        flops_by_op[n.op_type] = flops_by_op.get(n.op_type, 0) + node_flops(n, graph)
    total = graph_flops(graph)
    if args.json:
        print(json.dumps({
            "model": label, "nodes": len(graph.nodes), "parameters": graph.num_parameters, "flops": total,
            "opset": dict(graph.opset),
            "inputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in graph.inputs],
            "outputs": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)} for t in graph.outputs],
            "ops": {k: {"count": v, "flops": flops_by_op[k]} for k, v in sorted(counts.items())},
        }, indent=2))
        return 0
    print(f"model {label}: {len(graph.nodes)} nodes, {_human(graph.num_parameters)} parameters "
          f"({_human(sum(v.nbytes for v in graph.initializers.values()))}B), {_human(total)}FLOPs per run, "
          f"opset {graph.opset.get('', '?')}")
    for kind, tensors in (("input", graph.inputs), ("output", graph.outputs)):
        for t in tensors:
            print(f"  {kind:6s} {t.name}: {t.dtype}{list(t.shape)}")
    rows = [[op, counts[op], _human(flops_by_op[op])] for op in sorted(counts, key=lambda o: -counts[o])]
    print(table(rows, ["op", "count", "FLOPs"]))
    if args.nodes:
        for n in graph.nodes:
            outs = ", ".join(str(graph.value_info[o]) for o in n.outputs if o)
            print(f"  {n.name} ({n.op_type}) -> {outs}")
    return 0
