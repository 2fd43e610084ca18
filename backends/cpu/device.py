"""The ``cpu`` backend's declaration: capabilities, vDevice, rKernels, compile."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from rammer.backend import Availability, Backend, Capabilities, check_options
from rammer.errors import RammerError
from rammer.ir import Graph, Node
from rammer.lower.batching import DEFAULT_BATCH_ROWS
from rammer.lower.ew_translate import EW_OPS

from .graph_passes import PIPELINE
from .ops import CostModel

#: Ops the CPU backend compiles itself (everything else falls back to the reference).
CPU_OPS = frozenset({
    # views
    "Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Split", "Expand",
    # GEMM-like
    "MatMul", "Gemm", "Conv",
    # others
    "Concat", "Pad", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Softmax", "LogSoftmax",
    "LayerNormalization", "Gather", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    # recurrent layers (input GEMM + per-step GEMM with fused epilogue + fused cell)
    "LSTM", "GRU", "RNN",
    # scans and index ops (lower_index.py), quantized ops in integers (lower_quant.py)
    "CumSum", "GatherElements", "ArgMax", "ArgMin", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    "MatMulInteger", "QLinearConv", "QLinearMatMul",
    # as a LayerNormalization and a per-channel affine (the core pass NORM_AS_LAYERNORM)
    "InstanceNormalization", "GroupNormalization",
    # rammer's tree-ensemble op (what rammer.ml lowers tree ensembles to on cpu; lower_tree.py)
    "TreeEnsembleScores",
}) | EW_OPS

OPTIONS = {"veus", "policy", "pin", "cache", "cache_dir", "emit", "max_wait_s", "batch_rows"}


class CpuBackend(Backend):
    name = "cpu"
    description = ("the CPU as a vDevice: one persistent numba worker per core walking a static rTask "
                   "program; fused elementwise groups, GEMM epilogues, an arena with liveness reuse")
    capabilities = Capabilities(
        ops=CPU_OPS,
        reference_fallback=True,
        dtypes=frozenset({"float32", "int64", "int32", "bool", "uint8", "int8"}),
        rtol=1e-4,
        atol=1e-5,
        device="cpu",
        schedules=True,
        emits_source="python",
        compile_cache=True,
        vdevice_presets=("cpu",),
        options=frozenset(OPTIONS),
        extra={"policies": ["wavefront", "op-by-op"]},
    )
    default_priority = 10
    graph_passes = PIPELINE
    #: Scheduling policy when the caller names none.
    default_policy = "wavefront"

    def availability(self) -> Availability:
        # Found, not imported: a cache hit that runs a native image never imports numba (0.5 s).
        import importlib.util

        missing = [name for name in ("numba", "llvmlite") if importlib.util.find_spec(name) is None]
        if missing:  # pragma: no cover - numba is a dependency
            return Availability(False, f"needs numba and llvmlite (not installed: {', '.join(missing)})")
        return Availability(True)

    # -- what the scheduler asks a backend ------------------------------------------
    def vdevice(self, preset: str | None = None, num_veus: int | None = None):
        from .scheduling import cpu_vdevice

        if preset not in (None, "cpu", "auto", ""):
            from rammer.vdevice import get_preset

            return self.check_vdevice(get_preset(preset))  # a cpu preset from a file; other kinds refused
        return cpu_vdevice(num_veus)

    def rkernels(self, node: Node, graph: Graph, vdevice) -> Iterable:
        """Candidate rKernels of one node of an original graph (for ``rammer schedule --backend cpu``)."""
        from .lowering import Lowerer
        from .scheduling import op_candidates

        one = _single_node_graph(node, graph)
        lowered = Lowerer(one, CostModel()).run()
        ops = [op for op in lowered.ops if not op.host]
        if not ops:
            from rammer.rtask import RKernel

            return [RKernel(family="cpu.host", params={}, num_rtasks=1, duration_us=100.0)]
        # The node's dominant op (by work) stands for it.
        main = max(ops, key=lambda op: op.flops + op.nbytes)
        return op_candidates(main, vdevice)

    # -- saved programs (rammer.artifact) -------------------------------------------
    # Imported when used, as compile's modules are: they load numba's kernels and
    # listing backends should not.
    def artifact_format(self) -> str:
        from .cache_entry import FORMAT

        return FORMAT

    def artifact_compat(self) -> dict[str, str]:
        from . import artifact

        return artifact.compat()

    def export_artifact(self, executable: Any):
        from . import artifact

        return artifact.export(executable)

    def import_artifact(self, graph: Graph | None, files: Mapping[str, Any], options: Mapping[str, Any]):
        from . import artifact

        return artifact.restore(graph, files, options)

    # -- compiling --------------------------------------------------------------------
    def compile(self, graph: Graph, options: Mapping[str, Any]):
        return self._compile(graph, options, None, None)

    def compile_cache_dir(self, options: Mapping[str, Any]) -> str | None:
        if not bool(options.get("cache", True)) or options.get("emit"):
            return None
        from .cache import cache_base

        return cache_base(options.get("cache_dir") or os.environ.get("RAMMER_CACHE_DIR"))

    def compile_keyed(self, model_key: str, options: Mapping[str, Any], load_graph):
        # a hit loads the program and what it needs of the graph without importing the model
        return self._compile(None, options, model_key, load_graph)

    def _compile(self, graph: Graph | None, options: Mapping[str, Any], model_key: str | None, load_graph):
        check_options(self.name, options, OPTIONS)
        from .cache import compile_cached

        veus = options.get("veus")
        if veus is not None and int(veus) < 1:
            raise RammerError(f"--veus must be at least 1, got {veus}")
        return compile_cached(
            graph,
            num_veus=int(veus) if veus else None,
            policy=str(options.get("policy", self.default_policy)),
            pin=bool(options.get("pin", False)),
            use_cache=bool(options.get("cache", True)),
            cache_dir=options.get("cache_dir") or os.environ.get("RAMMER_CACHE_DIR"),
            emit_dir=options.get("emit"),
            max_wait_s=float(options.get("max_wait_s", 60.0)),
            batch_rows=int(options.get("batch_rows", DEFAULT_BATCH_ROWS)),
            model_key=model_key, load_graph=load_graph,
        )


class CpuOpByOpBackend(CpuBackend):
    """The cpu backend scheduling one operator at a time with a barrier after each
    (the two-layer execution of today's frameworks), for comparisons."""

    name = "cpu-op-by-op"
    description = "the cpu backend with the op-by-op policy (every op spread on all vEUs, a barrier after each)"
    default_priority = 1
    default_policy = "op-by-op"


def _single_node_graph(node: Node, graph: Graph) -> Graph:
    names = [i for i in node.inputs if i]
    inits = {n: graph.initializers[n] for n in names if n in graph.initializers}
    inputs = tuple(graph.value_info[n] for n in dict.fromkeys(names) if n not in inits)
    outputs = tuple(graph.value_info[o] for o in node.outputs if o)
    vi = {t.name: t for t in inputs + outputs}
    vi.update({n: graph.value_info[n] for n in inits})
    return Graph(node.name or "node", inputs, outputs, (node,), inits, vi, graph.opset)



