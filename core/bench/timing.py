"""The one timing protocol of ``rammer run`` and ``rammer bench``.

A measurement is: one checking run (its outputs are what gets printed or
compared), ``warmup`` untimed runs, then ``repeat`` timed rounds
(:func:`time_rounds`): each round times one run of every runner, alone, with
``time.perf_counter`` around the call, in an order rotated every round so that
drift (thermal, noisy neighbours) hits every runner alike.  By default the
timed runs go back to back.  With ``settle`` each timed run first waits until
the process is idle (:mod:`.quiet`: thread pools that spin after a run,
onnxruntime's for about 30 ms, would otherwise share the cores with the next
run); that measures each run on quiet cores and is the fairer protocol when
runtimes alternate in one process.

``rammer run`` times one model, so its rounds are its runs back to back
(:func:`time_calls`); ``rammer bench`` times the backends of a matrix row
together, so with several backends each run of one follows a run of another:
its caches hold the other's data and, without ``--settle``, the other's threads
may still spin on the cores.  That, not the protocol, is why a small model's
figure in a many-backend ``rammer bench`` can exceed its ``rammer run`` figure;
``rammer bench --backends B`` alone measures what ``rammer run -b B`` does.

Both commands report the same statistics: mean, standard deviation, min,
p50 (the median), p90, p99 and max, with the run and warm-up counts and
whether runs were settled.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .quiet import wait_until_idle

__all__ = ["Timing", "summarize", "time_calls", "time_rounds", "percentile"]


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


def time_rounds(calls: Mapping[str, Callable[[], Any]], repeat: int, settle: bool = False,
                on_round: Callable[[int], None] | None = None,
                on_error: Callable[[str, Exception], None] | None = None) -> dict[str, list[float]]:
    """Seconds of each timed run per name of ``calls``: ``repeat`` rounds of one run of
    each, the order rotated every round (see the module docstring).  ``on_round(k)`` is
    called before round ``k``, outside the timed calls but between two runs: keep it cheap.
    A call that raises is passed to ``on_error`` and not timed again (without ``on_error`` it
    propagates)."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    live = list(calls)
    times: dict[str, list[float]] = {name: [] for name in live}
    for round_no in range(repeat):
        if on_round is not None:
            on_round(round_no)
        if not live:
            continue
        shift = round_no % len(live)
        for name in live[shift:] + live[:shift]:
            fn = calls[name]
            if settle:
                wait_until_idle()
            try:
                start = time.perf_counter()
                fn()
                elapsed = time.perf_counter() - start
            except Exception as exc:
                if on_error is None:
                    raise
                on_error(name, exc)
                live.remove(name)
                continue
            times[name].append(elapsed)
    return times


def time_calls(fn: Callable[[], Any], repeat: int, warmup: int = 1, settle: bool = False) -> Timing:
    """``warmup`` untimed calls of ``fn``, then ``repeat`` timed ones: :func:`time_rounds`
    with one runner, so the runs go back to back (see the module docstring)."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    for _ in range(warmup):
        fn()
    return summarize(time_rounds({"run": fn}, repeat, settle)["run"], warmup, settle)
