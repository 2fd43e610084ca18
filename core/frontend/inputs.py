"""Graph inputs: their declared types, and binding dynamic dims from ``input_shapes``."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

import onnx

from .. import dtypes
from ..errors import ShapeError
from ..ir import TensorInfo

InputShapes = Mapping[str, Sequence[int]]

Dim = int | str | None  # a fixed size, a symbolic name, or unknown


#: ``dim_param`` spellings exporters use for "unknown" rather than for a named size: two dims
#: spelled like this are not thereby equal (a detector's height and width both "?").
_ANONYMOUS_DIM = re.compile(r"^\s*(\?+|-1|none|null|unknown|unk|dynamic|[_*?\s-]*)\s*$", re.IGNORECASE)


def is_anonymous_dim(name: str) -> bool:
    """Whether a ``dim_param`` is a placeholder ("?", "-1", "unknown"...) rather than a meaningful name."""
    return bool(_ANONYMOUS_DIM.match(name))


def declared_dims(vi: onnx.ValueInfoProto) -> list[Dim] | None:
    """The declared dims of a tensor value (None when it declares no shape at all).

    A placeholder ``dim_param`` (:func:`is_anonymous_dim`) is an unknown dim (None):
    only equal *meaningful* names make two dims one symbol."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims: list[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.dim_param and not is_anonymous_dim(d.dim_param):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def _show(dims: list[Dim]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def _given_shape(name: str, value: Any) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in value)
    except (TypeError, ValueError):
        raise ShapeError(f"input_shapes['{name}'] must be a sequence of ints, got {value!r}") from None
    if any(d < 0 for d in shape):
        raise ShapeError(f"input_shapes['{name}'] = {shape} has a negative dim")
    return shape


def bind_input_shapes(graph: onnx.GraphProto, input_shapes: InputShapes) -> dict[str, tuple[int, ...]]:
    """The static shape of every input with a dynamic dim, from ``input_shapes``.

    A symbolic dim (``'batch'``) bound through one input binds the same name
    in the others, so ``input_shapes`` needs to name each symbol only once.
    Raises one error for unknown names, conflicting bindings, or the list of
    all dims still unbound.
    """
    initializers = {t.name for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in initializers and vi.type.HasField("tensor_type")]
    known = {vi.name for vi in graph.input if vi.name not in initializers}
    unknown = set(input_shapes) - known
    if unknown:
        raise ShapeError(
            f"input_shapes names {sorted(unknown)}, which are not inputs of the model (inputs: {sorted(known)})"
        )
    shapes = {name: _given_shape(name, value) for name, value in input_shapes.items()}
    symbols: dict[str, tuple[int, str]] = {}  # symbolic dim name -> (size, the input that bound it)
    for vi in inputs:
        dims = declared_dims(vi)
        if vi.name not in shapes or dims is None:
            continue
        shape = shapes[vi.name]
        if len(dims) != len(shape):
            raise ShapeError(f"input_shapes gives '{vi.name}' rank {len(shape)} ({shape}) but the model declares "
                             f"rank {len(dims)} {_show(dims)}")
        for i, (d, s) in enumerate(zip(dims, shape)):
            if isinstance(d, int) and d != s:
                raise ShapeError(f"input_shapes gives '{vi.name}' dim {i} = {s} but the model fixes it to {d}")
            if isinstance(d, str):
                size, first = symbols.setdefault(d, (s, vi.name))
                if size != s:
                    raise ShapeError(f"input_shapes binds the model's dim '{d}' to {size} in '{first}' "
                                     f"but to {s} in '{vi.name}'; the model says they are equal")
    unbound: list[str] = []
    examples: list[str] = []
    for vi in inputs:
        if vi.name in shapes:
            continue
        dims = declared_dims(vi)
        if dims is None:
            unbound.append(f"'{vi.name}' (no shape declared)")
            examples.append(f"'{vi.name}': (...)")
            continue
        missing = [i for i, d in enumerate(dims) if not isinstance(d, int) and (d is None or d not in symbols)]
        if missing:
            unbound += [f"'{vi.name}' dim {i} ({dims[i] or 'unknown'})" for i in missing]
            examples.append(f"'{vi.name}': {_show(dims)}")
        elif any(isinstance(d, str) for d in dims):
            shapes[vi.name] = tuple(d if isinstance(d, int) else symbols[cast(str, d)][0] for d in dims)
    if unbound:
        raise ShapeError(
            f"rammer compiles static shapes, and these input dims are dynamic: {', '.join(unbound)}. "
            f"Give their sizes with input_shapes={{{', '.join(examples)}}} (numbers in place of the names; "
            f"CLI: --shape NAME=d0,d1,...)"
        )
    return shapes


def input_info(vi: onnx.ValueInfoProto, input_shapes: InputShapes, where: str) -> TensorInfo:
    """The static TensorInfo of a graph (or subgraph) input."""
    if not vi.type.HasField("tensor_type"):
        raise ShapeError(f"{where} '{vi.name}' is not a tensor (sequences, maps and optionals are not supported)")
    dtype = dtypes.from_onnx(vi.type.tensor_type.elem_type, f"{where} '{vi.name}'")
    if vi.name in input_shapes:
        return TensorInfo(vi.name, dtype, _given_shape(vi.name, input_shapes[vi.name]))
    dims = declared_dims(vi)
    if dims is None:
        raise ShapeError(f"{where} '{vi.name}' has no shape; give one with input_shapes={{'{vi.name}': (...)}} "
                         f"(CLI: --shape {vi.name}=d0,d1,...)")
    for i, d in enumerate(dims):
        if not isinstance(d, int):
            raise ShapeError(
                f"{where} '{vi.name}' dim {i} is dynamic ({d or 'unknown'}); rammer compiles static shapes: "
                f"give input_shapes={{'{vi.name}': {_show(dims)}}} with numbers (CLI: --shape {vi.name}=d0,d1,...)"
            )
    return TensorInfo(vi.name, dtype, tuple(int(d) for d in dims))  # type: ignore[arg-type]
