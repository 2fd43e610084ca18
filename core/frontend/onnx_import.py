"""ONNX -> IR: static shapes, constant folding, one clear error per problem.

The import walks the nodes in topological order once.  For each node it asks
the op registry for output dtypes and shapes (with the values of constant
inputs at hand, so shape computations like ``Shape -> Gather -> Concat ->
Reshape`` resolve), and evaluates the node right away with the reference
implementation when all its inputs are constants (constant folding).  What
is left is a fully static graph.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from .. import dtypes
from ..errors import ModelLoadError, RammerError, ShapeError, UnsupportedOpError
from ..ir import Graph, Node, TensorInfo, dtype_name, outer_names
from ..ops.registry import OpContext, lookup

#: Folding is skipped for outputs larger than this (elements): such constants
#: are cheaper to compute at run time than to keep in the model.
MAX_FOLD_ELEMENTS = 1 << 24

#: Ops whose outputs depend only on the shapes of their inputs, never on values.
_SHAPE_ONLY_OPS = frozenset({("", "Shape"), ("", "Size")})

InputShapes = Mapping[str, Sequence[int]]


# -- attributes ---------------------------------------------------------------


def _tensor_value(t: onnx.TensorProto, where: str) -> np.ndarray:
    dtypes.from_onnx(t.data_type, where)  # clear error for unsupported element types
    try:
        arr = numpy_helper.to_array(t)
    except Exception as exc:
        raise ModelLoadError(f"{where}: cannot read tensor '{t.name}': {exc}") from None
    if arr.dtype.kind in "SU":
        arr = arr.astype(object)
    return arr


def _attr_value(attr: onnx.AttributeProto, where: str, scope: _Scope) -> Any:
    A = onnx.AttributeProto
    if attr.ref_attr_name:
        raise ModelLoadError(f"{where}: attribute '{attr.name}' refers to a function attribute; inline the function")
    if attr.type == A.FLOAT:
        return float(attr.f)
    if attr.type == A.INT:
        return int(attr.i)
    if attr.type == A.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if attr.type == A.FLOATS:
        return [float(v) for v in attr.floats]
    if attr.type == A.INTS:
        return [int(v) for v in attr.ints]
    if attr.type == A.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if attr.type == A.TENSOR:
        return _tensor_value(attr.t, f"{where} attribute '{attr.name}'")
    if attr.type == A.TENSORS:
        return [_tensor_value(t, f"{where} attribute '{attr.name}'") for t in attr.tensors]
    if attr.type == A.GRAPH:
        return _import_graph(attr.g, {}, scope, f"{where} attribute '{attr.name}'")
    if attr.type == A.GRAPHS:
        return [_import_graph(g, {}, scope, f"{where} attribute '{attr.name}'") for g in attr.graphs]
    if attr.type == A.TYPE_PROTO:
        return attr.tp
    raise ModelLoadError(f"{where}: attribute '{attr.name}' has unsupported type {A.AttributeType.Name(attr.type)}")


# -- scopes -------------------------------------------------------------------


class _Scope:
    """Tensor infos and constant values visible at a point of the import."""

    def __init__(self, parent: _Scope | None, opset: Mapping[str, int]):
        self.parent = parent
        self.opset = opset
        self.infos: dict[str, TensorInfo] = {}
        self.consts: dict[str, np.ndarray] = {}

    def info(self, name: str) -> TensorInfo | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.infos:
                return s.infos[name]
            s = s.parent
        return None

    def const(self, name: str) -> np.ndarray | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.consts:
                return s.consts[name]
            if name in s.infos:
                return None  # shadowed by a non-constant
            s = s.parent
        return None


# -- graph import ---------------------------------------------------------------


def _value_info(vi: onnx.ValueInfoProto, input_shapes: InputShapes, where: str) -> TensorInfo:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise ShapeError(f"{where} '{vi.name}' is not a tensor (sequences, maps and optionals are not supported)")
    dtype = dtypes.from_onnx(tt.elem_type, f"{where} '{vi.name}'")
    if vi.name in input_shapes:
        shape = tuple(int(d) for d in input_shapes[vi.name])
        if tt.HasField("shape"):
            declared = tt.shape.dim
            if len(declared) != len(shape):
                raise ShapeError(
                    f"input_shapes gives '{vi.name}' rank {len(shape)} but the model declares rank {len(declared)}"
                )
            for i, (d, s) in enumerate(zip(declared, shape)):
                if d.HasField("dim_value") and d.dim_value != s:
                    raise ShapeError(
                        f"input_shapes gives '{vi.name}' dim {i} = {s} but the model fixes it to {d.dim_value}"
                    )
        return TensorInfo(vi.name, dtype, shape)
    if not tt.HasField("shape"):
        raise ShapeError(
            f"{where} '{vi.name}' has no shape; give one with input_shapes={{'{vi.name}': (...)}} "
            f"(CLI: --shape {vi.name}=d0,d1,...)"
        )
    shape = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value >= 0:
            shape.append(int(d.dim_value))
        else:
            label = f"'{d.dim_param}'" if d.dim_param else "unknown"
            raise ShapeError(
                f"{where} '{vi.name}' dim {i} is dynamic ({label}); rammer compiles static shapes: "
                f"give input_shapes={{'{vi.name}': (...)}} (CLI: --shape {vi.name}=d0,d1,...)"
            )
    return TensorInfo(vi.name, dtype, tuple(shape))


def _import_graph(g: onnx.GraphProto, input_shapes: InputShapes, parent: _Scope | None, where: str,
                  opset: Mapping[str, int] | None = None, fold: bool = True) -> Graph:
    scope = _Scope(parent, opset if opset is not None else (parent.opset if parent else {}))
    is_subgraph = parent is not None
    initializers: dict[str, np.ndarray] = {}
    for t in g.initializer:
        arr = _tensor_value(t, f"initializer '{t.name}'")
        initializers[t.name] = arr
        scope.infos[t.name] = TensorInfo(t.name, dtype_name(arr.dtype), arr.shape)
        scope.consts[t.name] = arr
    if g.sparse_initializer:
        raise ModelLoadError(f"{where}: sparse initializers are not supported")

    inputs: list[TensorInfo] = []
    for vi in g.input:
        if vi.name in initializers:
            continue  # IR < 4: initializers listed as inputs are constants here
        info = _value_info(vi, input_shapes, "subgraph input" if is_subgraph else "graph input")
        inputs.append(info)
        scope.infos[vi.name] = info

    nodes: list[Node] = []
    for index, np_ in enumerate(g.node):
        name = np_.name or f"{np_.op_type}_{index}"
        label = f"node '{name}' ({np_.op_type})"
        attrs = {a.name: _attr_value(a, label, scope) for a in np_.attribute}
        node = Node(np_.op_type, tuple(np_.input), tuple(np_.output), name, np_.domain, attrs)
        op = lookup(node.op_type, node.domain)
        if op is None:  # _check_supported runs first at top level; subgraphs land here
            raise UnsupportedOpError(f"{label}: op {node.domain or 'ai.onnx'}::{node.op_type} is not supported")
        in_infos: list[TensorInfo | None] = []
        in_values: list[np.ndarray | None] = []
        for tname in node.inputs:
            if not tname:
                in_infos.append(None)
                in_values.append(None)
                continue
            info = scope.info(tname)
            if info is None:
                raise ModelLoadError(f"{label} reads tensor '{tname}', which is not defined before it")
            in_infos.append(info)
            in_values.append(scope.const(tname))
        ctx = OpContext(node, scope.opset.get(node.domain or "", 1), in_infos, in_values, run_graph=_fold_run_graph)
        try:
            specs = list(op.infer(ctx))
        except RammerError:
            raise
        except Exception as exc:
            raise ShapeError(f"{label}: shape inference failed ({type(exc).__name__}: {exc})") from exc
        outs = list(node.outputs)
        out_infos: dict[str, TensorInfo] = {}
        for i, oname in enumerate(outs):
            if not oname:
                continue
            if i >= len(specs):
                raise ShapeError(f"{label}: inference gave {len(specs)} outputs, the node has {len(outs)}")
            dt, shape = specs[i]
            out_infos[oname] = TensorInfo(oname, dt, tuple(int(d) for d in shape))
        if fold and (node.domain, node.op_type) in _SHAPE_ONLY_OPS and all(in_infos):
            # Their outputs depend on static shapes only: stand-in arrays of
            # the right shape (no memory: broadcast views of one zero) suffice.
            in_values = [np.broadcast_to(np.zeros((), i.np_dtype), i.shape) for i in in_infos if i]
        folded = fold and op.foldable and _all_const(node, in_values) and not _captures_dynamic(node, scope)
        if folded and sum(math.prod(i.shape) for i in out_infos.values()) <= MAX_FOLD_ELEMENTS:
            values = _evaluate(op, ctx, in_values, label)
            for i, oname in enumerate(outs):
                if oname:
                    arr = np.asarray(values[i])
                    initializers[oname] = arr
                    scope.consts[oname] = arr
                    scope.infos[oname] = TensorInfo(oname, dtype_name(arr.dtype), arr.shape)
            continue
        scope.infos.update(out_infos)
        nodes.append(node)

    outputs: list[TensorInfo] = []
    for vi in g.output:
        info = scope.info(vi.name)
        if info is None:
            raise ModelLoadError(f"{where}: output '{vi.name}' is never computed")
        outputs.append(TensorInfo(vi.name, info.dtype, info.shape))
    return _prune(g.name or "main", inputs, outputs, nodes, initializers, scope, keep_all_inputs=True)


def _all_const(node: Node, values: list[np.ndarray | None]) -> bool:
    return all(v is not None for n, v in zip(node.inputs, values) if n)


def _captures_dynamic(node: Node, scope: _Scope) -> bool:
    return any(scope.const(n) is None for n in outer_names(node))


def _fold_run_graph(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from ..interpreter import run_graph  # local import: the interpreter imports the registry

    return run_graph(graph, feeds)


def _evaluate(op: Any, ctx: OpContext, values: list[np.ndarray | None], label: str) -> list[np.ndarray]:
    try:
        with np.errstate(all="ignore"):
            out = op.compute(ctx, *values)
    except RammerError:
        raise
    except Exception as exc:
        raise ShapeError(f"{label}: constant folding failed ({type(exc).__name__}: {exc})") from exc
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _prune(name: str, inputs: list[TensorInfo], outputs: list[TensorInfo], nodes: list[Node],
           initializers: dict[str, np.ndarray], scope: _Scope, keep_all_inputs: bool) -> Graph:
    """Drop nodes and initializers no output depends on (left over by folding)."""
    needed = {t.name for t in outputs}
    kept: list[Node] = []
    for node in reversed(nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(i for i in node.inputs if i)
            needed.update(outer_names(node))
    kept.reverse()
    inits = {k: v for k, v in initializers.items() if k in needed}
    value_info = {t.name: t for t in inputs}
    value_info.update({k: scope.infos[k] for k in inits})
    for node in kept:
        value_info.update({o: scope.infos[o] for o in node.outputs if o})
    return Graph(name, tuple(inputs), tuple(outputs), tuple(kept), inits, value_info, dict(scope.opset))


# -- model import ---------------------------------------------------------------


def unsupported_ops(model: onnx.ModelProto) -> list[tuple[str, str, str]]:
    """(op_type, domain, node name) of every node no registry entry covers."""
    missing: list[tuple[str, str, str]] = []

    def walk(g: onnx.GraphProto) -> None:
        for i, n in enumerate(g.node):
            if lookup(n.op_type, n.domain) is None:
                missing.append((n.op_type, n.domain, n.name or f"{n.op_type}_{i}"))
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)

    walk(model.graph)
    return missing


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    return {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import}


def raise_if_unsupported(model: onnx.ModelProto) -> None:
    """One error listing every unsupported op type with its nodes and opset."""
    opset = _opsets(model)
    missing = unsupported_ops(model)
    if missing:
        by_op: dict[tuple[str, str], list[str]] = {}
        for op_type, domain, node_name in missing:
            by_op.setdefault((domain, op_type), []).append(node_name)
        lines = []
        for (domain, op_type), names in sorted(by_op.items()):
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            lines.append(f"{domain or 'ai.onnx'}::{op_type} (opset {opset.get(domain, '?')}) at nodes {shown}")
        raise UnsupportedOpError(
            f"{len(by_op)} unsupported op type(s): " + "; ".join(lines)
            + ". Re-export the model with other ops, or add them to the op registry (docs/architecture.md).",
            missing,
        )


def import_model(model: onnx.ModelProto, input_shapes: InputShapes | None = None, fold: bool = True) -> Graph:
    opset = _opsets(model)
    raise_if_unsupported(model)
    known = {t.name for t in model.graph.input}
    unknown = set(input_shapes or {}) - known
    if unknown:
        raise ShapeError(
            f"input_shapes names {sorted(unknown)}, which are not inputs of the model (inputs: {sorted(known)})"
        )
    return _import_graph(model.graph, input_shapes or {}, None, "model", opset=opset, fold=fold)
