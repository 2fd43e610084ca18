"""Normalising a model before import: opset upgrade and function inlining."""

from __future__ import annotations

import onnx
from onnx import inliner, version_converter

from ..errors import ModelLoadError

#: Ops are implemented for ai.onnx opsets from this version on; older models
#: are upgraded with ONNX's version converter.
MIN_NATIVE_OPSET = 11


def ai_onnx_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def inline_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    if model.functions:
        # torch.onnx's dynamo exporter emits model-local functions; the IR has none.
        model = inliner.inline_local_functions(model)
    return model


#: ``doc_string`` prefix of a node the version converter made: errors in it name the user's node.
UPGRADE_MARK = "rammer-upgrade\t"


def upgrade_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    version = ai_onnx_opset(model)
    if 0 < version < MIN_NATIVE_OPSET:
        # Named first, as the importer would name them: the converter shifts node indices.
        for index, node in enumerate(model.graph.node):
            if not node.name:
                node.name = f"{node.op_type}_{index}"
        original = onnx.GraphProto()
        original.CopyFrom(model.graph)
        try:
            model = version_converter.convert_version(model, 13)
        except Exception as exc:
            raise ModelLoadError(
                f"the model uses ai.onnx opset {version}; rammer supports {MIN_NATIVE_OPSET} and later and "
                f"could not upgrade it ({exc}). Re-export it with opset >= {MIN_NATIVE_OPSET}."
            ) from None
        _mark_converter_nodes(original, model.graph, version)
    return model


def _mark_converter_nodes(original: onnx.GraphProto, graph: onnx.GraphProto, version: int) -> None:
    """Name each node the converter added after the user's node it replaces, and mark it.

    The converter rewrites a node into a few (LogSoftmax-11 -> Flatten, LogSoftmax, Reshape)
    joined by fresh tensors; the group's outputs are the user's node's outputs."""
    known = {t.name for t in original.initializer} | {v.name for v in original.input}
    producer: dict[str, onnx.NodeProto] = {}
    for node in original.node:
        known.update(node.input)
        known.update(node.output)
        producer.update({o: node for o in node.output if o})
    parent = list(range(len(graph.node)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_fresh: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in list(node.input) + list(node.output):
            if name and name not in known:
                j = by_fresh.setdefault(name, i)
                parent[root(i)] = root(j)
    origin: dict[int, onnx.NodeProto] = {}
    for i, node in enumerate(graph.node):
        for name in node.output:
            if name in producer:
                origin.setdefault(root(i), producer[name])
    used = {n.name for n in graph.node if n.name}
    for i, node in enumerate(graph.node):
        source = origin.get(root(i))
        if node.name or source is None:
            continue
        name, k = f"{source.name}/{node.op_type}", 1
        while name in used:
            k += 1
            name = f"{source.name}/{node.op_type}_{k}"
        used.add(name)
        node.name = name
        node.doc_string = f"{UPGRADE_MARK}{source.name}\t{source.op_type}\t{version}"


def upgrade_context(node: onnx.NodeProto) -> str | None:
    """For a node the converter made: "node 'NAME' (OP), in the X that the opset upgrade made of it"."""
    if not node.doc_string.startswith(UPGRADE_MARK):
        return None
    name, op_type, version = node.doc_string[len(UPGRADE_MARK):].split("\t")
    return (f"node '{name}' ({op_type}), in the {node.op_type} node that upgrading the model from opset "
            f"{version} made of it")
