"""Keep Python's garbage collector off the compiler's objects while it builds them.

Two process-wide settings, each taken by the first of the compiles running at once (threads may
compile at once) and handed back when the last one ends, also on an error:

* :func:`objects_before_frozen`: the objects that existed before a compile are frozen
  (``gc.freeze``).  A compile allocates hundreds of thousands of objects (the IR, schedules, numba's
  typing of cached kernels), which triggers the collector's oldest generation; each such collection
  traverses every tracked object of the process, most of them the modules imported before (numba,
  onnx, and whatever the caller imported: a process with torch holds 400,000).  Measured on a llama
  cold compile here: one full collection of 2.2 s, 0.1-0.35 s with the objects from before frozen.
  The objects made during the compile are collected as usual.
* :func:`collector_paused`: the cyclic collector does not run at all (the GPU backends' compile).
  A full-size GPU program is built from one Python object per rTask and per wait (the lowerings'
  calls, the block programs' steps, the call table's rows), all alive until the program is done;
  every 700 allocations start a collection, and the survivors push the oldest generation's, each
  traversing every object the compile has made so far.  Measured on resnet50-b8 for cuda: 4,332
  collections, 3.1 of 10.6 s of CPU.  These objects form almost no reference cycles (tuples, lists
  and dicts of numbers and strings, freed by reference counting), so the collector found nothing.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator

__all__ = ["collector_paused", "objects_before_frozen"]


class _ProcessWide:
    """A setting the first of the blocks running at once takes (``take`` returns whether it did:
    a process that already has it its own way is left alone) and the last one hands back
    (``give_back``, only if the first took it)."""

    def __init__(self, take: Callable[[], bool], give_back: Callable[[], None]) -> None:
        self._take, self._give_back = take, give_back
        self._lock = threading.Lock()
        self._active = 0  # blocks running in this process
        self._taken = False

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                self._taken = self._take()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0 and self._taken:
                    self._give_back()
                    self._taken = False


def _freeze() -> bool:
    # A process whose collector is disabled, or that froze objects itself (a server preloading
    # before ``fork``), is left as it is: unfreezing would hand its objects back too.
    if gc.isenabled() and gc.get_freeze_count() == 0:
        gc.freeze()
        return True
    return False


def _pause() -> bool:
    # A process that disabled the collector itself keeps it off.
    if gc.isenabled():
        gc.disable()
        return True
    return False


_frozen = _ProcessWide(_freeze, lambda: gc.unfreeze())
_paused = _ProcessWide(_pause, lambda: gc.enable())


def objects_before_frozen() -> contextlib.AbstractContextManager[None]:
    """Within the block, the collector skips the objects that existed when the first block began;
    they are handed back to the oldest generation when the last block of the process ends."""
    return _frozen.block()


def collector_paused() -> contextlib.AbstractContextManager[None]:
    """Within the block, the cyclic collector does not run (reference counting still frees
    everything that is not in a cycle); it is enabled again when the last such block of the process
    ends, unless the process had disabled it before."""
    return _paused.block()
