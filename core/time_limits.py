"""Time limits that scale with how slow the machine is right now.

A limit such as "a fuzz case that gives no answer in 120 s is a hang" is set
on a quiet machine.  On a loaded 2-core machine (other jobs, several test
workers) the same case can take five or ten times as long without anything
being wrong, and a fixed limit then reports a hang caused by load alone.  So
a limit is given as its value on a quiet reference machine and multiplied by
:func:`machine_slowdown`, which times a fixed amount of single-threaded
Python work now and compares it with the time it takes on that reference
machine (this project's 2-core CI machine, quiet).  The recent load average
per CPU counts too, because a short calibration can fall into a lull.  The
factor is never below 1 (a fast machine keeps the quiet limit) and never above
:data:`MAX_SLOWDOWN` (a real hang must still end).  ``RAMMER_SLOWDOWN=F`` in
the environment fixes the factor (for an emulator, or to reproduce a report).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

__all__ = ["MAX_SLOWDOWN", "REFERENCE_CALIBRATION_S", "SLOWDOWN_ENV", "calibration_seconds", "machine_slowdown",
           "scaled_limit"]

#: Seconds :func:`calibration_seconds` takes on the reference machine when it is quiet (measured there as CPU
#: time, which load does not inflate: 0.031 s).
REFERENCE_CALIBRATION_S = 0.031
#: The largest factor a limit is multiplied by.
MAX_SLOWDOWN = 20.0
#: Environment variable that fixes the factor.
SLOWDOWN_ENV = "RAMMER_SLOWDOWN"
#: A measured factor is reused for this long (limits are checked about once a second in loops).
_REUSE_S = 5.0
_CALIBRATION_LOOPS = 300_000

_last: tuple[float, float] | None = None  # (time.monotonic() of the measurement, factor)


def calibration_seconds() -> float:
    """Wall seconds a fixed amount of single-threaded Python work takes now (median of three)."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        total = 0
        for i in range(_CALIBRATION_LOOPS):
            total += i * i % 7
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _load_per_cpu() -> float:
    try:
        return os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return 0.0


def machine_slowdown(calibrate: Callable[[], float] | None = None) -> float:
    """How many times slower than the quiet reference machine this machine is now (1 to MAX_SLOWDOWN).

    ``calibrate`` replaces :func:`calibration_seconds` (tests inject a slowed-down one); a result measured
    with the default calibration is reused for a few seconds."""
    global _last
    fixed = os.environ.get(SLOWDOWN_ENV)
    if fixed:
        try:
            return min(MAX_SLOWDOWN, max(1.0, float(fixed)))
        except ValueError:
            raise ValueError(f"{SLOWDOWN_ENV}={fixed!r} is not a number; set it to a factor such as 3, "
                             f"or unset it to measure the machine") from None
    now = time.monotonic()
    if calibrate is None and _last is not None and now - _last[0] < _REUSE_S:
        return _last[1]
    seconds = (calibrate or calibration_seconds)()
    factor = min(MAX_SLOWDOWN, max(1.0, seconds / REFERENCE_CALIBRATION_S, _load_per_cpu()))
    if calibrate is None:
        _last = (now, factor)
    return factor


def scaled_limit(seconds: float, calibrate: Callable[[], float] | None = None) -> float:
    """``seconds`` (a limit that holds on the quiet reference machine) scaled to this machine's load now."""
    return seconds * machine_slowdown(calibrate)
