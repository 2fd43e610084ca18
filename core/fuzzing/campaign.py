"""Running many fuzz cases in worker processes.

Each worker is a spawned process that keeps its imports and numba's compiled
kernels warm across cases.  A case that kills its worker (a segfault) is a
``crash``.  A case that runs past its time limit is a ``hang`` only if it does
so twice: the first time its worker is killed and the case is rerun once in a
fresh worker, whose clock starts when that worker has finished its imports.
The limits (``timeout_s``, ``first_timeout_s``) are a quiet machine's; they are
multiplied by :func:`rammer.time_limits.machine_slowdown` when checked, so load
from other jobs alone does not make a hang.  Either way a fresh worker takes
over and the campaign goes on.  Cases are fully determined by
``(campaign, seed)``, so every finding can be rerun and minimised from its
seed alone.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from .. import plugins
from ..time_limits import machine_slowdown
from .graphs import random_model
from .mutate import mutate
from .oracle import FAILURES, run_case

__all__ = ["CampaignResult", "run_campaign", "build_case", "CAMPAIGNS"]

#: "graphs": valid random models; "mutants": broken copies of them.
CAMPAIGNS = ("graphs", "mutants")


def build_case(campaign: str, seed: int) -> tuple[bytes, dict, str]:
    """The model bytes, feeds and a short label of case ``seed`` of ``campaign``."""
    if campaign == "graphs":
        model, feeds = random_model(seed)
        return model.SerializeToString(), feeds, f"{len(model.graph.node)} nodes"
    if campaign == "mutants":
        model, feeds = random_model(seed)
        data, what = mutate(model, seed ^ 0x5EED)
        return data, feeds, what
    raise ValueError(f"unknown campaign {campaign!r} (one of {CAMPAIGNS})")


def _worker(conn: Any, backend: str, cache_dir: str, case_runner: Callable[..., Any] | None = None) -> None:
    os.environ["RAMMER_CACHE_DIR"] = cache_dir
    logging.getLogger("rammer").setLevel(logging.ERROR)

    run_one = case_runner or run_case
    # Each case compiles fresh: a backend with a compile cache is told not to use it.
    no_cache = {"cache": False} if plugins.get_backend(backend).capabilities.compile_cache else None
    conn.send(_READY)  # the imports are done: a case's clock starts now at the earliest
    while True:
        msg = conn.recv()
        if msg is None:
            return
        campaign, seed = msg
        try:
            data, feeds, label = build_case(campaign, seed)
        except Exception as exc:  # the generator could not make this case: not a finding about rammer
            conn.send({"kind": "skipped", "detail": f"{type(exc).__name__}: {exc}", "label": ""})
            continue
        out = run_one(data, feeds, backend, no_cache)
        d = out.as_dict()
        d["label"] = label
        conn.send(d)


#: A worker's first message: its imports are done.
_READY = {"kind": "_ready"}


@dataclass
class CampaignResult:
    backend: str
    campaign: str
    counts: Counter = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    cases: int = 0
    #: Cases rerun in a fresh worker after they ran past their limit once (they count once in ``cases``).
    retried: int = 0

    def summary(self) -> dict[str, Any]:
        return {"backend": self.backend, "campaign": self.campaign, "cases": self.cases,
                "seconds": round(self.seconds, 1), "counts": dict(self.counts), "retried": self.retried,
                "failures": sum(v for k, v in self.counts.items() if k in _failure_kinds())}


def _failure_kinds() -> tuple[str, ...]:
    return FAILURES


@dataclass
class _Slot:
    """One worker and the case it is running."""

    process: Any
    conn: Any
    seed: int | None = None  # the case it runs, None when idle
    sent_at: float = 0.0  # when the case was sent
    ready_at: float | None = None  # when the worker said its imports were done
    served: int = 0  # cases it answered
    first_try: dict[str, Any] | None = None  # the case's first try ran past its limit: what happened

    def case_clock(self, now: float) -> float:
        """Seconds the current case has had, not counting the worker's imports."""
        start = self.sent_at if self.ready_at is None else max(self.sent_at, self.ready_at)  # imports excluded
        return now - start


class _Pool:
    """Workers over pipes; each can be killed and replaced on its own."""

    def __init__(self, n: int, backend: str, cache_dir: str, case_runner: Callable[..., Any] | None = None):
        self.ctx = mp.get_context("spawn")
        self.backend, self.cache_dir, self.case_runner = backend, cache_dir, case_runner
        self.workers = [self._start() for _ in range(n)]

    def _start(self) -> _Slot:
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child, self.backend, self.cache_dir, self.case_runner),
                             daemon=True)
        p.start()
        child.close()
        return _Slot(p, parent)

    def replace(self, i: int) -> _Slot:
        p = self.workers[i].process
        if p.is_alive():
            p.kill()
        p.join(5)
        self.workers[i] = self._start()
        return self.workers[i]

    def send(self, i: int, campaign: str, seed: int) -> _Slot:
        """Give worker ``i`` case ``seed`` (a fresh worker if its pipe broke); returns the worker's slot."""
        w = self.workers[i]
        try:
            w.conn.send((campaign, seed))
        except (BrokenPipeError, OSError):
            first_try = w.first_try
            w = self.replace(i)
            w.first_try = first_try
            w.conn.send((campaign, seed))
        w.seed, w.sent_at = seed, time.time()
        return w

    def close(self) -> None:
        for w in self.workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for w in self.workers:
            w.process.join(5)
            if w.process.is_alive():
                w.process.kill()


def run_campaign(backend: str, campaign: str, seeds: Iterable[int], workers: int = 2, timeout_s: float = 60.0,
                 deadline: float | None = None, cache_dir: str | None = None, log: Any = None,
                 first_timeout_s: float = 600.0, case_runner: Callable[..., Any] | None = None) -> CampaignResult:
    """Run the cases of ``seeds`` on ``backend``; stop early at ``deadline`` (``time.time()``).

    ``timeout_s`` is a case's time limit on a quiet machine and ``first_timeout_s`` a worker's allowance
    for its first case (imports and cold kernel compiles); both are scaled by the machine's slowdown
    when checked, and a case past its limit is rerun once in a fresh worker (with twice the limit, counted
    from the end of that worker's imports) before it counts as a ``hang``.  ``log`` (a file) receives one
    JSON line per case.  ``case_runner`` replaces :func:`.oracle.run_case` in the workers (a module-level
    function, for tests of the campaign itself)."""


    res = CampaignResult(backend, campaign)
    start = time.time()
    cache_dir = cache_dir or tempfile.mkdtemp(prefix="rammer-fuzz-cache-")
    pool = _Pool(max(1, workers), backend, cache_dir, case_runner)
    seeds_it = iter(seeds)
    exhausted = False

    def crash(w: _Slot) -> dict[str, Any]:
        return {"kind": "crash", "detail": f"worker died (exit code {w.process.exitcode})", "label": ""}

    try:
        while True:
            for i, w in enumerate(pool.workers):
                if w.seed is None and not exhausted and (deadline is None or time.time() < deadline):
                    try:
                        seed = next(seeds_it)
                    except StopIteration:
                        exhausted = True
                        continue
                    pool.send(i, campaign, seed)
            busy = [w for w in pool.workers if w.seed is not None]
            if not busy:
                break
            ready = wait([w.conn for w in busy], timeout=1.0)
            now = time.time()
            for i, w in enumerate(pool.workers):
                if w.seed is None:
                    continue
                seed, first_try = w.seed, w.first_try
                record: Any = None
                if w.conn in ready:
                    try:
                        record = w.conn.recv()
                    except (EOFError, OSError):
                        record = crash(w)
                        w = pool.replace(i)
                    else:
                        if record == _READY:
                            w.ready_at = time.time()
                            continue
                        w.served += 1
                elif not w.process.is_alive():
                    record = crash(w)
                    w = pool.replace(i)
                else:
                    if first_try is not None:
                        nominal = 2 * first_try["nominal"]
                    else:
                        nominal = first_timeout_s if w.served == 0 else timeout_s
                    clock = w.case_clock(now)
                    if clock <= nominal:
                        continue  # within the quiet machine's limit: no need to measure the machine
                    factor = machine_slowdown()
                    if clock <= nominal * factor:
                        continue
                    if first_try is None:
                        # Past its limit once: load can do that.  Rerun it in a fresh worker before judging.
                        first_try = {"seconds": round(clock, 1), "nominal": nominal, "factor": round(factor, 2)}
                        pool.replace(i)
                        pool.send(i, campaign, seed).first_try = first_try
                        res.retried += 1
                        continue
                    detail = (f"no answer in {first_try['seconds']:.0f} s (limit {first_try['nominal']:.0f} s x "
                              f"{first_try['factor']:.1f} for this machine's load), nor in {clock:.0f} s on a retry "
                              f"in a fresh worker (limit {nominal:.0f} s x {factor:.1f})")
                    record = {"kind": "hang", "detail": detail, "label": ""}
                    w = pool.replace(i)
                if record is None:
                    continue
                if first_try is not None:
                    record["retried_after_s"] = first_try["seconds"]
                w.seed, w.first_try = None, None
                record.update(seed=seed, campaign=campaign, backend=backend)
                res.cases += 1
                res.counts[record["kind"]] += 1
                if record["kind"] in _failure_kinds():
                    res.findings.append(record)
                if log is not None:
                    log.write(json.dumps(record) + "\n")
    finally:
        pool.close()
        res.seconds = time.time() - start
    return res
