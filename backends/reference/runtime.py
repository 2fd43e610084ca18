"""Running a graph op by op with the registry's numpy implementations."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rammer.interpreter import run_graph
from rammer.ir import Graph


class ReferenceExecutable:
    def __init__(self, graph: Graph, check: bool = True):
        self.graph = graph
        self.check = check

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = run_graph(self.graph, feeds, check=self.check)
        # Outputs are fresh arrays the caller may keep or modify.
        return {t.name: np.array(v, copy=True) for t, v in zip(self.graph.outputs, outs)}
