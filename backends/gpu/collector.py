"""Python's cyclic garbage collector paused while the GPU compiler builds a program.

A full-size model's program is built from one Python object per rTask and per wait (the lowerings'
calls, the block programs' steps, the call table's rows): hundreds of thousands of objects that
all survive until the program is done.  Every 700 allocations start a collection of the youngest
generation, and the survivors push the oldest generation's collections, each of which traverses
every object the compile has made so far (the objects from before the compile are frozen,
:mod:`rammer.gc_freeze`).  Measured on resnet50-b8 for cuda: 4,332 collections, 3.1 of 10.6 s of
CPU, 2.3 s of it in 20 full collections.  These objects form almost no reference cycles (they are
tuples, lists and dicts of numbers and strings, freed by reference counting), so the collector
finds nothing to free; it runs again, as usual, once the last compile of the process is done.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
#: GPU compiles running in this process (the first pauses the collector, the last resumes it).
_active = 0
#: Whether the first of them paused it (a process that disabled the collector itself keeps it off).
_paused = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Within the block, the cyclic collector does not run (reference counting still frees
    everything that is not in a cycle); it is enabled again when the last such block of the process
    ends, also on an exception, unless the process had disabled it before."""
    global _active, _paused
    with _lock:
        if _active == 0:
            _paused = gc.isenabled()
            if _paused:
                gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _paused:
                gc.enable()
                _paused = False
