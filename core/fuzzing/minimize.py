"""Shrinking a failing model to the smallest graph that still fails the same way.

Three greedy steps, each kept only while the outcome's kind stays the same:
the shortest prefix of the nodes whose last node's outputs still fail; only
that node's ancestors; then each remaining earlier node replaced by a graph
input carrying the values it computed (so the failing node sees the same data).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper

import rammer

__all__ = ["minimize", "as_text"]


def _typed_outputs(model: onnx.ModelProto, names: list[str]) -> list[onnx.ValueInfoProto] | None:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return None
    infos = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input)}
    if not all(n in infos for n in names):
        return None
    return [infos[n] for n in names]


def _submodel(model: onnx.ModelProto, nodes: list[onnx.NodeProto], outputs: list[str],
              extra_inputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto | None:
    used = {i for n in nodes for i in n.input} | set(outputs)
    for n in nodes:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                used |= {i for sub in a.g.node for i in sub.input}
    inputs = [v for v in model.graph.input if v.name in used] + [v for v in extra_inputs if v.name in used]
    inits = [t for t in model.graph.initializer if t.name in used]
    g = helper.make_graph(nodes, model.graph.name, inputs, [], initializer=inits)
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    typed = _typed_outputs(m, outputs)
    if typed is None:
        return None
    m.graph.output.extend(typed)
    return m


def _ancestors(nodes: list[onnx.NodeProto], last: onnx.NodeProto) -> list[onnx.NodeProto]:
    producer = {o: n for n in nodes for o in n.output}
    keep, stack = set(), [last]
    while stack:
        n = stack.pop()
        if id(n) in keep:
            continue
        keep.add(id(n))
        names = list(n.input)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names += [i for sub in a.g.node for i in sub.input]
        stack.extend(producer[i] for i in names if i in producer)
    return [n for n in nodes if id(n) in keep]


def minimize(model_bytes: bytes, feeds: dict[str, np.ndarray], kind: str,
             outcome_of: Callable[[bytes, dict[str, np.ndarray]], str]) -> tuple[bytes, dict[str, np.ndarray]]:
    """The smallest model (and feeds) for which ``outcome_of`` still says ``kind``."""
    model = onnx.ModelProto()
    model.ParseFromString(model_bytes)
    nodes = list(model.graph.node)
    best: tuple[bytes, dict[str, np.ndarray]] = (model_bytes, feeds)
    # 1. the shortest failing prefix
    for k in range(1, len(nodes) + 1):
        sub = _submodel(model, nodes[:k], [o for o in nodes[k - 1].output if o], [])
        if sub is None:
            continue
        f = {n: v for n, v in feeds.items() if n in {i.name for i in sub.graph.input}}
        if outcome_of(sub.SerializeToString(), f) == kind:
            best = (sub.SerializeToString(), f)
            nodes = nodes[:k]
            break
    last = nodes[-1]
    outs = [o for o in last.output if o]
    # 2. only the last node's ancestors
    cone = _ancestors(nodes, last)
    sub = _submodel(model, cone, outs, [])
    if sub is not None:
        f = {n: v for n, v in feeds.items() if n in {i.name for i in sub.graph.input}}
        if outcome_of(sub.SerializeToString(), f) == kind:
            best, nodes = (sub.SerializeToString(), f), cone
    # 3. earlier nodes replaced by inputs carrying their values (computed by reference)
    current = onnx.ModelProto()
    current.ParseFromString(best[0])
    cur_feeds = dict(best[1])
    for victim in list(nodes[:-1]):
        trial_nodes = [n for n in nodes if n is not victim]
        vouts = [o for o in victim.output if o]
        values = _values(current, cur_feeds, vouts)
        if values is None:
            continue
        extra = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
                 for o, v in values.items()]
        trial_nodes = _ancestors(trial_nodes, last)
        sub = _submodel(current, trial_nodes, outs, extra)
        if sub is None:
            continue
        f = dict(cur_feeds)
        f.update(values)
        f = {n: v for n, v in f.items() if n in {i.name for i in sub.graph.input}}
        if outcome_of(sub.SerializeToString(), f) == kind:
            current, cur_feeds, nodes = sub, f, trial_nodes
            best = (sub.SerializeToString(), f)
    return best


def _values(model: onnx.ModelProto, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray] | None:
    """The values of intermediate tensors ``names`` (reference backend)."""

    m = onnx.ModelProto()
    m.CopyFrom(model)
    typed = _typed_outputs(m, names)
    if typed is None:
        return None
    m.graph.output.extend(typed)
    try:
        out = rammer.compile(m.SerializeToString(), backend="reference").run(feeds)
    except Exception:
        return None
    return {n: out[n] for n in names}


def as_text(model_bytes: bytes, feeds: dict[str, Any]) -> str:
    """A readable listing of a (small) model and the shapes of its feeds."""
    m = onnx.ModelProto()
    m.ParseFromString(model_bytes)
    try:
        text = onnx.printer.to_text(m.graph)
    except Exception:
        text = str(m.graph)
    shapes = ", ".join(f"{k}: {np.asarray(v).dtype}{list(np.shape(v))}" for k, v in feeds.items())
    return f"{text}\nfeeds: {shapes}"
