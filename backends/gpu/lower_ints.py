"""Integer and bool tensors on the GPU backends: carried in the float32 arena as exact values.

The arena is one float32 buffer, and the kernels are float kernels.  Rather than a second arena per
dtype, an integer or bool tensor is stored as its values in float32, which is exact while
``|x| <= 2**24``: that covers token ids, attention masks, positions and the indices of every model
that fits a GPU.  What keeps this exact:

* feeds are converted at copy-in (:class:`ArenaFeeds`), refusing with a :class:`FeedError` naming
  the input when a value is larger than that (and, for an input a Gather reads as its indices,
  directly or reshaped, when a value is out of range for the gathered axis: the reference backend
  raises there too);
* integer constants placed in the arena are checked at compile time (:func:`arena_refusal`);
* only ops that move, select or gather values may touch integer tensors (data movement, Gather,
  Where, Cast to float32, to bool and between integer types that hold every such value);
  arithmetic on integers (which would round above 2**24) and float-to-integer casts are refused
  naming node and op;
* an integer or bool graph output is converted back from the arena's float32 values when it is
  read (:class:`ArenaOutputs`): a value the arena could not hold exactly was stored as NaN by the
  integer programs (never a rounded integer), and such an output raises an
  :class:`~rammer.errors.OpExecutionError` naming it rather than handing back a wrong integer.

:func:`lower_cast` is Cast's rKernel: a flat copy when the cast does not change any value the arena
can hold, a ``!= 0`` map for a cast to bool.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rammer.errors import FeedError, IndexRangeError, OpExecutionError
from rammer.ir import Graph, Node
from rammer.ops.indexing import first_out_of_range, index_out_of_range

from . import kernels_index as kx
from . import kernels_model as km

__all__ = ["ARENA_DTYPES", "INTEGER_DTYPES", "EXACT_LIMIT", "arena_refusal", "output_refusal", "lower_cast",
           "ArenaFeeds", "ArenaOutputs"]

#: Integer and bool dtypes the arena carries as exact float32 values.
INTEGER_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
#: Every dtype a tensor in the arena may have.
ARENA_DTYPES = INTEGER_DTYPES | {"float32"}
#: Integers up to this magnitude are exact in float32 (24-bit significand).
EXACT_LIMIT = 2 ** 24
_THREADS = 256
_BIG = 1 << 30
#: Ops whose one output holds exactly the values of their first input, every one of them (only the
#: GPU's value-preserving Casts get this far: an integer index tensor stays exact).
_SAME_VALUES = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Cast"})


def _inexact(values: np.ndarray) -> tuple[tuple[int, ...], int] | None:
    """(index, value) of the first integer too large for float32 to hold exactly, or None."""
    values = np.asarray(values)
    if values.dtype == np.bool_ or values.size == 0:
        return None
    # Compared in the value's own dtype (np.abs of the most negative int64 is negative).
    bad = values > EXACT_LIMIT if values.dtype.kind == "u" else (values > EXACT_LIMIT) | (values < -EXACT_LIMIT)
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), values.shape))
    return where, int(values[where])


def arena_refusal(graph: Graph, name: str, is_output: bool) -> str | None:
    """Why tensor ``name`` cannot live in the GPU arena, or None: a dtype other than float32 and the
    integer/bool ones, or an integer constant float32 cannot hold exactly.  ``is_output`` changes
    nothing since integer and bool outputs are converted when read (:class:`ArenaOutputs`)."""
    dtype = graph.value_info[name].dtype
    if dtype not in ARENA_DTYPES:
        what = "output" if is_output else "tensor"
        return (f"{what} '{name}' is {dtype}; the GPU backends run float32 tensors (and integer or bool "
                f"tensors as exact float32 values)")
    if dtype in INTEGER_DTYPES and name in graph.initializers:
        bad = _inexact(graph.initializers[name])
        if bad is not None:
            return (f"constant '{name}' holds {bad[1]} at {list(bad[0])}; the GPU arena carries {dtype} "
                    f"values as float32, exact only up to 2**24")
    return None


def output_refusal(node: Node, graph: Graph) -> str | None:
    """Why ``node`` cannot write one of its outputs as a graph output: a dtype the arena cannot carry
    (integer and bool outputs are converted when read, :class:`ArenaOutputs`)."""
    outputs = {t.name for t in graph.outputs}
    for name in node.outputs:
        if name in outputs and graph.value_info[name].dtype not in ARENA_DTYPES:
            return (f"its output '{name}' is a graph output of dtype {graph.value_info[name].dtype}; the GPU "
                    f"backends return float32, integer and bool outputs")
    return None


# -- Cast -----------------------------------------------------------------------------------------

def _is_value_preserving(src: str, dst: str) -> bool:
    """Whether casting every value the arena can hold in ``src`` to ``dst`` keeps it unchanged."""
    if src == dst or dst == "float32":
        return src in ARENA_DTYPES  # integers and bools are exact float32 values already
    if src == "float32" or dst not in INTEGER_DTYPES:
        return False  # float -> int truncates (and overflows): not implemented
    if src == "bool":
        return True
    # Integer -> integer: a safe cast, or a target that holds every |x| <= 2**24 of a signed source.
    return bool(np.can_cast(src, dst, "safe")) or (dst in ("int32", "int64") and src != "bool")


def lower_cast(node: Node, graph: Graph, mult: int, lowered: Any, ref: Any) -> Any:
    """Cast's rKernel; ValueError saying why a cast is refused.  ``lowered``/``ref`` are
    :class:`.lower.Lowered` and :class:`.lower.Ref` (passed in: :mod:`.lower` imports this module)."""
    src = graph.value_info[node.inputs[0]].dtype
    dst = graph.value_info[node.outputs[0]].dtype
    if src not in ARENA_DTYPES or dst not in ARENA_DTYPES:
        raise ValueError(f"a Cast from {src} to {dst} (the arena holds float32, and integers and bools as "
                         f"exact float32 values)")
    n = int(math.prod(graph.value_info[node.outputs[0]].shape))
    chunk = _THREADS * mult
    rtasks = range(max(1, math.ceil(n / chunk)))
    if dst == "bool" and src != "bool":
        calls = tuple((r, (ref("in", 0), ref("out", 0), n, chunk)) for r in rtasks)
        return lowered(kx.cast_bool("cast_bool", _THREADS), calls, 1.0 * chunk, 8.0 * chunk)
    if not _is_value_preserving(src, dst):
        why = ("truncation and overflow are not implemented" if src == "float32"
               else "it would wrap values the arena holds")
        raise ValueError(f"a Cast from {src} to {dst} ({why})")
    # The same float32 values: one flat copy, by the shared data-movement kernel.
    r6 = km.MAX_RANK
    args = (ref("in", 0), ref("out", 0), n, chunk, *([1] * (r6 - 2) + [n]), *([0] * (r6 - 1) + [1]),
            *([0] * (r6 - 1) + [1]), *([0] * r6), *([_BIG] * r6), 0.0)
    return lowered(km.copy_nd("copy_nd"), tuple((r, args) for r in rtasks), 0.0, 8.0 * chunk)


# -- copy-in ----------------------------------------------------------------------------------------

class ArenaFeeds:
    """``feeds(name, value)``: a feed as the float32 values the arena holds.

    A float32 feed is passed through.  An integer or bool feed is converted, and refused with a
    :class:`FeedError` naming the input when a value is not exact in float32, or, for an input
    whose values a Gather reads as its indices (directly, or reshaped, unsqueezed, transposed,
    cast), when a value is out of range for the gathered axis, as the reference backend refuses it.
    Indices computed otherwise (a Slice or Where of an input...) are checked by the kernel alone,
    which cannot raise: an out-of-range index makes its output rows NaN."""

    def __init__(self, program: Any) -> None:
        #: input name -> [(node name, axis size)] of the Gathers reading all its values as indices.
        self.bounds: dict[str, list[tuple[str, int]]] = {}
        # tensor -> the input whose values it holds, all of them (the ops of _SAME_VALUES), so an
        # input reshaped or unsqueezed before the Gather is checked too; the ops are in graph order.
        source = {name: name for name in program.inputs}
        for op in getattr(program.schedule, "ops", ()):
            if not op.inputs or not op.outputs:
                continue
            if op.op_type in _SAME_VALUES and len(op.outputs) == 1 and op.inputs[0].name in source:
                source[op.outputs[0].name] = source[op.inputs[0].name]
            if op.op_type != "Gather" or len(op.inputs) < 2 or op.inputs[1].name not in source:
                continue
            data = op.inputs[0].shape
            if not data:
                continue
            axis = int(op.attrs.get("axis", 0)) % len(data)
            self.bounds.setdefault(source[op.inputs[1].name], []).append((op.name, int(data[axis])))

    def __call__(self, name: str, value: Any) -> np.ndarray:
        arr = np.asarray(value)
        if arr.dtype == np.float32:
            return np.ascontiguousarray(arr)
        if arr.dtype.kind not in "biu":
            raise FeedError(f"input '{name}' is {arr.dtype}; the GPU backends take float32, integer and bool inputs")
        bad = _inexact(arr)
        if bad is not None:
            raise FeedError(f"input '{name}' holds {bad[1]} at {list(bad[0])}; the GPU backends carry {arr.dtype} "
                            f"inputs as float32 values, exact only up to 2**24 in magnitude")
        for node, size in self.bounds.get(name, ()):
            if arr.size and (arr.min() < -size or arr.max() >= size):
                where, value = first_out_of_range(arr, size)  # type: ignore[misc]
                raise IndexRangeError(index_out_of_range(node, "Gather", value, size, name, where))
        return np.ascontiguousarray(arr, np.float32)



# -- copy-out ---------------------------------------------------------------------------------------

class ArenaOutputs:
    """``outputs(name, values)``: a graph output read back from the arena (float32) in its own dtype.

    Integer outputs (a classifier's int64 labels, an ArgMax...) are exact float32 values in the
    arena; a value an integer program could not hold exactly there was stored as NaN, and is
    reported as an :class:`OpExecutionError` naming the output and the element, never returned as a
    rounded or garbage integer.  Bool outputs are ``value != 0``."""

    def __init__(self, program: Any) -> None:
        #: output name -> dtype, for the outputs that are not float32 (from the schedule's tensors).
        self.dtypes: dict[str, str] = {}
        wanted = set(program.outputs)
        for op in getattr(program.schedule, "ops", ()):
            for ref in (*op.inputs, *op.outputs):  # inputs too: an output may be a graph input read on
                if ref.name in wanted and ref.dtype not in (None, "float32"):
                    self.dtypes[ref.name] = str(ref.dtype)

    def __call__(self, name: str, values: np.ndarray) -> np.ndarray:
        dtype = self.dtypes.get(name)
        if dtype is None:
            return values
        if dtype == "bool":
            return values != 0
        bad = ~np.isfinite(values)
        info = np.iinfo(dtype)
        bad |= (values < info.min) | (values > info.max)
        if bad.any():
            where = [int(i) for i in np.unravel_index(int(np.argmax(bad)), values.shape)]
            raise OpExecutionError(f"output '{name}' ({dtype}) at {where}: its value was beyond 2**24 in magnitude, "
                                   f"which the GPU arena cannot hold exactly as float32 (stored as NaN); run this "
                                   f"model on the cpu backend")
        return values.astype(dtype)
