"""Where a corpus model's time goes on ``cpu`` (1 vEU), next to onnxruntime's own profile (1 thread).

rammer's side is ``backends/cpu/profile.profile_ops`` (each rOperator's task rows run alone, best of
``--repeat``); onnxruntime's is its session profiler (``enable_profiling``), each node's kernel time
averaged over ``--runs`` runs after a warm-up.  Both are summed by op kind (rammer: the rOperator's
family and its first node's op type; onnxruntime: the node's op type), and the ``--top`` slowest
rOperators are listed with their nodes, so a gap can be traced to an op kind and a shape class.

    python ci/profile_corpus.py --models efficientnet-b0,convnext --top 15
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def ort_profile(onnx_bytes: bytes, feeds: dict[str, Any], runs: int) -> dict[str, float]:
    """Microseconds per run by op type from onnxruntime's profiler (1 intra-op thread)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory() as folder:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(folder, "ort")
        sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
        for _ in range(2):
            sess.run(None, feeds)
        path = sess.end_profiling()
        # the profile of the warm-up is discarded: a second session profiles the timed runs
        sess = ort.InferenceSession(onnx_bytes, so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        for _ in range(runs):
            sess.run(None, feeds)
        path = sess.end_profiling()
        with open(path) as fh:
            events = json.load(fh)
    by_kind: dict[str, float] = defaultdict(float)
    for ev in events:
        if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time"):
            by_kind[ev["args"].get("op_name", "?")] += ev["dur"]
    return {k: v / (runs + 1) for k, v in by_kind.items()}


def describe(graph: Any, op: Any) -> str:
    """The op types an rOperator covers and its first node's input shapes and window attributes."""
    if not op.nodes:
        return op.name
    first = op.nodes[0]
    shapes = []
    for name in first.inputs:
        if not name:
            continue
        try:
            shapes.append("x".join(map(str, graph.tensor(name).shape)))
        except KeyError:
            shapes.append("?")
    attrs = {k: first.attrs[k] for k in ("group", "kernel_shape", "strides", "pads", "dilations") if k in first.attrs}
    ops = "+".join(n.op_type for n in op.nodes)
    return f"{ops} [{' '.join(shapes)}] {attrs}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import corpus
    import onnx

    from rammer.backends.cpu.compiler import compile_program
    from rammer.backends.cpu.graph_passes import prepare
    from rammer.backends.cpu.profile import profile_ops
    from rammer.backends.cpu.runtime import CpuExecutable
    from rammer.frontend import load

    for name in args.models.split(","):
        entry = corpus.select(models=name)[0]
        built = corpus.build(entry, "full")
        shapes = {k: v.shape for k, v in built.feeds.items()}
        graph = load(onnx.load_from_string(built.onnx), input_shapes=shapes)
        prepared = prepare(graph)
        compiled = compile_program(prepared, num_veus=1)
        rows = profile_ops(CpuExecutable(prepared, compiled.program), compiled, built.feeds, repeat=args.repeat)
        kinds: dict[str, float] = defaultdict(float)
        for r in rows:
            kinds[r["family"]] += r["us"]
        ort_kinds = ort_profile(built.onnx, built.feeds, args.runs)
        total = sum(r["us"] for r in rows)
        print(f"== {name}: rammer ops {total / 1e3:.2f} ms, onnxruntime nodes {sum(ort_kinds.values()) / 1e3:.2f} ms")
        print("  rammer by family:  " + ", ".join(f"{k} {v / 1e3:.2f}" for k, v in
                                                   sorted(kinds.items(), key=lambda kv: -kv[1])))
        print("  onnxruntime by op: " + ", ".join(f"{k} {v / 1e3:.2f}" for k, v in
                                                   sorted(ort_kinds.items(), key=lambda kv: -kv[1])))
        by_name = {op.name: op for op in compiled.lowered.ops}
        for r in rows[:args.top]:
            op = by_name.get(r["op"])
            what = describe(prepared, op) if op is not None else ""
            rate = f"{op.flops / r['us'] / 1e3:6.1f} GF/s" if op is not None and op.flops else " " * 11
            print(f"    {r['us']:8.1f} us {rate} {r['family']:<14} {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
