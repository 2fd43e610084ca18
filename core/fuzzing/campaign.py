"""Running many fuzz cases in worker processes.

Each worker is a spawned process that keeps its imports and numba's compiled
kernels warm across cases.  A case that kills its worker (a segfault) is a
``crash``; one that runs past ``timeout_s`` is a ``hang`` (the worker is
killed); either way a fresh worker takes over and the campaign goes on.
Cases are fully determined by ``(campaign, seed)``, so every finding can be
rerun and minimised from its seed alone.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["CampaignResult", "run_campaign", "build_case", "CAMPAIGNS"]

#: "graphs": valid random models; "mutants": broken copies of them.
CAMPAIGNS = ("graphs", "mutants")


def build_case(campaign: str, seed: int) -> tuple[bytes, dict, str]:
    """The model bytes, feeds and a short label of case ``seed`` of ``campaign``."""
    from .graphs import random_model
    from .mutate import mutate

    if campaign == "graphs":
        model, feeds = random_model(seed)
        return model.SerializeToString(), feeds, f"{len(model.graph.node)} nodes"
    if campaign == "mutants":
        model, feeds = random_model(seed)
        data, what = mutate(model, seed ^ 0x5EED)
        return data, feeds, what
    raise ValueError(f"unknown campaign {campaign!r} (one of {CAMPAIGNS})")


def _worker(conn: Any, backend: str, cache_dir: str) -> None:
    import logging

    os.environ["RAMMER_CACHE_DIR"] = cache_dir
    logging.getLogger("rammer").setLevel(logging.ERROR)
    from .. import plugins
    from .oracle import run_case

    # Each case compiles fresh: a backend with a compile cache is told not to use it.
    no_cache = {"cache": False} if plugins.get_backend(backend).capabilities.compile_cache else None
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
        out = run_case(data, feeds, backend, no_cache)
        d = out.as_dict()
        d["label"] = label
        conn.send(d)


@dataclass
class CampaignResult:
    backend: str
    campaign: str
    counts: Counter = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    cases: int = 0

    def summary(self) -> dict[str, Any]:
        return {"backend": self.backend, "campaign": self.campaign, "cases": self.cases,
                "seconds": round(self.seconds, 1), "counts": dict(self.counts),
                "failures": sum(v for k, v in self.counts.items() if k in _failure_kinds())}


def _failure_kinds() -> tuple[str, ...]:
    from .oracle import FAILURES

    return FAILURES


class _Pool:
    """Workers over pipes; each can be killed and replaced on its own."""

    def __init__(self, n: int, backend: str, cache_dir: str):
        self.ctx = mp.get_context("spawn")
        self.backend, self.cache_dir = backend, cache_dir
        self.workers = [self._start() for _ in range(n)]

    def _start(self) -> list:
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child, self.backend, self.cache_dir), daemon=True)
        p.start()
        child.close()
        return [p, parent, None, 0.0]  # process, pipe, current case, start time

    def replace(self, i: int) -> None:
        p = self.workers[i][0]
        if p.is_alive():
            p.kill()
        p.join(5)
        self.workers[i] = self._start()

    def close(self) -> None:
        for p, conn, _, _ in self.workers:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for p, *_ in self.workers:
            p.join(5)
            if p.is_alive():
                p.kill()


def run_campaign(backend: str, campaign: str, seeds: Iterable[int], workers: int = 2, timeout_s: float = 60.0,
                 deadline: float | None = None, cache_dir: str | None = None, log: Any = None,
                 first_timeout_s: float = 600.0) -> CampaignResult:
    """Run the cases of ``seeds`` on ``backend``; stop early at ``deadline`` (``time.time()``).

    ``first_timeout_s`` is a worker's allowance for its first case (imports and cold kernel
    compiles); ``log`` (a file) receives one JSON line per case."""
    import tempfile

    from multiprocessing.connection import wait

    res = CampaignResult(backend, campaign)
    start = time.time()
    cache_dir = cache_dir or tempfile.mkdtemp(prefix="rammer-fuzz-cache-")
    pool = _Pool(max(1, workers), backend, cache_dir)
    served = [0] * len(pool.workers)
    seeds_it = iter(seeds)
    exhausted = False
    try:
        while True:
            for i, w in enumerate(pool.workers):
                if w[2] is None and not exhausted and (deadline is None or time.time() < deadline):
                    try:
                        seed = next(seeds_it)
                    except StopIteration:
                        exhausted = True
                        continue
                    try:
                        w[1].send((campaign, seed))
                    except (BrokenPipeError, OSError):
                        pool.replace(i)
                        served[i] = 0
                        w = pool.workers[i]
                        w[1].send((campaign, seed))
                    w[2], w[3] = seed, time.time()
            busy = [w for w in pool.workers if w[2] is not None]
            if not busy:
                break
            ready = wait([w[1] for w in busy], timeout=1.0)
            now = time.time()
            for i, w in enumerate(pool.workers):
                if w[2] is None:
                    continue
                seed = w[2]
                record = None
                if w[1] in ready:
                    try:
                        record = w[1].recv()
                    except (EOFError, OSError):
                        record = {"kind": "crash", "detail": f"worker died (exit code {w[0].exitcode})", "label": ""}
                        pool.replace(i)
                        served[i] = 0
                else:
                    limit = first_timeout_s if served[i] == 0 else timeout_s
                    if not w[0].is_alive():
                        record = {"kind": "crash", "detail": f"worker died (exit code {w[0].exitcode})", "label": ""}
                        pool.replace(i)
                        served[i] = 0
                    elif now - w[3] > limit:
                        record = {"kind": "hang", "detail": f"no answer in {limit:.0f} s", "label": ""}
                        pool.replace(i)
                        served[i] = 0
                if record is None:
                    continue
                w = pool.workers[i]
                w[2] = None
                served[i] += 1
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
