"""What a schedule's JSON says about each operator, so a code generator needs nothing else:
its tensors (:class:`TensorRef`: name, dtype, shape, constant or not, arena offset once a
backend has planned memory), its attributes as JSON values, and each rTask's tile (the boxes
it reads and writes)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ScheduleError
from ..ir import Graph
from ..rtask import Box, RKernel, RTaskAccess

if TYPE_CHECKING:  # pragma: no cover
    from .schedule import Schedule


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
    if kernel.access_fn is None:  # every rTask reads and writes the whole tensors: encoded once
        return [_encode_access(kernel.accesses(0))] * kernel.num_rtasks
    return [_encode_access(kernel.accesses(r)) for r in range(kernel.num_rtasks)]


def _encode_access(acc: RTaskAccess) -> dict[str, Any]:
    return {"reads": [[s, [list(d) for d in box]] for s, box in acc.reads],
            "writes": [[s, [list(d) for d in box]] for s, box in acc.writes]}


def decode_tiles(data: Sequence[Mapping[str, Any]], num_rtasks: int, op: str) -> tuple[RTaskAccess, ...]:
    if len(data) != num_rtasks:
        raise ScheduleError(f"operator '{op}' lists {len(data)} rTask tiles for {num_rtasks} rTasks")

    def boxes(items: Any) -> tuple[tuple[int, Box], ...]:
        return tuple((int(s), tuple((int(lo), int(hi)) for lo, hi in box)) for s, box in items)

    return tuple(RTaskAccess(boxes(t["reads"]), boxes(t["writes"])) for t in data)


# -- the schedule's JSON text ----------------------------------------------------

_dumps = partial(json.dumps, separators=(",", ":"))
#: ``_dumps`` with one encoder for every call (json.dumps makes an encoder per call when given
#: separators: thousands of operators each cost one); the same text.
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _tiles_text(tiles: list[Any]) -> str:
    """``tiles`` (an operator's ``"rtasks"``) as JSON; a list of one tile object repeated (what
    :func:`encode_tiles` gives a kernel whose rTasks all touch whole tensors) is encoded once."""
    if tiles and tiles.count(tiles[0]) == len(tiles):  # C-level: identity before equality
        return "[" + ",".join([_encode(tiles[0])] * len(tiles)) + "]"
    return _encode(tiles)


def _kernel_tiles_text(kernel: RKernel) -> str:
    """``_tiles_text(encode_tiles(kernel))``; a kernel whose rTasks all touch whole tensors has its
    one tile encoded once, without the list of the same tile per rTask."""
    if kernel.access_fn is None:
        return "[" + ",".join([_encode(_encode_access(kernel.accesses(0)))] * kernel.num_rtasks) + "]"
    return _tiles_text(encode_tiles(kernel))


def _programs_text(schedule: Schedule) -> str:
    """``to_dict()["programs"]`` as JSON text (:func:`_programs_parts` joined)."""
    return "".join(_programs_parts(schedule))


def _programs_parts(schedule: Schedule) -> list[str]:
    """``to_dict()["programs"]`` as JSON text in parts, with no dict and no format call per entry (a
    full-size GPU schedule has 10^6 rTasks and 10^6 barrier waits): each program is one ``%`` format,
    its template joined from a per-operator template (the operator's fields, a ``%d`` for the rTask's
    index) and per barrier its waits' text, the numbers filled in by one C-level call."""
    n = schedule.num_rtasks
    ops = schedule.ops
    op_tail = [(f',"op":{_dumps(op.name)},"kernel":{_dumps(op.kernel.kernel_id)},"rtask_id":').replace("%", "%%")
               + "%d}" for op in ops]
    firsts = np.asarray([op.first_rtask for op in ops], np.int64)
    rtask_op = schedule.rtask_op
    waits = schedule.barrier_waits
    out = []
    for prog in schedule.programs:
        ids = np.asarray(prog, np.int64)
        if not ids.size:
            out.append("[]")
            continue
        is_rtask = ids < n
        o = rtask_op[np.where(is_rtask, ids, 0)]
        tails = np.empty(ids.size, object)
        tails[is_rtask] = list(map(op_tail.__getitem__, o[is_rtask].tolist()))
        tails[~is_rtask] = [',"barrier":[' + ",".join(map(str, waits[e - n])) + "]}" for e in ids[~is_rtask].tolist()]
        # The numbers in order: each entry's id, then an rTask's index within its operator.
        numbers = np.stack([ids, np.where(is_rtask, ids - firsts[o], 0)], 1).ravel()
        numbers = numbers[np.repeat(is_rtask, 2) | np.tile([True, False], ids.size)]
        out.append("[" + ('{"id":%d' + ',{"id":%d'.join(tails.tolist())) % tuple(numbers.tolist()) + "]")
    parts = ["["]
    for k, text in enumerate(out):
        parts += [",", text] if k else [text]
    parts.append("]")
    return parts


def schedule_json(schedule: Schedule, summary: Mapping[str, Any] | None = None) -> str:
    """The text of :meth:`Schedule.to_json`, ``json.dumps(schedule.to_dict(summary))`` (compact),
    byte for byte, built per part (:func:`schedule_json_parts`)."""
    return "".join(schedule_json_parts(schedule, summary))


def schedule_json_parts(schedule: Schedule, summary: Mapping[str, Any] | None = None) -> list[str]:
    """:func:`schedule_json`'s text in parts (their concatenation is the text): the fields of
    :meth:`Schedule.to_dict` with the operators and programs left out, then each operator (its
    repeated rTask tile encoded once) and the programs from arrays (:func:`_programs_parts`).  A
    full-size GPU schedule's JSON is tens to hundreds of MB: built through ``to_dict`` it cost
    seconds of per-entry dicts and encoding, and concatenated into one string, a copy of the whole
    text per ``+`` (unet-seg-b8: 238 MB)."""
    head = replace(schedule, ops=[], programs=[], barrier_waits=[], offsets=dict(schedule.offsets))
    data = head.to_dict(summary)
    keys = list(data)
    if keys[-2:] != ["operators", "programs"] or {"num_rtasks", "num_barriers"} & set(summary or {}):
        return [_dumps(schedule.to_dict(summary))]  # a layout this writer does not know: the plain way
    data["num_rtasks"], data["num_barriers"] = schedule.num_rtasks, schedule.num_barriers
    del data["operators"], data["programs"]
    parts = [_dumps(data)[:-1] + ',"operators":[']
    for k, op in enumerate(schedule.ops):
        if k:
            parts.append(",")
        text = _encode(schedule._operator(op, tiles=False))
        if has_tiles(op.kernel):
            parts += [text[:-1], ',"rtasks":', _kernel_tiles_text(op.kernel), "}"]
        else:
            parts.append(text)
    parts.append('],"programs":')
    parts += _programs_parts(schedule)
    parts.append("}")
    return parts


def write_schedule_json(schedule: Schedule, path: str, summary: Mapping[str, Any] | None = None) -> None:
    """Write :func:`schedule_json` to ``path`` (what :meth:`Schedule.to_json` writes, faster), part
    by part: the whole text is never one string."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(schedule_json_parts(schedule, summary))
