"""Op-by-op execution of an IR graph with the registry's numpy implementations.

This is the executable specification: the ``reference`` backend wraps it,
the frontend uses it to fold control flow, and other backends fall back to it
for ops they do not compile.  With ``check=True`` every output is checked
against the dtype and shape inferred at import, so an op whose ``infer`` and
``compute`` disagree fails here, naming the node.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import numpy as np

from .errors import OpExecutionError, RammerError
from .ir import Graph, Node, dtype_name, outer_names
from .ops.registry import OpContext, get_op

#: Free plans by graph: graphs are immutable, so a plan holds for every run
#: (and every iteration of a Loop body); weak keys let graphs be collected.
_FREE_PLANS: weakref.WeakKeyDictionary[Graph, dict[int, list[str]]] = weakref.WeakKeyDictionary()


def _free_plan(graph: Graph) -> dict[int, list[str]]:
    plan = _FREE_PLANS.get(graph)
    if plan is None:
        plan = _FREE_PLANS[graph] = _last_uses(graph)
    return plan


def _last_uses(graph: Graph) -> dict[int, list[str]]:
    """Node index -> tensors whose last reader is that node (to free them)."""
    last: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in list(node.inputs) + sorted(outer_names(node)):
            if name:
                last[name] = i
    keep = {t.name for t in graph.outputs}
    by_node: dict[int, list[str]] = {}
    for name, i in last.items():
        if name not in keep and name not in graph.initializers:
            by_node.setdefault(i, []).append(name)
    return by_node


def run_node(node: Node, graph: Graph, env: _Env, check: bool) -> list[np.ndarray]:
    op = get_op(node)
    values = [env.get(n) if n else None for n in node.inputs]
    infos = [env.info(n) if n else None for n in node.inputs]
    ctx = OpContext(node, graph.opset.get(node.domain, 1), infos, values,
                    run_graph=lambda g, feeds: run_graph(g, feeds, check=check, parent=env))
    try:
        out = op.compute(ctx, *values)
    except RammerError:
        raise
    except Exception as exc:
        raise OpExecutionError(f"{node.label} failed: {type(exc).__name__}: {exc}") from exc
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    results = []
    for i, name in enumerate(node.outputs):
        if not name:
            continue
        if i >= len(outs):
            raise OpExecutionError(f"{node.label} produced {len(outs)} outputs, expected {len(node.outputs)}")
        arr = np.asarray(outs[i])
        if check:
            info = graph.value_info.get(name)
            if info is not None and (dtype_name(arr.dtype) != info.dtype or tuple(arr.shape) != info.shape):
                raise OpExecutionError(
                    f"{node.label}: output '{name}' is {dtype_name(arr.dtype)}{list(arr.shape)} but was "
                    f"inferred as {info.dtype}{list(info.shape)} (an op infer/compute mismatch in rammer)"
                )
        env.values[name] = arr
        results.append(arr)
    return results


class _Env:
    def __init__(self, graph: Graph, parent: _Env | None):
        self.graph = graph
        self.parent = parent
        self.values: dict[str, np.ndarray] = dict(graph.initializers)

    def get(self, name: str) -> np.ndarray:
        env: _Env | None = self
        while env is not None:
            if name in env.values:
                return env.values[name]
            env = env.parent
        raise OpExecutionError(f"tensor '{name}' has no value (graph '{self.graph.name}')")

    def info(self, name: str):
        env: _Env | None = self
        while env is not None:
            if name in env.graph.value_info:
                return env.graph.value_info[name]
            env = env.parent
        return None


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray], check: bool = True,
              parent: _Env | None = None) -> list[np.ndarray]:
    """Run ``graph`` on ``feeds``; returns the outputs in graph order."""
    env = _Env(graph, parent)
    for t in graph.inputs:
        if t.name in feeds:
            env.values[t.name] = feeds[t.name]
    frees = _free_plan(graph)
    with np.errstate(all="ignore"):  # NaN/Inf propagate as in ONNX, silently
        for i, node in enumerate(graph.nodes):
            run_node(node, graph, env, check)
            for name in frees.get(i, ()):
                env.values.pop(name, None)
    return [env.get(t.name) for t in graph.outputs]
