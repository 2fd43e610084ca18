"""The driver: persistent vEU workers walking their task-table rows.

``run`` starts one worker per vEU (a ``prange`` over vEU ids, so every
worker starts at once on numba's thread pool and is joined at the end) and
each ``walk`` s its rows in order: a barrier row waits (acquire) until the
named vEU has published enough progress; any other row calls its rKernel
through the kernel's entry address, then publishes this vEU's progress
(release).  The driver never changes with the model or with the kernels it
uses, so numba compiles it once and loads it from its disk cache afterwards.
"""

from __future__ import annotations

from numba import njit, prange

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .atomics import (
    atomic_add,
    call_kernel,
    current_cpu,
    data_ptr,
    monotonic_ns,
    pin_to_core,
    set_affinity,
    set_pool_threads,
    store_release,
    wait_at_least,
)

# (defined without numba in task_rows, for the native image's executable; re-exported here)
from .task_rows import BARRIER, FAILED_CODE, FAILED_ROW, KERNEL_FAILED, STATUS, STRIDE  # noqa: F401


@njit(nogil=True, cache=True, boundscheck=False)
def walk(v, arena, X, R, T, start, end, entries, counters, abort, max_sleeps, trace=None):
    """vEU ``v`` walks rows ``start:end``.  With a ``trace`` array (rows x 2, int64) each
    row's start and end time (``monotonic_ns``) is recorded; without one (``None``,
    the normal launch) numba compiles the timing away.  A kernel that reports an error
    stops the walk with KERNEL_FAILED, its row and status left in the vEU's counter line
    (FAILED_ROW, FAILED_CODE)."""
    nbytes = arena.shape[0]
    a = data_ptr(arena, 0)
    xp = data_ptr(X, 0)
    rp = data_ptr(R, 0)
    for r in range(start, end):
        if trace is not None:
            trace[r, 0] = monotonic_ns()
        k = T[r, 0]
        if k == BARRIER:
            st = wait_at_least(counters, T[r, 2] * STRIDE, T[r, 3], abort, max_sleeps)
            if st != 0:
                atomic_add(counters, abort, 1)
                return st
        else:
            st = call_kernel(entries[k], a, nbytes, xp, X.shape[0], rp, R.shape[0], data_ptr(T[r], 2), T[r, 1])
            if st != 0:
                counters[v * STRIDE + FAILED_ROW] = r + 1
                counters[v * STRIDE + FAILED_CODE] = st
                atomic_add(counters, abort, 1)
                return KERNEL_FAILED
        if trace is not None:
            trace[r, 1] = monotonic_ns()
        store_release(counters, v * STRIDE, r - start + 1)
    return 0


@njit(parallel=True, nogil=True, cache=True)
def run(arena, X, R, T, starts, ends, entries, counters, status, cores, allowed, max_sleeps, trace=None):
    """One launch: every vEU walks its rows; returns the worst vEU status (0: ok).
    ``trace`` (optional) records each row's times (see :func:`walk`).

    ``cores[v]`` >= 0 pins vEU v there for good; ``allowed`` is the process's
    cores (cpu_set_t words).  The counters are zeroed and numba's thread count
    set here rather than by the caller: after an idle spell every Python call
    on the launch path runs from cold caches.  One vEU walks on the calling
    thread without opening a parallel region.

    An unpinned worker that wakes on the caller's core moves off it and stays
    off it.  After an idle spell Linux tends to wake a pool worker on the
    waker's core (wake-affine); two vEUs time-slicing one core through spin
    barriers made a 3 ms model take 12 ms.  When the worker's affinity was
    restored after each launch, the next wake after an idle spell went to the
    caller's core again in most launches (each move costs ~70 us in this VM).
    """
    n = starts.shape[0]
    abort = n * STRIDE
    for i in range(counters.shape[0]):
        counters[i] = 0
    if n == 1 and cores[0] < 0:
        st = walk(0, arena, X, R, T, starts[0], ends[0], entries, counters, abort, max_sleeps, trace)
        status[0] = st
        return st
    set_pool_threads(n)
    master = current_cpu()
    for v in prange(n):
        if cores[v] >= 0:
            pin_to_core(cores[v])
        elif v > 0 and master >= 0 and current_cpu() == master:
            set_affinity(allowed, master)
        st = walk(v, arena, X, R, T, starts[v], ends[v], entries, counters, abort, max_sleeps, trace)
        if st == 0:
            # Join on our own counters before OpenMP's: its barrier spins for
            # milliseconds without yielding, and a worker woken on this core
            # waits behind that spin (3-5 ms seen after idle).  Ours yields.
            for u in range(n):
                if st == 0 and u != v:
                    st = wait_at_least(counters, u * STRIDE, ends[u] - starts[u], abort, max_sleeps)
            if st == 1:
                st = 0  # the other vEU failed and reports it; this one finished
        status[v] = st
    worst = 0
    for v in range(n):
        # a real failure (the smallest code) outranks 1, "aborted because another vEU failed"
        s = status[v]
        if s != 0 and (worst == 0 or worst == 1 or (s != 1 and s < worst)):
            worst = s
    return worst


@njit(nogil=False, cache=True)
def run_holding_gil(arena, X, R, T, starts, ends, entries, counters, status, cores, allowed, max_sleeps, trace=None):
    """:func:`run` for one unpinned vEU, keeping the GIL (numba releases it around ``nogil``
    functions).  Short launches of 1-vEU lanes use it: with several callers, every GIL
    release let another caller take it, and getting it back meant waiting for a thread wake-up
    that cost more than such a launch (see ``runtime.LANE_GIL_MAX_S``)."""
    for i in range(counters.shape[0]):
        counters[i] = 0
    st = walk(0, arena, X, R, T, starts[0], ends[0], entries, counters, starts.shape[0] * STRIDE, max_sleeps,
              trace)
    status[0] = st
    return st
