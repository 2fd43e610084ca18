"""The ONNX frontend: reading, checking and importing models into the IR."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from ..errors import ModelLoadError
from ..ir import Graph
from .limits import Limits, resolve_limits
from .onnx_import import import_model, raise_if_unsupported, unsupported_ops
from .source import ModelSource, check_model, check_names, read_model_and_bytes
from .upgrade import MIN_NATIVE_OPSET, ai_onnx_opset, inline_functions, upgrade_opset

__all__ = ["load", "load_proto", "import_model", "unsupported_ops", "ModelSource", "Limits"]


def load_proto(source: ModelSource) -> onnx.ModelProto:
    """Read, check and normalise a model (function inlining, opset upgrade)."""
    model, _, serialized = read_model_and_bytes(source)  # (serialized: the bytes ``model`` is the parse of)
    check_names(model)
    newest = onnx.defs.onnx_opset_version()
    if ai_onnx_opset(model) > newest:
        # onnx's checker lets a future opset through; its ops would be read with today's semantics.
        raise ModelLoadError(f"the model imports ai.onnx opset {ai_onnx_opset(model)}, newer than the newest this "
                             f"installation knows ({newest}); re-export it with opset <= {newest}, or upgrade onnx "
                             f"and rammer")
    if model.functions:
        model, serialized = inline_functions(model), None
    if 0 < ai_onnx_opset(model) < MIN_NATIVE_OPSET:
        # Upgrade first: old ops (Upsample, Scatter...) become ops rammer implements.
        check_model(model, serialized)
        model, serialized = upgrade_opset(model), None
    # Before the checker: it stops at the first unknown op, we list them all.
    raise_if_unsupported(model)
    check_model(model, serialized)
    return model


def load(source: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None = None,
         limits: Limits | Mapping[str, int] | None = None) -> Graph:
    """Load an ONNX model as a verified, fully static IR graph.

    ``source`` is a path, bytes or an ``onnx.ModelProto``.  Dynamic input
    dimensions are bound from ``input_shapes`` (name -> shape) or rejected
    with an error that names the input and the dimension.  ``limits`` bounds
    tensor sizes and unroll lengths (see :mod:`rammer.frontend.limits`).
    """
    bounds = resolve_limits(limits)
    try:
        graph = import_model(load_proto(source), input_shapes, limits=bounds)
    except MemoryError:
        raise ModelLoadError("ran out of memory loading the model; check its sizes and input_shapes, "
                             "or lower the bounds (limits={'max_tensor_bytes': ...})") from None
    graph.verify()
    return graph
