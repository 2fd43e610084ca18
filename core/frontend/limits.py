"""Size bounds checked at import, so absurd sizes fail early and by name.

A model (or an ``input_shapes`` binding) can ask for tensors no machine can
hold, or for a recurrence that backends which unroll time steps (the ``cpu``
backend does) would unroll for hours.  Without bounds these end in a
``MemoryError`` deep inside numpy, or in a compile that never finishes.  The
frontend checks every graph input, initializer and inferred node output, and
the step count of every unrolled op, against :class:`Limits`:

================================  =====================  ===========================
bound                             default                environment variable
================================  =====================  ===========================
``max_tensor_elements``           2**31 elements         ``RAMMER_MAX_TENSOR_ELEMENTS``
``max_tensor_bytes``              4 GiB                  ``RAMMER_MAX_TENSOR_BYTES``
``max_unroll``                    100,000 steps          ``RAMMER_MAX_UNROLL``
================================  =====================  ===========================

Override them per call with ``rammer.load(..., limits={"max_tensor_bytes": 2**36})``
or ``rammer.compile(..., limits=...)`` (a :class:`Limits` or a mapping), or for
a whole process with the environment variables.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from ..errors import ShapeError
from ..ir import Node, TensorInfo

__all__ = ["Limits", "resolve_limits", "check_tensor", "check_dims", "check_unroll"]

#: Ops whose time steps a backend may unroll (the ``cpu`` backend unrolls these; a Loop's trip
#: count is often "forever, until the condition says stop", so Loops are not bounded here).
_UNROLLED = ("RNN", "GRU", "LSTM")


@dataclass(frozen=True)
class Limits:
    """Bounds on tensor sizes and unroll lengths (see the module's table)."""

    max_tensor_elements: int = 1 << 31
    max_tensor_bytes: int = 4 << 30
    max_unroll: int = 100_000

    @classmethod
    def from_env(cls) -> Limits:
        """The defaults, with any ``RAMMER_MAX_*`` environment variable applied."""
        values: dict[str, int] = {}
        for f in fields(cls):
            var = "RAMMER_" + f.name.upper()
            text = os.environ.get(var)
            if text is None:
                continue
            try:
                values[f.name] = _positive(int(text.replace("_", "")), var)
            except ValueError:
                raise ShapeError(f"environment variable {var}={text!r} is not a positive integer") from None
        return cls(**values)


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapeError(f"{what} must be a positive integer, got {value!r}")
    return value


def resolve_limits(limits: Limits | Mapping[str, int] | None) -> Limits:
    """The :class:`Limits` to use: the given ones, or a mapping applied over the environment's."""
    if isinstance(limits, Limits):
        return limits
    base = Limits.from_env()
    if limits is None:
        return base
    if not isinstance(limits, Mapping):
        raise ShapeError(f"limits must be a rammer Limits or a dict, got {type(limits).__name__}")
    known = {f.name for f in fields(Limits)}
    unknown = sorted(set(limits) - known)
    if unknown:
        raise ShapeError(f"unknown limit(s) {unknown}; known: {sorted(known)}")
    return replace(base, **{k: _positive(v, f"limits['{k}']") for k, v in limits.items()})


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.3g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.3g} MiB"


def check_dims(name: str, dims: Sequence[int], itemsize: int, where: str, limits: Limits) -> None:
    """A :class:`ShapeError` naming tensor ``name`` when ``dims`` break the bounds."""
    elements = math.prod(int(d) for d in dims)
    nbytes = elements * max(int(itemsize), 1)
    if elements > limits.max_tensor_elements:
        over, limit, key = f"{elements:,} elements", f"{limits.max_tensor_elements:,} elements", "max_tensor_elements"
    elif nbytes > limits.max_tensor_bytes:
        over, limit, key = _gib(nbytes), _gib(limits.max_tensor_bytes), "max_tensor_bytes"
    else:
        return
    raise ShapeError(
        f"{where}: tensor '{name}' of shape {list(dims)} is too large ({over}; the limit is {limit}). "
        f"Check the model's shapes and input_shapes (--shape); if the size is meant, raise the bound with "
        f"limits={{'{key}': ...}} or the environment variable RAMMER_{key.upper()}")


def check_tensor(info: TensorInfo, where: str, limits: Limits) -> None:
    check_dims(info.name, info.shape, info.np_dtype.itemsize, where, limits)


def _steps(node: Node, inputs: Sequence[TensorInfo | None]) -> int | None:
    x = inputs[0] if inputs else None
    if x is None or len(x.shape) != 3:
        return None
    return int(x.shape[1] if int(node.attrs.get("layout", 0)) == 1 else x.shape[0])


def check_unroll(node: Node, inputs: Sequence[TensorInfo | None], limits: Limits) -> None:
    """A :class:`ShapeError` when a recurrence would run more steps than ``max_unroll``."""
    if node.domain or node.op_type not in _UNROLLED:
        return
    steps = _steps(node, inputs)
    if steps is not None and steps > limits.max_unroll:
        raise ShapeError(
            f"{node.label}: {steps:,} time steps is more than rammer unrolls (max_unroll = {limits.max_unroll:,}). "
            f"Check the sequence length in the input shapes (--shape); if it is meant, raise the bound with "
            f"limits={{'max_unroll': ...}} or the environment variable RAMMER_MAX_UNROLL")
