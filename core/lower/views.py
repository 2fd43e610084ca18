"""Where tensors live: buffers in an arena and strided views of them.

Every tensor of a lowered graph is a :class:`View` of a :class:`Buffer`:
an element offset, a shape and element strides.  Reshape-like ops, Split,
Slice, Transpose and Expand create views of their input's buffer instead of
copying it (:mod:`.aliasing`); kernels read views through their strides, and a
kernel that needs a dense input gets an explicit copy op in front of it.

Which dtypes may live in the arena is the backend's choice (a dtype set passed
to its lowering); element sizes here are numpy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np


@cache
def itemsize(dtype: str) -> int:
    """Bytes per element of a numpy dtype name (``bool``: 1)."""
    return np.dtype(dtype).itemsize


@dataclass
class Buffer:
    """One allocation: a constant, a graph input, or an intermediate."""

    id: int
    dtype: str
    size: int  # elements
    kind: str  # "const" | "input" | "temp"
    #: Constant contents (``kind == "const"``).
    data: np.ndarray | None = None
    #: Byte offset in the arena, set by the memory planner.
    byte_offset: int = -1

    @property
    def nbytes(self) -> int:
        return self.size * itemsize(self.dtype)

    @property
    def elem_offset(self) -> int:
        """Offset in elements of this buffer's dtype (the planner aligns it to the element size)."""
        return self.byte_offset // itemsize(self.dtype)


@dataclass(frozen=True)
class View:
    buffer: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    offset: int = 0  # in elements, relative to the buffer

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_dense(self) -> bool:
        """C-contiguous (size-1 dims may carry any stride)."""
        expect = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides)):
            if d != 1 and s != expect:
                return False
            expect *= d
        return True

    def with_shape(self, shape: tuple[int, ...]) -> View:
        """A dense reshape of a dense view."""
        return View(self.buffer, self.dtype, tuple(shape), dense_strides(shape), self.offset)


def dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def broadcast_view(view: View, shape: tuple[int, ...]) -> View:
    """``view`` broadcast (numpy rules) to ``shape``: stride 0 on stretched dims."""
    pad = len(shape) - view.rank
    if pad < 0:
        raise ValueError(f"cannot broadcast {view.shape} to {shape}")
    src_shape = (1,) * pad + view.shape
    src_strides = (0,) * pad + view.strides
    strides = []
    for d_out, d_in, s in zip(shape, src_shape, src_strides):
        if d_in == d_out:
            strides.append(s if d_in != 1 else 0)
        elif d_in == 1:
            strides.append(0)
        else:
            raise ValueError(f"cannot broadcast {view.shape} to {shape}")
    return View(view.buffer, view.dtype, tuple(shape), tuple(strides), view.offset)


def collapse(shape: tuple[int, ...],
             stride_sets: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge adjacent dims that every operand walks as one (fewer loop levels).

    Dims of size 1 are dropped; dims i, i+1 merge when, for each operand,
    ``stride[i] == stride[i+1] * shape[i+1]``.
    """
    dims = [i for i, d in enumerate(shape) if d != 1]
    out_shape: list[int] = []
    out_strides: list[list[int]] = [[] for _ in stride_sets]
    for i in dims:
        if out_shape and all(ss[-1] == st[i] * shape[i] for ss, st in zip(out_strides, stride_sets)):
            out_shape[-1] *= shape[i]
            for ss, st in zip(out_strides, stride_sets):
                ss[-1] = st[i]
            continue
        out_shape.append(shape[i])
        for ss, st in zip(out_strides, stride_sets):
            ss.append(st[i])
    return tuple(out_shape), [tuple(s) for s in out_strides]


def to_rank4(shape: tuple[int, ...],
             stride_sets: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]] | None:
    """Collapse and left-pad to exactly 4 dims; None if more than 4 remain."""
    shape, stride_sets = collapse(shape, stride_sets)
    if len(shape) > 4:
        return None
    pad = 4 - len(shape)
    return (1,) * pad + shape, [(0,) * pad + s for s in stride_sets]
