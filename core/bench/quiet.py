"""Waiting until the process is idle before the next timed run.

Thread pools spin after a run so that the next parallel region starts
without a wake-up: onnxruntime's workers spin for about 30 ms after every
``run``, numba's OpenMP workers for a few ms, numpy's BLAS threads too.  In
an alternating benchmark on a machine with few cores, whoever runs next
would share a core with that spinning thread, and the timing would measure
the neighbour instead of the runner (on 2 cores it made rammer's cpu
backend look 3-10x slower, and onnxruntime 1.3x slower).

:func:`wait_until_idle` polls the process's CPU time (all threads) and
returns once consecutive windows pass with the process nearly idle, so every
timed run starts on quiet cores and pays its own wake-up cost.  The kernel
charges other threads' CPU time to the process only at scheduler ticks (a
thread spinning on another core shows as 0 or 2 cores in alternate 2 ms
windows), hence windows of 10 ms, two in a row.
"""

from __future__ import annotations

import time

#: Length of one polling window, seconds.
WINDOW_S = 0.01
#: Consecutive idle windows needed.
IDLE_WINDOWS = 2
#: A window counts as idle when the process used less than this fraction of one core.
IDLE_FRACTION = 0.1
#: Never wait longer than this (a runner that keeps a thread busy forever).
LIMIT_S = 0.5


def wait_until_idle(window_s: float = WINDOW_S, idle_fraction: float = IDLE_FRACTION,
                    limit_s: float = LIMIT_S) -> float:
    """Sleep until IDLE_WINDOWS windows of ``window_s`` in a row each use under
    ``idle_fraction`` of a core (or ``limit_s`` passes); returns seconds waited."""
    start = time.perf_counter()
    cpu0, wall0 = time.process_time(), start
    idle = 0
    while True:
        time.sleep(window_s)
        cpu1, wall1 = time.process_time(), time.perf_counter()
        idle = idle + 1 if cpu1 - cpu0 < idle_fraction * (wall1 - wall0) else 0
        if idle >= IDLE_WINDOWS or wall1 - start >= limit_s:
            return wall1 - start
        cpu0, wall0 = cpu1, wall1
