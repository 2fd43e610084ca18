"""ONNX -> IR: static shapes, constant folding, one clear error per problem.

The import walks the nodes of each graph in topological order once and hands
them to a :class:`~.builder.GraphBuilder`, which infers shapes and folds
constants (see builder.py).  Two kinds of nodes are handled here instead:
sequence ops, lowered to tensor ops (sequences.py), and ``If`` nodes whose
condition is a constant, whose taken branch is inlined (exporters emit those
for shape checks).  What is left is a fully static graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .. import dtypes
from ..errors import ModelLoadError, RammerError, ShapeError, UnsupportedOpError
from ..ir import Graph, Node, TensorInfo
from ..ops.control import unreachable_branch
from ..ops.registry import lookup
from .builder import MAX_FOLD_ELEMENTS, GraphBuilder, Scope
from .inputs import InputShapes, bind_input_shapes, input_info
from .limits import Limits, check_dims, check_tensor, resolve_limits
from .sequences import LOWERED_OPS, lower
from .upgrade import upgrade_context

__all__ = ["MAX_FOLD_ELEMENTS", "import_model", "raise_if_unsupported", "unsupported_ops"]

# -- attributes ---------------------------------------------------------------


def _tensor_value(t: onnx.TensorProto, where: str, limits: Limits) -> np.ndarray:
    dtype = dtypes.from_onnx(t.data_type, f"{where} '{t.name}'")  # clear error naming the tensor
    if any(d < 0 for d in t.dims):
        raise ModelLoadError(f"{where}: tensor '{t.name}' has a negative dim {list(t.dims)}; fix the model")
    check_dims(t.name, list(t.dims), dtypes.np_dtype(dtype).itemsize, where, limits)
    try:
        arr = numpy_helper.to_array(t)
    except Exception as exc:
        raise ModelLoadError(f"{where}: cannot read tensor '{t.name}' (dims {list(t.dims)}, "
                             f"{onnx.TensorProto.DataType.Name(t.data_type)}): {exc}; its data does not match "
                             f"its dims and type, fix or re-export the model") from None
    if tuple(arr.shape) != tuple(t.dims):
        raise ModelLoadError(f"{where}: tensor '{t.name}' holds {arr.size} values but its dims {list(t.dims)} "
                             f"need {int(np.prod(t.dims))}; fix or re-export the model")
    if arr.dtype.kind in "SU":
        arr = arr.astype(object)
    return arr


def _attr_value(attr: onnx.AttributeProto, where: str, builder: GraphBuilder) -> Any:
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
        return _tensor_value(attr.t, f"{where} attribute '{attr.name}'", builder.limits)
    if attr.type == A.TENSORS:
        return [_tensor_value(t, f"{where} attribute '{attr.name}'", builder.limits) for t in attr.tensors]
    if attr.type == A.GRAPH:
        return _import_graph(attr.g, {}, builder, f"{where} attribute '{attr.name}'")
    if attr.type == A.GRAPHS:
        return [_import_graph(g, {}, builder, f"{where} attribute '{attr.name}'") for g in attr.graphs]
    if attr.type == A.TYPE_PROTO:
        return attr.tp
    raise ModelLoadError(f"{where}: attribute '{attr.name}' has unsupported type {A.AttributeType.Name(attr.type)}")


# -- graph import ---------------------------------------------------------------


def _all_names(g: onnx.GraphProto, into: set[str]) -> set[str]:
    """Every tensor name defined in ``g`` and its subgraphs (fresh names avoid them)."""
    into.update(vi.name for vi in g.input)
    into.update(t.name for t in g.initializer)
    for n in g.node:
        into.update(n.output)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _all_names(sub, into)
    return into


def _import_graph(g: onnx.GraphProto, input_shapes: InputShapes, parent: GraphBuilder | None, where: str,
                  opset: Mapping[str, int] | None = None, fold: bool = True, limits: Limits | None = None) -> Graph:
    if opset is None:
        assert parent is not None, "the top-level graph needs the model's opsets"
        opset = parent.scope.opset
    scope = Scope(parent.scope if parent else None, opset)
    taken = parent._taken if parent else _all_names(g, set())
    b = GraphBuilder(scope, {vi.name for vi in g.output}, fold, taken, parent.limits if parent else limits)
    _add_initializers(b, g, where)
    inputs: list[TensorInfo] = []
    for vi in g.input:
        if vi.name in b.initializers:
            continue  # IR < 4: initializers listed as inputs are constants here
        info = input_info(vi, input_shapes, "subgraph input" if parent else "graph input")
        check_tensor(info, f"{where} input", b.limits)
        inputs.append(info)
        scope.infos[vi.name] = info
    _import_nodes(b, g.node, "")
    for vi in g.output:
        if scope.resolve(vi.name) != vi.name and vi.name not in scope.infos:
            # An output that is an alias of an enclosing graph's tensor: copy it under its name.
            b.add(Node("Identity", (vi.name,), (vi.name,), f"{where}/output_{vi.name}", ""))
    outputs = [b.output_info(vi.name, where) for vi in g.output]
    if parent is None:
        _check_declared_output_types(g, outputs)
    return b.build(g.name or "main", inputs, outputs)


def _check_declared_output_types(g: onnx.GraphProto, outputs: list[TensorInfo]) -> None:
    """A graph output whose declared element type is not the one its node computes is a broken
    model (onnxruntime refuses it too); callers would otherwise get arrays of a surprising dtype.
    (Declared *shapes* are not compared: exporters often leave dims fixed that input_shapes rebinds.)"""
    for vi, info in zip(g.output, outputs):
        declared = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if not declared:
            continue
        try:
            want = dtypes.from_onnx(declared)
        except RammerError:
            continue  # a type rammer has no numpy dtype for; the op that makes it decides
        if want != info.dtype:
            raise ShapeError(f"model output '{vi.name}' is declared {want} but the model computes {info.dtype} "
                             f"for it; fix the output's declared type or the nodes that make it")


def _if_branches(proto: onnx.NodeProto, label: str, b: GraphBuilder) -> dict[str, Any]:
    """The attributes of an ``If`` whose condition is known only at run time.

    Both branches are imported.  A branch that is invalid at the bound shapes
    (exporters often keep one that only other input sizes can take) becomes a
    branch that fails at run time naming itself, so the model compiles and runs
    whenever the valid branch is taken; when both are invalid, the first error stands.
    """
    attrs: dict[str, Any] = {}
    failures: dict[str, RammerError] = {}
    for a in proto.attribute:
        if a.name in ("then_branch", "else_branch") and a.type == onnx.AttributeProto.GRAPH:
            try:
                attrs[a.name] = _attr_value(a, label, b)
            except RammerError as exc:
                failures[a.name] = exc
        else:
            attrs[a.name] = _attr_value(a, label, b)
    if not failures:
        return attrs
    valid = [k for k in ("then_branch", "else_branch") if k in attrs]
    if not valid:
        raise next(iter(failures.values()))
    model = attrs[valid[0]]
    for key, exc in failures.items():
        message = (f"{label}: the {key.replace('_', '-')} was taken, but it cannot run at the shapes this "
                   f"model was compiled for ({exc}); recompile with input shapes that make it valid")
        attrs[key] = unreachable_branch(f"{key}_unreachable", model.outputs, message, model.opset)
    return attrs


def _add_initializers(b: GraphBuilder, g: onnx.GraphProto, where: str) -> None:
    if g.sparse_initializer:
        raise ModelLoadError(f"{where}: sparse initializers are not supported")
    for t in g.initializer:
        b.add_constant(t.name, _tensor_value(t, f"{where} initializer", b.limits))


def _import_nodes(b: GraphBuilder, nodes: Sequence[onnx.NodeProto], prefix: str) -> None:
    for index, proto in enumerate(nodes):
        name = proto.name or f"{prefix}{proto.op_type}_{index}"
        label = f"node '{name}' ({proto.op_type})"
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        if not domain and proto.op_type == "If" and _inline_constant_if(b, proto, name):
            continue
        if not domain and proto.op_type == "If":
            attrs = _if_branches(proto, label, b)
        else:
            attrs = {a.name: _attr_value(a, label, b) for a in proto.attribute}
        node = Node(proto.op_type, tuple(proto.input), tuple(proto.output), name, domain, attrs)
        try:
            if not domain and node.op_type in LOWERED_OPS:
                lower(b, node)
            else:
                b.add(node)
        except RammerError as exc:
            context = upgrade_context(proto)
            if context is None or not exc.args:
                raise
            # The user's model has no such node: name theirs, and what the converter made of it.
            text = str(exc.args[0])
            detail = text[len(node.label) + 2:] if text.startswith(node.label + ": ") else text
            exc.args = (f"{context}: {detail}. Fix the node (or re-export the model at a newer opset)",
                        *exc.args[1:])
            raise


def _inline_constant_if(b: GraphBuilder, proto: onnx.NodeProto, name: str) -> bool:
    """Inline the taken branch of an ``If`` whose condition is a constant.

    Only the taken branch is imported: the other one is often invalid for
    the model's static shapes (it handles the case that did not happen).
    """
    cond = b.scope.const(proto.input[0]) if proto.input and proto.input[0] else None
    if cond is None:
        return False
    wanted = "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
    branch = next((a.g for a in proto.attribute if a.name == wanted), None)
    if branch is None:
        raise ModelLoadError(f"node '{name}' (If) has no {wanted}")
    if len(branch.output) != len(proto.output):
        raise ModelLoadError(f"node '{name}' (If): {wanted} has {len(branch.output)} outputs, "
                             f"the node {len(proto.output)}")
    _add_initializers(b, branch, f"node '{name}' (If) {wanted}")
    _import_nodes(b, branch.node, f"{name}/")
    for out, vi in zip(proto.output, branch.output):
        if out:
            if b.scope.sequence(vi.name) is not None:
                b.scope.sequences[out] = b.scope.sequence(vi.name)  # type: ignore[assignment]
            else:
                b.alias(out, vi.name, f"node '{name}' (If)")
    return True


# -- model import ---------------------------------------------------------------


def _text(value: str | bytes) -> str:
    # A corrupt proto can hold undecodable strings, which protobuf hands back as bytes.
    return value if isinstance(value, str) else repr(value)


def unsupported_ops(model: onnx.ModelProto) -> list[tuple[str, str, str]]:
    """(op_type, domain, node name) of every node no registry entry covers."""
    missing: list[tuple[str, str, str]] = []

    def walk(g: onnx.GraphProto) -> None:
        for i, n in enumerate(g.node):
            lowered = n.domain in ("", "ai.onnx") and n.op_type in LOWERED_OPS
            if not lowered and lookup(n.op_type, n.domain) is None:
                op_type, domain = _text(n.op_type), _text(n.domain)
                missing.append((op_type, domain, _text(n.name) or f"{op_type}_{i}"))
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


def import_model(model: onnx.ModelProto, input_shapes: InputShapes | None = None, fold: bool = True,
                 limits: Limits | None = None) -> Graph:
    """The IR graph of a checked ``model``; sizes are bounded by ``limits`` (the defaults when None)."""
    opset = _opsets(model)
    raise_if_unsupported(model)
    shapes = bind_input_shapes(model.graph, input_shapes or {})
    return _import_graph(model.graph, shapes, None, "model", opset=opset, fold=fold, limits=resolve_limits(limits))
