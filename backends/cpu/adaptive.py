"""Choosing, launch by launch, between the whole program and a 1-vEU lane.

The static schedule assumes its vEUs run at the same time.  When another
process takes one of the cores, the vEU on it falls behind and every barrier
waits for it: a 2-vEU program can then be several times slower than one vEU
running everything alone.  So a single caller times every launch and picks
the variant whose recent launches were faster:

* it starts on the whole program and keeps per variant the median of its
  last :data:`WINDOW` launches;
* when the whole program's recent median stays above :data:`SLOW` times its
  best median for :data:`STREAK` refreshes in a row (after :data:`WARMUP`
  launches), a lane is built and tried; the faster variant then wins;
* the variant not in use is re-measured now and then, after 16, 32, 64...
  launches (the interval doubles each time it loses, resets when the one in
  use slows down, and shrinks to 2 while its probes beat the one in use), so
  a quiet machine costs at most one slower launch in 16, then far fewer.

The lane is built on first need by the executable (``make_lane``); choosing
never changes results: both variants compute the same program.
"""

from __future__ import annotations

import statistics
from collections import deque

__all__ = ["LaunchChooser", "WINDOW", "SLOW"]

#: Launches per variant that make its recent median.
WINDOW = 8
#: The whole program counts as slowed down at this multiple of its best median.
SLOW = 1.25
#: First and largest interval between re-measurements of the variant not in use.
FIRST_PROBE = 16
MAX_PROBE = 1024

#: Launches of the variant in use between recomputations of its median.
REFRESH = 4
#: Launches of a variant that only warm it up (their times set no best).
WARMUP = 2 * WINDOW
#: Refreshes in a row that must find the whole program slowed before a lane is built.
STREAK = 3

FULL, LANE = "full", "lane"
INF = float("inf")


class LaunchChooser:
    """Which variant the next launch uses (:meth:`choose`), from the times :meth:`record` gets.

    Cheap per launch (a model can run in 10 us): medians are recomputed every
    :data:`REFRESH` launches of a variant, not at every launch.
    """

    def __init__(self) -> None:
        self.times = {FULL: deque(maxlen=WINDOW), LANE: deque(maxlen=WINDOW)}
        self.med = {FULL: INF, LANE: INF}
        self.best = {FULL: INF, LANE: INF}
        self.current = FULL
        self.interval = FIRST_PROBE
        self.since_probe = 0
        self.lane_wanted = False
        self.slow_streak = 0
        self.launches = {FULL: 0, LANE: 0}

    def choose(self, lane_ready: bool) -> str:
        """The variant of the next launch."""
        if not lane_ready:
            return FULL
        other = LANE if self.current == FULL else FULL
        self.since_probe += 1
        if self.med[other] == INF or self.since_probe >= self.interval:
            self.since_probe = 0
            return other
        return self.current

    def record(self, variant: str, seconds: float) -> None:
        n = self.launches[variant] = self.launches[variant] + 1
        times = self.times[variant]
        times.append(seconds)
        probing = variant != self.current
        if not probing and n % REFRESH:
            return
        if len(times) < 3:
            return
        med = self.med[variant] = statistics.median(times)
        if n <= WARMUP:
            return  # first launches: cold caches and page faults, not a shared core
        slowed = med > SLOW * self.best[variant]
        self.best[variant] = min(self.best[variant], med)
        if variant == FULL:
            self.slow_streak = self.slow_streak + 1 if slowed else 0
            if self.slow_streak >= STREAK:
                self.lane_wanted = True  # slowed for STREAK refreshes in a row: worth a lane
        if variant == self.current and slowed:
            self.interval = FIRST_PROBE  # the one in use slowed: look at the other soon
        other = LANE if self.current == FULL else FULL
        if self.med[other] < self.med[self.current]:
            self.current = other
            self.interval = FIRST_PROBE
        elif probing and seconds < self.med[self.current]:
            self.interval = 2  # this probe beat the one in use: gather its evidence quickly
        elif probing:
            self.interval = min(MAX_PROBE, max(FIRST_PROBE, self.interval * 2))  # it lost again: look less often
