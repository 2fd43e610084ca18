"""The bench runner interface: one way to prepare and run a model, whoever runs it.

A column of the benchmark matrix is a :class:`BenchRunner`.  rammer's own
backends are wrapped by :class:`RammerRunner`; outside baselines
(onnxruntime, torch) live in :mod:`rammer.bench.baselines`.  Baselines are
deliberately *not* rammer backends: they do not appear in ``rammer backends``
and ``rammer.compile`` cannot select them.

Every runner gets the same :class:`ModelCase` (the ONNX model with static
shapes, its rammer IR and the feeds), so every cell compares like with like.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx

from .. import plugins
from ..api import compile as rammer_compile
from ..backend import Availability
from ..ir import Graph


@dataclass
class ModelCase:
    """One row of the matrix: a model at one batch size, with its inputs."""

    model: str
    batch: int
    #: The ONNX model with every input dimension fixed (baselines run this).
    proto: onnx.ModelProto
    #: rammer's IR of the same model; None when rammer's frontend rejected it.
    graph: Graph | None
    feeds: dict[str, np.ndarray]
    output_names: list[str]
    #: Why ``graph`` is None.
    load_error: str = ""
    #: Set when the case cannot run at all (e.g. a fixed batch that differs).
    skip_reason: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class Prepared(Protocol):
    """A model ready to run: ``run(feeds) -> {output name: array}``."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


class BenchRunner(ABC):
    """A column of the matrix."""

    name: str = ""
    #: "rammer" for rammer backends, "baseline" for outside runtimes.
    kind: str = "baseline"
    description: str = ""
    #: Tolerance of results against rammer's reference backend.
    rtol: float = 1e-3
    atol: float = 1e-4

    def availability(self) -> Availability:
        return Availability(True)

    def set_threads(self, threads: int) -> None:  # noqa: B027 - optional: a runner without thread control keeps it
        """Limit the runner's intra-op threads (called once, before ``prepare``)."""

    @abstractmethod
    def prepare(self, case: ModelCase) -> Prepared:
        """Compile/load ``case``; raise on failure (the message's first line is shown)."""


class _CompiledRun:
    def __init__(self, compiled: Any):
        self.compiled = compiled

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.compiled.run(feeds)

    def device_metrics(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """What the executable reports about the device (``device_metrics(feeds)``: e.g. a
        microcontroller's instruction count and flash/RAM, or a simulator's ``simulated_latency_s``)."""
        fn = getattr(self.compiled.executable, "device_metrics", None)
        if fn is None:
            return {}
        return {k: v for k, v in dict(fn(feeds)).items() if isinstance(v, (int, float, str, bool))}


class RammerRunner(BenchRunner):
    """A rammer backend, driven through the public ``rammer.compile`` API."""

    kind = "rammer"

    def __init__(self, backend_name: str):
        self.name = backend_name
        self.backend = plugins.backends()[backend_name]
        caps = self.backend.capabilities
        self.rtol, self.atol = caps.rtol, caps.atol
        #: Results are quantized approximations (checked at the output's scale, see matrix._check_one).
        self.quantized = bool(caps.extra.get("quantized"))
        self.description = self.backend.description

    def availability(self) -> Availability:
        return self.backend.availability()

    def prepare(self, case: ModelCase) -> Prepared:
        if case.graph is None:
            raise RuntimeError(f"rammer cannot load the model: {case.load_error}")
        options: dict[str, Any] = {}
        known = self.backend.capabilities.options or frozenset()
        if self.quantized and "calibration" in known and len(case.graph.inputs) == 1:
            # A quantized backend calibrates its ranges on the benchmark's own inputs (the convention
            # for post-training quantization: a `calibration` option taking samples of the input).
            options["calibration"] = np.asarray(next(iter(case.feeds.values())))
        return _CompiledRun(rammer_compile(case.graph, backend=self.name, **options))


class UnknownRunner(BenchRunner):
    """A name that is neither a rammer backend nor a baseline: shown as n/a."""

    kind = "unknown"

    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known

    def availability(self) -> Availability:
        return Availability(False, f"not a rammer backend or baseline here (known: {', '.join(self.known)})")

    def prepare(self, case: ModelCase) -> Prepared:  # pragma: no cover - never called when unavailable
        raise RuntimeError(self.availability().reason)


def known_runner_names() -> list[str]:
    from .baselines import BASELINES

    return sorted(plugins.backends()) + sorted(BASELINES)


def make_runner(name: str) -> BenchRunner:
    """The runner called ``name``: a rammer backend if one is registered, else a baseline."""
    from .baselines import BASELINES

    if name in plugins.backends():
        return RammerRunner(name)
    if name in BASELINES:
        return BASELINES[name]()
    return UnknownRunner(name, known_runner_names())


def limit_threads(threads: int) -> list[str]:
    """Limit the thread pools this process's libraries use; returns what was limited.

    Environment variables only reach pools not started yet, so the CLI calls
    this before running anything.
    """
    done = []
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(threads)
    done.append("OMP/OpenBLAS/MKL env")
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
        done.append("numba")
    except Exception:  # numba missing, or its pool was sized smaller at import
        pass
    try:
        import threadpoolctl  # optional: caps BLAS pools already started

        limit_threads._keep = threadpoolctl.threadpool_limits(threads)  # type: ignore[attr-defined]
        done.append("threadpoolctl")
    except ImportError:
        pass
    return done


@dataclass
class Comparison:
    ok: bool
    max_abs_err: float | None = None
    worst_output: str | None = None
    problem: str = ""


def compare(expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray],
            rtol: float, atol: float) -> Comparison:
    """``actual`` against ``expected`` elementwise: |a - e| <= atol + rtol * |e|, NaNs in the same places."""
    worst = 0.0
    worst_name = None
    for name, exp in expected.items():
        if name not in actual:
            return Comparison(False, problem=f"output '{name}' is missing (got {sorted(actual)})")
        got = np.asarray(actual[name])
        exp = np.asarray(exp)
        if got.shape != exp.shape:
            return Comparison(False, problem=f"output '{name}' has shape {list(got.shape)}, expected {list(exp.shape)}")
        if got.dtype != exp.dtype:
            return Comparison(False, problem=f"output '{name}' is {got.dtype}, expected {exp.dtype}")
        if exp.dtype.kind not in "fc":
            if not np.array_equal(got, exp):
                return Comparison(False, max_abs_err=None, worst_output=name,
                                  problem=f"output '{name}' differs ({int(np.sum(got != exp))} elements)")
            continue
        e64, g64 = exp.astype(np.float64), got.astype(np.float64)
        nan_e, nan_g = np.isnan(e64), np.isnan(g64)
        if not np.array_equal(nan_e, nan_g):
            return Comparison(False, worst_output=name, problem=f"output '{name}' has NaNs in other places")
        with np.errstate(invalid="ignore"):
            diff = np.where(nan_e, 0.0, np.abs(g64 - e64))
            # Infinities must match exactly (inf - inf is NaN).
            diff = np.where(np.isinf(e64) & (g64 == e64), 0.0, diff)
            diff = np.where(np.isnan(diff), np.inf, diff)
        if diff.size:
            err = float(diff.max())
            if err >= worst:
                worst, worst_name = err, name
            with np.errstate(invalid="ignore"):  # 0 * inf where rtol is 0
                bound = atol + rtol * np.abs(np.where(nan_e, 0.0, e64))
            bad = (diff > np.where(np.isnan(bound), atol, bound)) | (np.isinf(e64) & (g64 != e64))
            if bad.any():
                return Comparison(False, err, name,
                                  f"output '{name}': {int(bad.sum())} of {diff.size} elements outside "
                                  f"rtol={rtol:g} atol={atol:g} (max abs err {err:.3g})")
    return Comparison(True, worst, worst_name)
