"""What a schedule's JSON says about each operator, so a code generator needs nothing else:
its tensors (:class:`TensorRef`: name, dtype, shape, constant or not, arena offset once a
backend has planned memory), its attributes as JSON values, and each rTask's tile (the boxes
it reads and writes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ScheduleError
from ..ir import Graph
from ..rtask import Box, RKernel, RTaskAccess


@dataclass(frozen=True)
class TensorRef:
    """A tensor an operator reads or writes (``name`` is empty for an omitted optional one)."""

    name: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    #: An initializer: its data is in the model, not computed by the schedule.
    constant: bool = False

    def to_dict(self, offset: int | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "dtype": self.dtype,
                             "shape": None if self.shape is None else list(self.shape)}
        if self.constant:
            d["constant"] = True
        if offset is not None:
            d["offset"] = int(offset)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TensorRef:
        shape = d.get("shape")
        return cls(str(d["name"]), d.get("dtype"), None if shape is None else tuple(int(s) for s in shape),
                   bool(d.get("constant", False)))


def tensor_refs(names: Sequence[str], tensors: Mapping[str, Any], constants: frozenset[str] | set[str]
                ) -> tuple[TensorRef, ...]:
    """``TensorRef`` s for ``names`` from ``TensorInfo`` s (dtype and shape None where unknown)."""
    out = []
    for name in names:
        info = tensors.get(name) if name else None
        out.append(TensorRef(name, info.dtype if info is not None else None,
                             tuple(info.shape) if info is not None else None, name in constants))
    return tuple(out)


# -- attributes ---------------------------------------------------------------

def encode_attr(value: Any) -> Any:
    """An attribute value as JSON: plain values as they are, arrays as
    ``{"tensor": {dtype, shape, data}}``, subgraphs as ``{"graph": name}`` (their bodies are
    not scheduled here), bytes as text."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        return {"tensor": {"dtype": str(value.dtype), "shape": list(value.shape), "data": value.ravel().tolist()}}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Graph):
        return {"graph": value.name}
    if isinstance(value, (list, tuple)):
        return [encode_attr(v) for v in value]
    return repr(value)


def decode_attr(data: Any) -> Any:
    """The inverse of :func:`encode_attr` (lists stay lists; arrays come back as arrays)."""
    if isinstance(data, dict) and "tensor" in data:
        t = data["tensor"]
        return np.asarray(t["data"], dtype=t["dtype"]).reshape(t["shape"])
    if isinstance(data, list):
        return [decode_attr(v) for v in data]
    return data


# -- rTask tiles ----------------------------------------------------------------

def has_tiles(kernel: RKernel) -> bool:
    """Whether the kernel can say what each rTask reads and writes."""
    return kernel.access_fn is not None or bool(kernel.input_shapes) or bool(kernel.output_shapes)


def encode_tiles(kernel: RKernel) -> list[dict[str, Any]]:
    """Per rTask: ``{"reads": [[slot, [[lo, hi], ...]], ...], "writes": [...]}``."""
    def encode(acc: RTaskAccess) -> dict[str, Any]:
        return {"reads": [[s, [list(d) for d in box]] for s, box in acc.reads],
                "writes": [[s, [list(d) for d in box]] for s, box in acc.writes]}

    if kernel.access_fn is None:  # every rTask reads and writes the whole tensors: encoded once
        return [encode(kernel.accesses(0))] * kernel.num_rtasks
    return [encode(kernel.accesses(r)) for r in range(kernel.num_rtasks)]


def decode_tiles(data: Sequence[Mapping[str, Any]], num_rtasks: int, op: str) -> tuple[RTaskAccess, ...]:
    if len(data) != num_rtasks:
        raise ScheduleError(f"operator '{op}' lists {len(data)} rTask tiles for {num_rtasks} rTasks")

    def boxes(items: Any) -> tuple[tuple[int, Box], ...]:
        return tuple((int(s), tuple((int(lo), int(hi)) for lo, hi in box)) for s, box in items)

    return tuple(RTaskAccess(boxes(t["reads"]), boxes(t["writes"])) for t in data)
