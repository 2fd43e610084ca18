"""The executable of the ``ipu`` backend: the BSP program, run by the simulator
(or by poptorch when it is importable and asked for)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from rammer.ir import Graph
from rammer.schedule import Schedule

from .bsp import BSPProgram
from .simulator import simulate_program


class IpuExecutable:
    def __init__(self, graph: Graph, schedule: Schedule, program: BSPProgram, runner: Any = None) -> None:
        self.graph = graph
        self.schedule = schedule
        self.program = program
        #: A poptorch runner (see :mod:`.poptorch_path`) or None: the simulator.
        self.runner = runner

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.runner is not None:
            return self.runner(feeds)
        return simulate_program(self.program, self.schedule, self.graph, feeds)

    def report(self) -> dict[str, Any]:
        return {"engine": "poptorch" if self.runner is not None else "simulator", **self.program.report()}

    def device_metrics(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Figures of the simulated IPU (the time is an estimate of the cost model, not a measurement)."""
        r = self.program.report()
        return {"simulated_latency_s": r["latency_us"] * 1e-6, "supersteps": r["supersteps"],
                "exchange_bytes": r["exchange_bytes"], "tile_peak_bytes": r["tile_peak_bytes"],
                "tile_utilisation": round(r["tile_utilisation"], 4), "mode": r["mode"]}

    def export_json(self, path: str) -> None:
        """The tile mapping, superstep program and rTask schedule, for Poplar tooling."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"bsp": self.program.to_dict(), "schedule": self.schedule.to_dict()}, f)
