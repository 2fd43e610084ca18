"""The ipu backend's declaration: name, capabilities, availability, compile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from rammer.backend import Availability, Backend, Capabilities, check_options
from rammer.errors import RammerError, UnsupportedOpError
from rammer.ir import Graph, Node, outer_names
from rammer.passes import PipelineResult, run_pipeline
from rammer.pipeline import NodeOp, node_operators, plugin_rkernel_families, schedule_operators
from rammer.rtask import RKernel
from rammer.vdevice import VDevice

from .codegen import MODES, lower
from .conv_plan import least_traffic_fit, pressure_conv_limits
from .passes import IPU_PASSES, ipu_passes
from .placement import is_static
from .poptorch_path import build_poptorch_runner, poptorch_status
from .rkernels import ipu_rkernels
from .runtime import IpuExecutable
from .stationary import finest_weight_cut

OPTIONS = frozenset({"policy", "mode", "vdevice", "engine", "export_json"})
ENGINES = ("auto", "simulator", "poptorch")


class IpuBackend(Backend):
    name = "ipu"
    capabilities = Capabilities(
        ops=None,
        dtypes=frozenset({"float32", "int64", "int32", "bool"}),
        rtol=1e-4,
        atol=1e-5,
        device="ipu",
        schedules=True,
        vdevice_presets=("gc200", "gc2"),
        options=OPTIONS,
        extra={"simulated": True, "superstep_modes": list(MODES), "engines": list(ENGINES)},
    )
    default_priority = -10  # a simulator: never the default backend
    graph_passes = IPU_PASSES

    @property
    def description(self) -> str:  # type: ignore[override]
        ok, why = poptorch_status()
        engine = "poptorch (untested here)" if ok else f"the numpy BSP simulator ({why})"
        return f"Graphcore IPU: rTasks on tiles in bulk-synchronous supersteps; runs on {engine}"

    def availability(self) -> Availability:
        # Always runnable: on the simulator when poptorch is absent, which the note says.
        ok, why = poptorch_status()
        return Availability(True, "" if ok else f"runs the simulated IPU ({why})")

    def check_vdevice(self, vdevice: VDevice) -> VDevice:
        """An ipu vDevice (a preset or a .json file), declared as not reading exact barrier waits:
        each superstep of the BSP program ends in a chip-wide sync, whatever a barrier lists, so the
        core scheduler keeps no per-barrier skips for it (``VDevice.exact_waits``)."""
        return replace(super().check_vdevice(vdevice), exact_waits=False)

    def rkernels(self, node: Node, graph: Graph, vdevice: VDevice) -> list[RKernel]:
        # A Gather from a large table is cut along the table's width, a Dropout with a mask is tiled
        # (rkernels.py): the generic kernels would need whole tensors on one tile.
        # Where the ipu has kernels of its own they replace the generic ones, not a plugin's: the
        # families plugins register for 'ipu' (rammer_register_rkernels) are offered beside them.
        # A large constant weight is read only through the kernels that cut it finest (stationary.py).
        own = ipu_rkernels(node, graph, vdevice)
        if not own:  # plugins' families, then the generic ones
            return finest_weight_cut(super().rkernels(node, graph, vdevice), node, graph, vdevice)
        for family in plugin_rkernel_families(self.name):
            if family.op_types is None or node.op_type in family.op_types:
                own += family.candidates(node, graph, vdevice)
        return finest_weight_cut(own, node, graph, vdevice)

    def prepare_graph(self, graph: Graph, verify: bool = False, vdevice: VDevice | None = None) -> PipelineResult:
        """``graph`` after the ipu passes for ``vdevice``'s tiles (passes.py; the gc200's by default)."""
        if vdevice is None:
            return run_pipeline(graph, self.graph_passes, verify)
        per_tile = int(vdevice.extra.get("veus_per_tile", 1))
        tiles = -(-vdevice.num_veus // per_tile)
        return run_pipeline(graph, ipu_passes(vdevice.veu.local_mem_bytes * per_tile, tiles), verify)

    def compile(self, graph: Graph, options: Mapping[str, Any]) -> IpuExecutable:
        check_options(self.name, options, OPTIONS)
        engine = str(options.get("engine", "auto"))
        if engine not in ENGINES:
            raise RammerError(f"ipu backend: unknown engine '{engine}'; choose one of {', '.join(ENGINES)}")
        mode = str(options.get("mode", "merged"))
        if mode not in MODES:
            raise RammerError(f"ipu backend: unknown superstep mode '{mode}'; choose one of {', '.join(MODES)}")
        vd = self.vdevice(options.get("vdevice"))
        graph = self.prepare_graph(graph, vdevice=vd).graph
        _refuse_captured_tensors(graph)

        # Under memory pressure a Conv is offered only its least-traffic kernels that fit (conv_plan.py).
        conv_limits = pressure_conv_limits(graph, vd)

        # The core pipeline's scheduler over one operator per node (the graph's own dependencies).
        def candidates(op: NodeOp, vdevice: VDevice) -> list[RKernel]:
            kernels = self.rkernels(op.node, graph, vdevice)
            limits = conv_limits.get(op.node.name)
            return kernels if limits is None else least_traffic_fit(kernels, *limits)

        # check=False: the lowering checks what it uses of the schedule (rTask placement, rKernel
        # resources, data order); the full verifier's barrier check is quadratic in the 1,472 tiles.
        schedule = schedule_operators(node_operators(graph), candidates, vd, str(options.get("policy", "wavefront")),
                                      graph.name, check=False, graph=graph)
        program = lower(schedule, graph, mode)
        runner = None
        if engine == "poptorch" or (engine == "auto" and poptorch_status()[0]):
            runner = build_poptorch_runner(graph, schedule, program, required=engine == "poptorch")
        exe = IpuExecutable(graph, schedule, program, runner)
        if options.get("export_json"):
            exe.export_json(str(options["export_json"]))
        return exe


def _refuse_captured_tensors(graph: Graph) -> None:
    """Control-flow nodes whose subgraphs read a computed tensor of the outer graph are refused.

    A tile's rTask receives only the boxes its kernel declares for the node's own inputs; a
    tensor an ``If``/``Loop``/``Scan`` body captures from outside is no input slot, so no
    exchange would deliver it and the tile would compute on missing data.  Constants are fine:
    every tile reads them from the graph.
    """
    bad = []
    for node in graph.nodes:
        if not node.subgraphs():
            continue
        captured = sorted(n for n in outer_names(node) if not is_static(graph, n))
        if captured:
            bad.append((node, captured))
    if bad:
        where = "; ".join(f"{node.label} reads {', '.join(repr(c) for c in cs)}" for node, cs in bad)
        raise UnsupportedOpError(
            f"backend 'ipu' cannot compile control-flow nodes whose subgraphs read tensors of the outer graph: "
            f"{where}. Choose another --backend for this model (cpu and reference run it)",
            [(node.op_type, node.domain, node.name) for node, _ in bad])
