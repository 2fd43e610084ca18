"""A compiled cpu program as plain data: what the executable runs, the disk cache stores and the
generated program.py describes (:class:`Program`, its steps, and tensor placements)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rammer.lower.views import View

from .ops import ARENA_DTYPES

#: An ``If`` host step runs a taken branch of at least this many nodes compiled as a model of its
#: own (``runtime.py``); smaller ones are interpreted: compiling them would cost more than it saves.
BRANCH_MIN_NODES = 4


@dataclass
class HostStep:
    """A node run on the reference implementation."""

    node_index: int
    reason: str


@dataclass
class CompiledSegment:
    starts: np.ndarray
    ends: np.ndarray


@dataclass
class Program:
    """Everything an executable needs, as plain data (what the disk cache stores)."""

    arena_bytes: int
    const_bytes: int
    const_blob: np.ndarray  # uint8, the constant region
    T: np.ndarray
    X: np.ndarray
    R: np.ndarray
    kernel_names: list[str]
    steps: list[Any]  # CompiledSegment | HostStep
    #: tensor name -> (dtype, byte offset of element 0, shape, strides in elements)
    tensors: dict[str, tuple[str, int, tuple[int, ...], tuple[int, ...]]]
    host_tensors: list[str]
    num_veus: int
    cores: list[int]
    report: dict[str, Any] = field(default_factory=dict)


def view_placement(view: View, byte_offset: int) -> tuple[str, int, tuple[int, ...], tuple[int, ...]]:
    return view.dtype, byte_offset + view.offset * ARENA_DTYPES[view.dtype], view.shape, view.strides


def aligned_arena(arena_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """A new arena of ``arena_bytes``, 64-byte aligned: (the buffer that owns it, the arena)."""
    raw = np.empty(arena_bytes + 64, dtype=np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw, raw[start:start + arena_bytes]
