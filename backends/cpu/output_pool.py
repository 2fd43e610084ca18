"""Buffers for a model's large outputs, reused once the caller has let go of them.

A run copies each output out of the arena, so the caller owns what it gets.  For a large output the
copy's fresh allocation is the larger part of that cost: glibc maps a block of 64 MiB from the kernel
on each ``malloc`` and unmaps it on ``free``, so every page of it faults and is zeroed again in every
run.  llama-b8's [8, 128, 16000] logits (65 MB): 5.8 ms a run through ``view.copy()``, 13.6 ms when the
previous run's logits are still alive while the next one runs (``out = model(feeds)`` in a loop),
4.1 ms copied into a buffer already mapped.

So a large output is copied into a buffer the pool keeps, and the pool hands that buffer out again
only when nothing but the pool refers to it: the caller dropped the array and every view of it (a
view, a ``torch.from_numpy`` tensor or a memoryview holds a reference).  It keeps at most
:data:`BUFFERS` buffers per output, so that in the loop above one buffer is free while the other is
still the caller's; past that, outputs are fresh copies as before.
"""

from __future__ import annotations

import sys

import numpy as np

#: Outputs smaller than this are plain copies (their allocation comes from malloc's free lists).
MIN_BYTES = 1 << 20
#: Buffers kept per output (each as large as the output): 0 turns the pool off.
BUFFERS = 2
#: ``sys.getrefcount`` of a buffer referred to by the pool's list alone, seen from
#: :meth:`OutputPool.copy`'s loop: the list, the loop variable and the call's argument.
_ONLY_THE_POOL = 3


class OutputPool:
    """Per output name, the buffers large copies are written to (one pool per executable: its runs
    never overlap, see :meth:`.runtime.CpuExecutable._run_here`)."""

    def __init__(self, buffers: int = BUFFERS, min_bytes: int = MIN_BYTES) -> None:
        self.buffers = buffers
        self.min_bytes = min_bytes
        self._kept: dict[str, list[np.ndarray]] = {}

    def copy(self, name: str, view: np.ndarray) -> np.ndarray:
        """A copy of ``view`` (output ``name``) that the caller owns: a kept buffer nobody else refers
        to, written again, or a new array (kept when there is room)."""
        if view.nbytes < self.min_bytes or self.buffers <= 0:
            return view.copy()
        kept = self._kept.setdefault(name, [])
        for buf in kept:
            if sys.getrefcount(buf) <= _ONLY_THE_POOL:
                np.copyto(buf, view)
                return buf
        buf = view.copy()
        if len(kept) < self.buffers:
            kept.append(buf)
        return buf
