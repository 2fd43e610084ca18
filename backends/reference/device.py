"""The reference backend's declaration: name, capabilities, availability."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rammer.backend import Backend, Capabilities, check_options
from rammer.ir import SUPPORTED_DTYPES, Graph

from .runtime import ReferenceExecutable


class ReferenceBackend(Backend):
    name = "reference"
    description = "numpy, op by op: the executable specification and the two-layer baseline"
    capabilities = Capabilities(
        ops=None,
        dtypes=SUPPORTED_DTYPES,
        rtol=0.0,
        atol=0.0,
        device="cpu",
        options=frozenset({"check"}),
    )
    default_priority = 0

    def compile(self, graph: Graph, options: Mapping[str, Any]) -> ReferenceExecutable:
        check_options(self.name, options, {"check"})
        return ReferenceExecutable(graph, check=bool(options.get("check", True)))
