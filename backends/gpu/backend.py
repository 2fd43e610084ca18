"""The Backend class the cuda, rocm and opencl backends share; each supplies a :class:`DeviceTable`.

Capabilities are data: the ops with a GPU rKernel (:data:`.lower.GPU_OPS`), float32, the GPU
vDevice presets, the source language and compiler.  A node of a claimed op whose attributes no
rKernel implements (edge padding, 3-d conv...) is refused by :meth:`GpuBackend.unsupported_nodes`,
so ``rammer.compile`` raises an ``UnsupportedOpError`` naming node and op before anything runs;
there is no silent fallback (``reference_fallback`` is off).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rammer.backend import Availability, Backend, Capabilities, check_options
from rammer.errors import RammerError
from rammer.gc_freeze import collector_paused
from rammer.ir import Graph, Node
from rammer.pipeline import NodeOp, plugin_rkernel_families, with_plugin_kernels
from rammer.rtask import RKernel
from rammer.vdevice import VDevice

from .compiler import GpuProgram, compile_program, gpu_rkernels, kernel_tiling, unsupported
from .fuse import FUSIBLE_OPS
from .lower import GPU_OPS
from .pipeline import PASSES

__all__ = ["DeviceTable", "GpuBackend", "OPTIONS"]

OPTIONS = frozenset({"policy", "vdevice", "mode", "emit"})


@dataclass(frozen=True)
class DeviceTable:
    """Everything that differs between the GPU backends."""

    name: str
    #: The :mod:`rammer.codegen.dialects` table the program is rendered with.
    dialect: str
    #: Language and compiler of the emitted source (for capabilities and check_source).
    language: str
    compiler: str | None
    #: GPU vDevice presets (first: the default).
    presets: tuple[str, ...]
    description: str
    #: ``(backend) -> Availability``: whether programs can run here.
    availability: Callable[[], Availability]
    #: ``(program, options) -> executable``.
    executable: Callable[[GpuProgram, Mapping[str, Any]], Any]
    #: The vDevice actually scheduled for (e.g. as many vEUs as the OpenCL device has compute units).
    fit_vdevice: Callable[[VDevice], VDevice] = lambda vd: vd
    #: The kind of device programs run on (``Capabilities.device``): "gpu", or "cpu" for an
    #: OpenCL CPU device such as PoCL's.
    device_kind: Callable[[], str] = lambda: "gpu"
    #: Execution mode when the caller names none, by :attr:`device_kind` ("persistent" or "wave"; a kind
    #: not listed gets "persistent").  On a CPU device (PoCL) a persistent block waiting for another spins
    #: on a core of its own, CPU time the working blocks' threads need; wave mode (a launch per wave) has
    #: no waits: unet-seg-b8's first run 52.4-57.2 s of CPU against 60.3-71.2 s persistent, vgg19's
    #: 30.9-32.2 s against 40.5-43.1 s (``docs/benchmarks.md``, s13-gpu).  GPUs keep one launch per run.
    default_modes: Mapping[str, str] = field(default_factory=lambda: {"gpu": "persistent", "cpu": "wave"})
    extra: Mapping[str, Any] = field(default_factory=dict)

    def default_mode(self) -> str:
        """The execution mode of a program whose caller names none, on the device programs run on."""
        return self.default_modes.get(self.device_kind(), "persistent")


class GpuBackend(Backend):
    #: RNNs unrolled into MatMuls and cells (no recurrent rKernel); split-K: a GEMM with few output
    #: tiles would leave most blocks idle; elementwise chains fused last, after the rewrites that
    #: make new ones.  No host control flow: an If computes both branches and selects.  Instance and
    #: group norms run as a row LayerNormalization and a fused affine.
    graph_passes = tuple(PASSES)
    default_priority = -5

    def __init__(self, table: DeviceTable) -> None:
        self.table = table
        self.name = table.name
        self.description = table.description
        self._caps: Capabilities | None = None
        self._prepared: tuple[Graph, Any] | None = None

    @property  # type: ignore[override]
    def capabilities(self) -> Capabilities:
        """Computed on first use: ``device`` is the kind of device programs run on (an OpenCL
        backend on PoCL runs on the CPU), found without slowing registration down."""
        if self._caps is None:
            t = self.table
            self._caps = Capabilities(
                ops=GPU_OPS | FUSIBLE_OPS, reference_fallback=False, dtypes=frozenset({"float32"}), rtol=1e-4, atol=1e-5,
                device=t.device_kind(), schedules=True, emits_source=t.language, source_compiler=t.compiler,
                vdevice_presets=t.presets, options=OPTIONS,
                extra={"dialect": t.dialect, "execution_modes": ["persistent", "wave"],
                       "default_mode": t.default_mode(), "vdevice_kind": "gpu", **t.extra})
        return self._caps

    def check_vdevice(self, vdevice: VDevice) -> VDevice:
        """GPU presets only: the rKernels are sized for GPU blocks, whatever device runs them."""
        if vdevice.kind != "gpu":
            raise RammerError(f"backend '{self.name}' schedules GPU rKernels; vDevice '{vdevice.name}' is a "
                              f"{vdevice.kind}; choose one of {', '.join(self.table.presets)}")
        return vdevice

    def availability(self) -> Availability:
        return self.table.availability()

    def unsupported_nodes(self, graph: Graph) -> list[Node]:
        """Nodes left without an rKernel after the passes (an op such as Erf runs only fused).  The
        passes and this first lowering of every node run with the collector paused, as the compile
        does (see :mod:`rammer.gc_freeze`)."""
        with collector_paused():
            return [n for n, _ in unsupported(self.prepare_graph(graph).graph)]

    def prepare_graph(self, graph: Graph, verify: bool = False):
        """The passes' result, kept for the last graph: ``rammer.compile`` asks for the unsupported
        nodes, then compiles the same graph."""
        last = self._prepared
        if last is not None and last[0] is graph and not verify:
            return last[1]
        result = super().prepare_graph(graph, verify)
        self._prepared = (graph, result)
        return result

    def rkernels(self, node: Node, graph: Graph, vdevice: VDevice) -> list[RKernel]:
        """The GPU rKernels of ``node`` (one per tiling) and the offers of the families plugins register
        for this backend (``rammer_register_rkernels``) that a tiling runs (as many rTasks)."""
        def own(op: NodeOp, vd: VDevice) -> list[RKernel]:
            return gpu_rkernels(op.node, graph, vd)

        def runnable(op: NodeOp, kernel: RKernel, vd: VDevice) -> bool:
            return kernel_tiling(op.node, graph, kernel) is not None

        candidates = with_plugin_kernels(own, plugin_rkernel_families(self.name), graph, runnable)
        return list(candidates(NodeOp(node, (), ()), vdevice))

    def program(self, graph: Graph, options: Mapping[str, Any]) -> GpuProgram:
        """The persistent program of ``graph`` (no device needed)."""
        check_options(self.name, options, OPTIONS)
        graph = self.prepare_graph(graph).graph
        vd = self.table.fit_vdevice(self.vdevice(options.get("vdevice")))
        return compile_program(graph, self, vd, str(options.get("policy", "wavefront")),
                               str(options.get("mode", self.table.default_mode())))

    def compile(self, graph: Graph, options: Mapping[str, Any]) -> Any:
        # One Python object per rTask and per wait, all alive until the program is done: the
        # collector's passes over them found nothing to free and took a third of the CPU time.
        with collector_paused():
            try:
                prog = self.program(graph, options)
            except RecursionError:
                raise RammerError(f"{self.name}: the model is too deep to compile") from None
            exe = self.table.executable(prog, options)
            if options.get("emit"):
                self._emit(str(options["emit"]), prog, exe)
        return exe

    def _emit(self, folder: str, prog: GpuProgram, exe: Any) -> None:
        """``rammer compile --emit DIR``: the source file, the schedule JSON and the report (with the
        vendor compiler's registers, shared memory, co-resident grid and occupancy when it is on PATH)."""
        import json
        import os

        from rammer.codegen.dialects import get_dialect
        from rammer.schedule.records import write_schedule_json

        report = dict(prog.report)
        occupancy = getattr(exe, "occupancy", None)
        if occupancy is not None:
            try:
                report["occupancy"] = occupancy()
            except RammerError as exc:  # no compiler here, or a grid too large: say so in the report
                report["occupancy"] = f"not computed: {exc}"
        os.makedirs(folder, exist_ok=True)
        name = "program" + get_dialect(self.table.dialect).suffix
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(prog.source(self.table.dialect))
        # The text of Schedule.to_json, built per part (a full-size schedule's JSON is tens of MB).
        write_schedule_json(prog.schedule, os.path.join(folder, "schedule.json"))
        with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, default=str)
