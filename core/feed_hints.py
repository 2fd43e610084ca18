"""What to tell a user whose feed has the wrong shape.

rammer compiles static shapes, so a feed of another shape is refused.  What the
user can do about it depends on the model as declared, not on the compiled
shapes: a dim the model fixes (``dim_value``) can only be fed at that size,
while a dynamic dim (a ``dim_param`` symbol or an unknown size) may be compiled
again for the fed size with ``input_shapes=``.  A hint that suggests
``input_shapes`` for a fixed dim sends the user into a second error
(``input_shapes gives 'x' dim 2 = 33 but the model fixes it to 32``), so the
hints here suggest it only for dynamic dims, and then with the model's rank and
the model's sizes for its fixed dims.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import onnx

from .frontend.inputs import Dim, declared_dims


def declared_input_dims(source: Any) -> dict[str, list[Dim]] | None:
    """The dims every graph input of ``source`` (a path, bytes or an ``onnx.ModelProto``, as given
    to ``rammer.compile``) that declares a shape declares: ints where fixed, a name or None where
    dynamic; None when the model cannot be read (an IR graph, a file since removed).  Only called on the error path: it
    parses the model again (without its external data)."""
    try:
        if isinstance(source, onnx.ModelProto):
            proto = source
        elif isinstance(source, (bytes, bytearray, memoryview)):
            proto = onnx.ModelProto()
            proto.ParseFromString(bytes(source))
        elif isinstance(source, (str, os.PathLike)):
            proto = onnx.ModelProto()
            with open(source, "rb") as f:
                proto.ParseFromString(f.read())
        else:
            return None
    except Exception:  # a hint is best-effort: without the declared dims every dim counts as fixed
        return None
    inits = {t.name for t in proto.graph.initializer}
    dims: dict[str, list[Dim]] = {}
    for vi in proto.graph.input:
        declared = declared_dims(vi) if vi.name not in inits and vi.type.HasField("tensor_type") else None
        if declared is not None:
            dims[vi.name] = declared
    return dims


def _shown(dims: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if d is None else repr(d) if isinstance(d, str) else str(d) for d in dims) + "]"


def _tuple(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _dim_name(i: int, d: Dim) -> str:
    return f"dim {i} ({d!r})" if isinstance(d, str) else f"dim {i} (unknown size)" if d is None else f"dim {i}"


def _recompile(name: str, shape: Sequence[int]) -> str:
    return (f"recompile with input_shapes={{'{name}': {_tuple(shape)}}} "
            f"(CLI: --shape {name}={','.join(str(int(d)) for d in shape)})")


def wrong_shape(name: str, fed: Sequence[int], compiled: Sequence[int] | None,
                declared: Sequence[Dim] | None) -> str:
    """One line for input ``name`` fed at shape ``fed``.

    ``compiled`` is the shape the model was compiled for (None when nothing is compiled yet, as
    in a session compiling per feed shape); ``declared`` the model's own dims (None when unknown:
    then every dim counts as fixed at its compiled size, and ``input_shapes`` is never suggested).
    """
    fed = [int(d) for d in fed]
    if declared is None or (compiled is not None and not _agrees(declared, compiled)):
        declared = list(compiled or ())
    head = f"input '{name}' has shape {fed}"
    wanted = f"{list(compiled)}" if compiled is not None else _shown(declared)
    dynamic = [i for i, d in enumerate(declared) if not isinstance(d, int)]
    if len(fed) != len(declared):
        line = f"{head} (rank {len(fed)}) but the model expects rank {len(declared)}: shape {wanted}"
        if compiled is not None and dynamic:
            line += f" (the model declares {_shown(declared)})"
        if compiled is not None and _size(fed) == _size(compiled):
            line += f"; reshape it to {_tuple(compiled)}"
        return line
    fixed_wrong = [i for i, d in enumerate(declared) if isinstance(d, int) and fed[i] != d]
    dynamic_wrong = [i for i in dynamic if compiled is not None and fed[i] != compiled[i]]
    line = f"{head} but the model " + (f"was compiled for {wanted}" if compiled is not None
                                       else f"declares {_shown(declared)}")
    parts = []
    if fixed_wrong:
        fixes = " and ".join(f"dim {i} to {declared[i]}" for i in fixed_wrong)
        parts.append(f"the model fixes {fixes} (feed {'those sizes' if len(fixed_wrong) > 1 else 'that size'})")
    if dynamic_wrong:
        which = ", ".join(_dim_name(i, declared[i]) for i in dynamic_wrong)
        target = [fed[i] if i in dynamic else int(declared[i]) for i in range(len(fed))]  # type: ignore[arg-type]
        verb = "is" if len(dynamic_wrong) == 1 else "are"
        parts.append(f"{which} {verb} dynamic in the model: for {'that size' if verb == 'is' else 'those sizes'} "
                     f"{_recompile(name, target)}")
    if not parts:  # (a caller's mistake: the shapes agree)
        return line
    return line + ": " + "; ".join(parts)


def _agrees(declared: Sequence[Dim], compiled: Sequence[int]) -> bool:
    """Whether the compiled shape is one the declared dims allow (else the source changed since)."""
    return len(declared) == len(compiled) and all(not isinstance(d, int) or d == c
                                                  for d, c in zip(declared, compiled))


def _size(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
