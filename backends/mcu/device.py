"""The mcu backend's declaration: name, capabilities, options, and the compile pipeline.

graph -> NHWC float layers (:mod:`.lower`) -> weight pool (:mod:`.pool`) -> int8 quantization from
calibration data (:mod:`.quantize`) -> operator order and arena (:mod:`.plan`) -> C99
(:mod:`.codegen`) -> host build (:mod:`.host`) for running here; :mod:`.arm` builds the same source
for Cortex-M.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rammer.backend import Availability, Backend, Capabilities, check_options
from rammer.errors import CompileError
from rammer.ir import Graph, Node

from .codegen import generate
from .lower import SUPPORTED_OPS, graph_refusal, lower_graph, node_refusal
from .plan import check_budget, plan_memory
from .pool import build_pool, finetune
from .quantize import quantize_net
from .runtime import McuExecutable, McuProgram, emit

OPTIONS = frozenset({"calibration", "pool_size", "act_bits", "ram_budget", "flash_budget", "engine",
                     "pool_layers", "seed", "finetune", "emit", "int8_kernel"})

#: Budgets of the experiment's target (a Cortex-M4 with 256 KiB SRAM and 1 MiB flash).
DEFAULT_RAM = 256 * 1024
DEFAULT_FLASH = 1024 * 1024


def compile_program(graph: Graph, options: Mapping[str, Any]) -> McuProgram:
    check_options("mcu", options, OPTIONS)
    net = lower_graph(graph)
    calib = options.get("calibration")
    seed = int(options.get("seed", 0))
    if calib is None:
        calib = np.random.default_rng(seed).random((32, *(graph.inputs[0].shape[1:])), dtype=np.float32)
        note = "32 random uniform [0, 1) samples (pass calibration= real data for real use)"
    else:
        calib = np.asarray(calib, np.float32)
        note = f"{len(calib)} samples given"
    if calib.ndim != 4:
        raise CompileError(f"calibration must be [N, C, H, W] like input '{graph.inputs[0].name}', got {list(calib.shape)}")
    calib = np.ascontiguousarray(calib.transpose(0, 2, 3, 1))
    pool_size = int(options.get("pool_size", 64))
    act_bits = int(options.get("act_bits", 8))
    if not 2 <= act_bits <= 8:
        raise CompileError(f"act_bits must be 2..8, got {act_bits}")
    if pool_size:
        plan = build_pool(net, calib, pool_size, seed, options.get("pool_layers"))
        ft = options.get("finetune")
        if ft is not None and plan.pooled:
            # {"x": NCHW float, "y": int labels, "epochs": n, "lr": f}: train with the pool fixed (torch)
            x = np.ascontiguousarray(np.asarray(ft["x"], np.float32).transpose(0, 2, 3, 1))
            net, plan = finetune(net, plan, x, np.asarray(ft["y"]), epochs=int(ft.get("epochs", 10)),
                                 lr=float(ft.get("lr", 1e-3)), seed=seed)
        model = quantize_net(net, calib, plan.pooled, plan.pool if plan.pooled else None, plan.reasons)
    else:
        model = quantize_net(net, calib, reasons={l.name: "weight pool off (pool_size=0)" for l in net.layers})
    mem = plan_memory(model)
    src = generate(model, mem, str(options.get("int8_kernel", "col")))
    check_budget(model, mem, src.scratch_bytes, int(options.get("ram_budget", DEFAULT_RAM)))
    flash = sum(v for v in src.flash.values())
    flash_budget = int(options.get("flash_budget", DEFAULT_FLASH))
    if flash > flash_budget:
        big = max((k for k in src.flash if k != "table"), key=lambda k: src.flash[k])
        raise CompileError(f"the model's constants need {flash} bytes of flash but the budget is {flash_budget}; "
                           f"the largest is layer '{model.layers[big].name}' ({src.flash[big]} bytes)")
    return McuProgram(model, mem, src, act_bits, note)


class McuBackend(Backend):
    name = "mcu"
    description = ("microcontrollers: int8 (TFLite/CMSIS-NN quantization) and bit-serial weight-pool kernels, "
                   "generated C99 for Cortex-M (run here through a host build)")
    capabilities = Capabilities(
        ops=SUPPORTED_OPS,
        dtypes=frozenset({"float32"}),
        # Quantized: results are int8 approximations of the float model.
        rtol=0.0,
        atol=0.5,
        device="mcu",
        emits_source="c",
        source_compiler="gcc",
        options=OPTIONS,
        extra={
            "cortex_m": "arm-none-eabi-gcc, qemu-system-arm (mps2-an385/an386), unicorn for instruction counts",
            # Results are int8 approximations calibrated on data: not comparable to float node cases
            # with fixed tolerances.  Models: image CNNs, one [N, C, H, W] input (see docs/mcu.md).
            "quantized": "int8",
            "sample_model": "rammer.backends.mcu.models:tiny_cnn",
            "source_compile_args": ["{compiler}", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c",
                                    "{src}", "-o", "{out}"],
        },
    )
    default_priority = -10

    def availability(self) -> Availability:
        import os
        import shutil

        cc = os.environ.get("CC", "gcc")
        if shutil.which(cc) is None:
            return Availability(False, f"needs a C compiler for the host build ('{cc}' not found)")
        return Availability(True)

    # -- saved programs (rammer.artifact) ----------------------------------------------
    def artifact_format(self) -> str:
        from .artifact import FORMAT

        return FORMAT

    def export_artifact(self, executable: Any):
        from .artifact import export

        return export(executable) if isinstance(executable, McuExecutable) else None

    def import_artifact(self, graph: Graph, files: Mapping[str, bytes], options: Mapping[str, Any]):
        from .artifact import restore

        return restore(graph, files, options)

    def supports(self, node: Node) -> bool:
        return node.op_type in SUPPORTED_OPS

    def unsupported_nodes(self, graph: Graph) -> list[Node]:
        """Nodes the backend cannot lower, judged by their attributes and constants too (a grouped
        conv is a Conv it refuses); every node when the graph is not one image in, one tensor out."""
        if graph_refusal(graph) is not None:
            return list(graph.nodes)
        return [n for n in graph.nodes if node_refusal(graph, n) is not None]

    def compile(self, graph: Graph, options: Mapping[str, Any]) -> McuExecutable:
        engine = str(options.get("engine", "c"))
        if engine not in ("c", "numpy"):
            raise CompileError(f"engine must be 'c' or 'numpy', got {engine!r}")
        exe = McuExecutable(graph, compile_program(graph, options), engine)
        if options.get("emit"):
            emit(exe, str(options["emit"]))
        return exe
