"""The backend under test, as the conformance checks see it.

Every check asks the :class:`Target` instead of the backend's name: whether
it claims an op or a dtype, whether it can run here, how to compile for it.
A check that needs something the backend does not declare skips with the
capability that is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pytest

from .. import plugins
from ..api import CompiledModel
from ..backend import Backend, Capabilities
from ..errors import BackendUnavailableError, RammerError
from ..ir import Graph

#: The backend whose results define correct (rammer's executable specification).
REFERENCE = "reference"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def graph_ops(graph: Graph) -> set[str]:
    """Op types of ``graph``, including those inside control-flow subgraphs."""
    ops: set[str] = set()
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.nodes:
            ops.add(node.op_type)
            stack.extend(node.subgraphs())
    return ops


def graph_dtypes(graph: Graph) -> set[str]:
    """Dtypes of the tensors computed or exchanged at run time: inputs,
    outputs and node outputs.  Constants (shapes, axes, weights folded to
    initializers) do not count: every backend reads those at compile time."""
    computed = {o for node in graph.nodes for o in node.outputs if o}
    infos = list(graph.inputs) + list(graph.outputs)
    infos += [t for name, t in graph.value_info.items() if name in computed and name not in graph.initializers]
    return {t.dtype for t in infos}


@dataclasses.dataclass
class Target:
    name: str
    backend: Backend
    available: bool
    why_unavailable: str
    plugin: str

    @property
    def caps(self) -> Capabilities:
        return self.backend.capabilities

    # -- what the backend claims ------------------------------------------

    def claimed_ops(self) -> set[str] | None:
        """Op types the backend claims (None: every op in rammer's registry)."""
        return None if self.caps.ops is None else set(self.caps.ops)

    def claims_op(self, op_type: str, domain: str = "") -> bool:
        ops = self.caps.ops
        if ops is not None:
            return op_type in ops
        from ..ops.registry import lookup

        return lookup(op_type, domain) is not None

    def skip_unless_compilable(self, graph: Graph) -> None:
        """Skip when the graph has ops the backend neither claims nor falls back for."""
        bad = self.backend.unsupported_nodes(graph)
        if bad:
            ops = sorted({n.op_type for n in bad})
            pytest.skip(f"uses op(s) {', '.join(ops)} outside the backend's declared capabilities.ops "
                        "(and reference_fallback is off)")

    def skip_unless_dtypes(self, graph: Graph) -> None:
        extra = graph_dtypes(graph) - set(self.caps.dtypes)
        if extra:
            pytest.skip(f"uses dtype(s) {', '.join(sorted(extra))} outside the backend's declared "
                        f"capabilities.dtypes ({', '.join(sorted(self.caps.dtypes))})")

    def skip_if_quantized(self, what: str) -> None:
        """Skip a float-exactness check on a backend that declares quantized results
        (``capabilities.extra["quantized"]``): its accuracy is checked against its own spec."""
        q = self.caps.extra.get("quantized")
        if q:
            pytest.skip(f"backend '{self.name}' computes {q} approximations of float models (capabilities.extra"
                        f"['quantized']); {what} compares float results at fixed tolerances")

    def require_run(self) -> None:
        """Skip the rest of a check that needs to run code: the backend cannot run here."""
        if not self.available:
            pytest.skip(f"compiled only: backend '{self.name}' is not available here ({self.why_unavailable})")

    # -- compiling and running ----------------------------------------------

    def compile(self, graph: Graph, **options: Any) -> CompiledModel:
        """Compile for the backend: through ``rammer.compile`` when it can run
        here, else straight through ``Backend.compile`` (compile-only checks of
        GPU backends on machines without the GPU)."""
        if self.available:
            from ..api import compile as rammer_compile

            return rammer_compile(graph, backend=self.name, **options)
        try:
            executable = self.backend.compile(graph, options)
        except BackendUnavailableError as exc:
            pytest.skip(f"backend '{self.name}' is not available here and cannot compile without "
                        f"its device ({first_line(exc)})")
        return CompiledModel(graph, self.backend, executable, options, 0.0)

    def tolerance(self, rtol: float = 0.0, atol: float = 0.0) -> tuple[float, float]:
        """The backend's declared tolerance, or the given one where that is looser."""
        return max(rtol, self.caps.rtol), max(atol, self.caps.atol)


def reference_outputs(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    from ..api import compile as rammer_compile

    return rammer_compile(graph, backend=REFERENCE).run(feeds)


def make_target(name: str) -> Target:
    """The Target for backend ``name``; a usage error listing the registered ones otherwise."""
    try:
        table = plugins.backends()
    except RammerError as exc:
        raise pytest.UsageError(f"rammer.conformance: loading rammer's plugins failed: {exc}") from None
    if name not in table:
        raise pytest.UsageError(
            f"rammer.conformance: no rammer backend named '{name}'; registered: "
            f"{', '.join(sorted(table)) or 'none'} (a third-party backend must be installed with a "
            "'rammer.backends' entry point, or registered with rammer.plugins.register_plugin)"
        )
    backend = table[name]
    try:
        avail = backend.availability()
        ok, reason = avail.ok, avail.reason
    except Exception as exc:  # availability() must not raise; report it rather than crash collection
        ok, reason = False, f"availability() raised {first_line(exc)}"
    return Target(name, backend, ok, reason, plugins.backend_origin(name))


def as_feeds(names: Iterable[str], values: Iterable[Any]) -> dict[str, np.ndarray]:
    return {n: np.asarray(v) for n, v in zip(names, values)}
