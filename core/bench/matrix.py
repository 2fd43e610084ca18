"""Running the benchmark matrix: models x batch sizes x runners.

For each (model, batch) row:

1. the model is built (zoo) or read (file) with every input dimension fixed,
   loaded by rammer's frontend, and given random feeds from ``seed``;
2. rammer's ``reference`` backend computes the expected outputs;
3. every runner prepares the model and runs it once; its outputs are checked
   against the reference within the runner's tolerance.  A wrong result is
   recorded as ``wrong`` and never timed; an unavailable runner is ``n/a``
   with the reason; a failure to compile or run is ``error`` with the first
   line of the message;
4. the runners that passed are timed together by :func:`.timing.time_rounds`,
   the protocol ``rammer run`` uses for its one model: rounds of one run
   each, in an order rotated every round, so that drift (thermal, noisy
   neighbours) hits every runner alike; with ``settle`` (``--settle``) each
   timed run first waits until the previous runner's threads stop spinning
   (:mod:`.quiet`).  With several runners each run follows another runner's
   run, which a small model's figure shows (see :mod:`.timing`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx

from .. import zoo
from ..api import random_feeds
from ..errors import RammerError
from ..frontend import load
from ..frontend.source import read_model
from . import timing
from .machine import machine_facts
from .progress import Progress
from .runner import BenchRunner, ModelCase, RammerRunner, compare, limit_threads, make_runner
from .timing import summarize

SCHEMA = "rammer-bench/1"
REFERENCE = "reference"


@dataclass
class MatrixConfig:
    models: list[str]
    backends: list[str]
    batches: list[int] = field(default_factory=lambda: [1])
    repeat: int = 10
    #: Untimed runs after the checking run, per runner and row.
    warmup: int = 1
    threads: int | None = None
    baseline: str | None = None
    seed: int = 0
    #: Wait for idle cores before every timed run (see :mod:`.quiet` and :mod:`.timing`).
    settle: bool = False
    machine_name: str | None = None

    def validate(self) -> None:
        if not self.models:
            raise RammerError("no models given (--models)")
        if not self.backends:
            raise RammerError("no backends given (--backends)")
        if self.repeat < 1:
            raise RammerError("--repeat must be at least 1")
        if self.warmup < 0:
            raise RammerError("--warmup must be 0 or more")
        if any(b < 1 for b in self.batches):
            raise RammerError("batch sizes must be positive")
        if self.threads is not None and self.threads < 1:
            raise RammerError("--threads must be at least 1")
        if self.baseline is not None and self.baseline not in self.backends:
            raise RammerError(f"baseline '{self.baseline}' is not one of --backends ({', '.join(self.backends)})")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _fix_input_dims(proto: onnx.ModelProto, batch: int) -> str:
    """Bind the dynamic leading dim of every input to ``batch`` in place; a reason if impossible."""
    inits = {t.name for t in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        for i, d in enumerate(dims):
            static = d.HasField("dim_value") and d.dim_value > 0
            if i == 0 and not static:
                d.Clear()
                d.dim_value = batch
            elif i == 0 and d.dim_value != batch:
                return (f"the model file fixes the batch of input '{vi.name}' to {d.dim_value} "
                        f"(use --batch {d.dim_value})")
            elif not static:
                return (f"input '{vi.name}' dim {i} is dynamic ({d.dim_param or '?'}); "
                        "export the model with fixed shapes to benchmark it")
    return ""


def build_case(model: str, batch: int, seed: int) -> ModelCase:
    """The row for ``model`` (a zoo name or an .onnx path) at ``batch``."""
    zoo_names = {e.name for e in zoo.list_models()}
    skip = ""
    if model in zoo_names:
        proto = zoo.build(model, seed=seed, batch=batch)
    else:
        proto, _ = read_model(model)
        skip = _fix_input_dims(proto, batch)
    output_names = [o.name for o in proto.graph.output]
    graph, load_error, feeds = None, "", {}
    if not skip:
        try:
            graph = load(proto)
            feeds = random_feeds(graph.inputs, seed, graph)  # token ids within their tables
        except RammerError as exc:
            load_error = _first_line(exc)
    label = model if model in zoo_names else os.path.basename(model)
    info = {"nodes": len(graph.nodes) if graph is not None else None, "source": "zoo" if model in zoo_names else model}
    return ModelCase(label, batch, proto, graph, feeds, output_names, load_error, skip, info)


def _cell(case: ModelCase, runner: BenchRunner, machine: str) -> dict[str, Any]:
    return {
        "model": case.model, "batch": case.batch, "backend": runner.name, "kind": runner.kind,
        "machine": machine, "status": "pending", "reason": "",
        "median_s": None, "min_s": None, "max_s": None, "mean_s": None, "std_s": None, "p50_s": None,
        "p90_s": None, "p99_s": None, "runs": 0, "warmup": None, "settled": None, "compile_s": None,
        "max_abs_err": None, "rtol": runner.rtol, "atol": runner.atol, "speedup": None,
    }


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _run_row(case: ModelCase, runners: list[BenchRunner], avail: dict[str, Any], cfg: MatrixConfig,
             machine: str, progress: Progress) -> list[dict[str, Any]]:
    cells = {r.name: _cell(case, r, machine) for r in runners}
    label = f"{case.model} b{case.batch}"
    if case.skip_reason:
        for c in cells.values():
            c.update(status="n/a", reason=case.skip_reason)
        progress.advance(len(runners) + cfg.repeat, label)
        return list(cells.values())

    # The expected outputs, from rammer's executable specification.
    expected, expected_problem, ref_prepared = None, "", None
    if case.graph is None:
        expected_problem = f"rammer cannot load the model ({case.load_error})"
    else:
        try:
            ref_runner = RammerRunner(REFERENCE)
            ref_prepared, ref_compile_s = _timed(lambda: ref_runner.prepare(case))
            expected = ref_prepared.run(case.feeds)
        except Exception as exc:  # any failure of the spec leaves the row unchecked
            expected_problem = f"the reference backend failed ({_first_line(exc)})"

    live: list[tuple[BenchRunner, Any]] = []
    for runner in runners:
        step = f"{label}: checking {runner.name}"
        progress.show(step)
        reuse = (ref_prepared, ref_compile_s) if runner.name == REFERENCE and ref_prepared is not None else None
        prepared = _check_one(runner, cells[runner.name], case, avail[runner.name], cfg, expected,
                              expected_problem, reuse)
        if prepared is not None:
            live.append((runner, prepared))
        progress.advance(1, step)

    def show_round(round_no: int) -> None:
        if round_no:
            progress.advance(1, f"{label}: timing round {round_no}/{cfg.repeat}")
        progress.show(f"{label}: timing round {round_no + 1}/{cfg.repeat}")

    def failed(name: str, exc: Exception) -> None:
        cells[name].update(status="error", reason=f"run: {_first_line(exc)}")

    # The protocol of `rammer run` (timing.time_rounds): here with every live runner of the row.
    calls = {runner.name: (lambda prepared=prepared: prepared.run(case.feeds)) for runner, prepared in live}
    times = timing.time_rounds(calls, cfg.repeat, cfg.settle, on_round=show_round, on_error=failed)
    progress.advance(1, f"{label}: timing round {cfg.repeat}/{cfg.repeat}")
    for name, ts in times.items():
        cell = cells[name]
        if cell["status"] == "error" or not ts:
            continue
        stats = summarize(ts, cfg.warmup, cfg.settle)
        cell.update(status="approx" if cell["status"] == "approx" else "ok",
                    **{k: v for k, v in stats.as_dict().items() if k in cell})
    return list(cells.values())


def _check_one(runner: BenchRunner, cell: dict[str, Any], case: ModelCase, avail: Any, cfg: MatrixConfig,
               expected: dict[str, Any] | None, expected_problem: str,
               reuse: tuple[Any, float] | None) -> Any | None:
    """Prepare ``runner``, run it once (plus warm-ups) and check it against
    ``expected``; the prepared model when it may be timed, else None with
    ``cell`` saying why."""
    if not avail.ok:
        cell.update(status="n/a", reason=avail.reason)
        return None
    try:
        if reuse is not None:
            prepared, cell["compile_s"] = reuse
        else:
            prepared, cell["compile_s"] = _timed(lambda: runner.prepare(case))
    except Exception as exc:
        cell.update(status="error", reason=f"compile: {_first_line(exc)}")
        return None
    try:
        outputs = prepared.run(case.feeds)
        for _ in range(cfg.warmup):
            prepared.run(case.feeds)
    except Exception as exc:
        cell.update(status="error", reason=f"run: {_first_line(exc)}")
        return None
    if expected is None:
        cell.update(status="unchecked", reason=f"not timed: {expected_problem}")
        return None
    atol = runner.atol
    if getattr(runner, "quantized", False):
        # int8 approximations of a float model: within a tenth of each output's range counts as right
        spans = [float(np.ptp(v)) for v in expected.values() if np.asarray(v).dtype.kind == "f" and np.size(v)]
        atol = max([atol] + [0.1 * s for s in spans])
    cmp = compare(expected, outputs, runner.rtol, atol)
    # JSON has no Infinity: an unbounded error (NaN where a number was due) is left blank.
    finite = cmp.max_abs_err is not None and cmp.max_abs_err != float("inf")
    cell["max_abs_err"] = cmp.max_abs_err if finite else None
    if not cmp.ok and getattr(runner, "quantized", False):
        # Not comparable to float results: timed, and shown as an approximation with its error.
        cell.update(status="approx", reason=f"quantized results ({cmp.problem})")
    elif not cmp.ok:
        cell.update(status="wrong", reason=cmp.problem)
        return None
    metrics = getattr(prepared, "device_metrics", None)
    if metrics is not None:
        try:
            cell["device_metrics"] = metrics(case.feeds)
        except Exception as exc:  # the metrics are extra information: never the cell's failure
            cell["device_metrics"] = {"error": _first_line(exc)}
    return prepared


def add_speedups(cells: list[dict[str, Any]], baseline: str | None) -> None:
    """Set each cell's ``speedup``: baseline median / cell median on the same machine (>1: faster)."""
    base: dict[tuple[str, int, str], float] = {}
    for c in cells:
        if c["backend"] == baseline and c["status"] == "ok":
            base[(c["model"], c["batch"], c["machine"])] = c["median_s"]
    for c in cells:
        ref = base.get((c["model"], c["batch"], c["machine"]))
        c["speedup"] = ref / c["median_s"] if (ref and c["status"] == "ok" and c["median_s"]) else None


def default_baseline(backends: list[str]) -> str | None:
    for name in ("onnxruntime", REFERENCE):
        if name in backends:
            return name
    return backends[0] if backends else None


def run_matrix(cfg: MatrixConfig, progress: Progress | None = None,
               warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the matrix; returns the results document (see :mod:`rammer.bench.report`)."""
    cfg.validate()
    if cfg.baseline is None:
        cfg.baseline = default_baseline(cfg.backends)
    limited = limit_threads(cfg.threads) if cfg.threads else []
    runners = [make_runner(name) for name in cfg.backends]
    avail = {}
    for r in runners:
        avail[r.name] = r.availability()
        if cfg.threads and avail[r.name].ok:
            r.set_threads(cfg.threads)
        if warn and not avail[r.name].ok:
            warn(f"{r.name}: n/a ({avail[r.name].reason})")
    facts = machine_facts(cfg.machine_name)
    machine = facts["name"]
    progress = progress or Progress(0, enabled=False)
    progress.total = max(1, len(cfg.models) * len(cfg.batches) * (len(runners) + cfg.repeat))
    cells: list[dict[str, Any]] = []
    started = time.perf_counter()
    with progress:
        for model in cfg.models:
            for batch in cfg.batches:
                case = build_case(model, batch, cfg.seed)
                cells.extend(_run_row(case, runners, avail, cfg, machine, progress))
    add_speedups(cells, cfg.baseline)
    config = asdict(cfg)
    config["threads_limited"] = limited
    return {
        "schema": SCHEMA,
        "config": config,
        "baseline": cfg.baseline,
        "machines": {machine: facts},
        "runners": {r.name: {"kind": r.kind, "description": r.description, "available": avail[r.name].ok,
                             "reason": avail[r.name].reason, "rtol": r.rtol, "atol": r.atol} for r in runners},
        "elapsed_s": round(time.perf_counter() - started, 3),
        "cells": cells,
    }

