"""The one timing protocol of ``rammer run`` and ``rammer bench``.

A measurement is: one checking run (its outputs are what gets printed or
compared), ``warmup`` untimed runs, then ``repeat`` timed runs, each timed
alone with ``time.perf_counter`` around the call.  By default the timed runs
go back to back, which is what a caller's own loop sees.  With ``settle`` each
timed run first waits until the process is idle (:mod:`.quiet`: thread pools
that spin after a run, onnxruntime's for about 30 ms, would otherwise share the
cores with the next run); that measures each run on quiet cores and is the
fairer protocol when runtimes alternate in one process.

Both commands report the same statistics: mean, standard deviation, min,
p50 (the median), p90, p99 and max, with the run and warm-up counts and
whether runs were settled.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from .quiet import wait_until_idle

__all__ = ["Timing", "summarize", "time_calls", "percentile"]


def percentile(sorted_times: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation between closest ranks (numpy's default)."""
    if not sorted_times:
        raise ValueError("no times")
    pos = (len(sorted_times) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_times) - 1)
    return sorted_times[lo] + (sorted_times[hi] - sorted_times[lo]) * (pos - lo)


@dataclass(frozen=True)
class Timing:
    """Statistics of ``runs`` timed runs, in seconds."""

    runs: int
    warmup: int
    settled: bool
    mean_s: float
    std_s: float
    min_s: float
    p50_s: float
    p90_s: float
    p99_s: float
    max_s: float

    @property
    def median_s(self) -> float:
        return self.p50_s

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["median_s"] = self.p50_s
        return d


def summarize(times: Sequence[float], warmup: int = 0, settled: bool = False) -> Timing:
    """The statistics of ``times`` (seconds, at least one)."""
    ts = sorted(float(t) for t in times)
    if not ts:
        raise ValueError("no timed runs")
    return Timing(runs=len(ts), warmup=int(warmup), settled=bool(settled),
                  mean_s=statistics.fmean(ts), std_s=statistics.stdev(ts) if len(ts) > 1 else 0.0,
                  min_s=ts[0], p50_s=percentile(ts, 50), p90_s=percentile(ts, 90), p99_s=percentile(ts, 99),
                  max_s=ts[-1])


def time_calls(fn: Callable[[], Any], repeat: int, warmup: int = 1, settle: bool = False) -> Timing:
    """``warmup`` untimed calls of ``fn``, then ``repeat`` timed ones (see the module docstring)."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if settle:
            wait_until_idle()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return summarize(times, warmup, settle)
