"""Running graph passes: a pipeline is a list of :class:`Pass` objects, as data.

A pass takes a :class:`~rammer.ir.Graph` and returns a graph (the same
object when it has nothing to do).  :func:`run_pipeline` runs the passes in
order, times each one, and names the pass in any error it raises; with
``verify=True`` it checks the IR's invariants after every pass, so a pass
that breaks them is caught where it did.  Setting the environment variable
``RAMMER_VERIFY_IR=1`` turns that check on for every pipeline run in the
process, whatever the caller passed (the test suite sets it for the whole
session, so every compile in a test verifies each pass's output).

A backend declares its pipeline (``Backend.graph_passes``) and runs it before
lowering; the core never names a backend.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import CompileError, RammerError
from ..ir import Graph

#: The environment variable that turns ``Graph.verify()`` on after every pass of every pipeline.
VERIFY_ENV = "RAMMER_VERIFY_IR"


def verify_requested() -> bool:
    """Whether :data:`VERIFY_ENV` asks for verification after every pass (set, and not 0/false/no/off)."""
    return os.environ.get(VERIFY_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Pass:
    """A named graph rewrite: ``run(graph) -> graph``."""

    name: str
    run: Callable[[Graph], Graph] = field(repr=False)
    #: One line for reports and ``--help`` texts.
    description: str = ""

    def __call__(self, graph: Graph) -> Graph:
        return self.run(graph)

    def renamed(self, name: str) -> Pass:
        """The same rewrite under another name (a pass that runs twice in one pipeline)."""
        return Pass(name, self.run, self.description)


class PassError(CompileError):
    """A graph pass failed (or broke an IR invariant); names the pass."""

    def __init__(self, message: str, pass_name: str):
        super().__init__(message)
        #: The name of the pass that failed.
        self.pass_name = pass_name


@dataclass(frozen=True)
class PassTiming:
    name: str
    seconds: float
    #: Whether the pass returned a new graph (False: it had nothing to do).
    changed: bool
    nodes_before: int
    nodes_after: int


@dataclass(frozen=True)
class PipelineResult:
    """The rewritten graph and what each pass did, in order."""

    graph: Graph
    timings: tuple[PassTiming, ...]

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.timings)

    def report(self) -> list[dict]:
        """Plain data for compile reports."""
        return [{"pass": t.name, "seconds": round(t.seconds, 6), "changed": t.changed,
                 "nodes": [t.nodes_before, t.nodes_after]} for t in self.timings]


def run_pipeline(graph: Graph, passes: Sequence[Pass], verify: bool = False) -> PipelineResult:
    """``graph`` after every pass of ``passes`` in order (checked with ``Graph.verify`` after
    each when ``verify`` or when :data:`VERIFY_ENV` is set).  Raises :class:`PassError` naming the
    pass that failed."""
    verify = verify or verify_requested()
    names = [p.name for p in passes]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise PassError(f"graph pass pipeline names a pass twice: {', '.join(dup)}; give each step its own name",
                        dup[0])
    timings: list[PassTiming] = []
    for step in passes:
        before = len(graph.nodes)
        start = time.perf_counter()
        try:
            out = step.run(graph)
        except PassError:
            raise
        except RammerError as exc:
            raise PassError(f"graph pass '{step.name}' failed on graph '{graph.name}': {exc}", step.name) from exc
        except Exception as exc:  # a bug in the pass: say which one, keep the cause chained
            raise PassError(f"graph pass '{step.name}' crashed on graph '{graph.name}': "
                            f"{type(exc).__name__}: {exc}; report this as a bug in that pass ("
                            "`rammer --debug ...` shows the traceback)", step.name) from exc
        if not isinstance(out, Graph):
            raise PassError(f"graph pass '{step.name}' returned {type(out).__name__}, not a Graph", step.name)
        seconds = time.perf_counter() - start
        if verify:
            try:
                out.verify()
            except RammerError as exc:
                raise PassError(f"graph pass '{step.name}' broke the IR of graph '{graph.name}': {exc}",
                                step.name) from exc
        timings.append(PassTiming(step.name, seconds, out is not graph, before, len(out.nodes)))
        graph = out
    return PipelineResult(graph, tuple(timings))
