"""The mcu executable: the quantized model, its C program, a host build to run it, and the report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rammer.errors import FeedError
from rammer.ir import Graph

from .codegen import Source
from .host import HostBuild, write_source
from .kernels import run_model
from .plan import MemoryPlan
from .quantize import QModel, QTensor, dequantize, quantize_input


@dataclass
class McuProgram:
    """Everything one compile produced (shared by the executable, the ARM build and benchmarks)."""

    model: QModel
    plan: MemoryPlan
    source: Source
    act_bits: int
    calibration_note: str


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, (0, 2, 3, 1)))


class McuExecutable:
    """Runs float NCHW feeds: quantize, ``model_run`` (host build, or the numpy model), dequantize."""

    def __init__(self, graph: Graph, program: McuProgram, engine: str = "c"):
        self.graph = graph
        self.program = program
        self.engine = engine
        q = program.model
        self.host = HostBuild(program.source, q.input_tensor.nbytes, q.output_tensor.nbytes) if engine == "c" else None
        self.report = build_report(program, engine)
        #: The report's layers as rows (dicts), for tools.
        self.layer_table = layer_rows(program)
        #: The generated C as one translation unit (what conformance's source check compiles).
        self.source = program.source.single_file()

    def quantize(self, x: np.ndarray) -> np.ndarray:
        return quantize_input(_nhwc(np.asarray(x, np.float32)), self.program.model.input_tensor)

    def run_int8(self, xq: np.ndarray, act_bits: int | None = None) -> np.ndarray:
        bits = self.program.act_bits if act_bits is None else act_bits
        if self.host is not None:
            return self.host.run(xq, bits)
        return run_model(self.program.model, xq, bits).reshape(len(xq), -1)

    def device_metrics(self, feeds: Mapping[str, np.ndarray] | None = None,
                       act_bits: int | None = None) -> dict[str, Any]:
        """Flash/RAM of the plan and, with arm-none-eabi-gcc and unicorn, the exact Cortex-M4
        instruction count of one ``model_run`` (per layer too), for benchmark tables."""
        from . import arm

        q = self.program.model
        r = self.report
        out: dict[str, Any] = {"flash_bytes": r["flash_bytes_constants"],
                               "ram_bytes": r["ram_arena_bytes"] + r["ram_scratch_bytes"] + r["ram_io_bytes"]}
        bits = self.program.act_bits if act_bits is None else act_bits
        try:
            import elftools  # noqa: F401
            import unicorn  # noqa: F401
        except ImportError:
            out["cortex_m4_instructions"] = "n/a (needs unicorn and pyelftools)"
            return out
        if arm.missing_tools():
            out["cortex_m4_instructions"] = f"n/a (needs {', '.join(arm.missing_tools())})"
            return out
        if feeds is None:
            x = np.zeros((1, q.input_tensor.nbytes), np.int8)
        else:
            x = self.quantize(np.asarray(next(iter(feeds.values())), np.float32)[:1])
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="rammer-mcu-m4-")
        try:
            build = arm.build(self.program.source, "cortex-m4", x, [bits], q.input_tensor.nbytes,
                              q.output_tensor.nbytes, folder=folder)
            _, counts = arm.UnicornM4(build.elf, self.program.source.functions).run(x[0], q.output_tensor.nbytes, bits)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        out["cortex_m4_instructions"] = sum(counts.values())
        out["cortex_m4_instructions_per_layer"] = {q.layers[li].name: n for li, n in counts.items() if li >= 0}
        out["cortex_m4_text_bytes"] = build.text
        out["cortex_m4_bss_bytes"] = build.bss
        return out

    def run(self, feeds: Mapping[str, np.ndarray], act_bits: int | None = None) -> dict[str, np.ndarray]:
        q = self.program.model
        return run_float_io(self.graph, feeds, q.input_tensor, q.output_tensor,
                            lambda xq: self.run_int8(xq, act_bits))


def run_float_io(graph: Graph, feeds: Mapping[str, np.ndarray], tin: QTensor, tout: QTensor, run_int8) -> dict:
    """Float NCHW feed -> quantized NHWC -> ``run_int8`` -> dequantized output in the graph's layout."""
    (inp,), (outp,) = graph.inputs, graph.outputs
    if inp.name not in feeds:
        raise FeedError(f"missing input '{inp.name}'")
    x = np.asarray(feeds[inp.name], np.float32)
    if x.ndim != 4 or x.shape[1:] != tuple(inp.shape[1:]):
        raise FeedError(f"input '{inp.name}' must be [N, {', '.join(map(str, inp.shape[1:]))}], got {list(x.shape)}")
    y = dequantize(run_int8(quantize_input(_nhwc(x), tin)), tout)
    h, w, c = tout.shape
    if len(outp.shape) == 4:
        y = np.transpose(y.reshape(len(x), h, w, c), (0, 3, 1, 2))
    return {outp.name: np.ascontiguousarray(y.reshape((len(x),) + tuple(outp.shape[1:])))}


def emit(exe: McuExecutable, folder: str) -> None:
    """``--emit DIR``: model.c, model.h and report.json, written to a fresh folder then renamed."""
    import json
    import os
    import shutil
    import tempfile

    parent = os.path.dirname(os.path.abspath(folder)) or "."
    tmp = tempfile.mkdtemp(prefix=".mcu-emit-", dir=parent)
    try:
        write_source(exe.program.source, tmp)
        with open(os.path.join(tmp, "report.json"), "w") as f:
            json.dump(exe.report, f, indent=2, default=str)
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def layer_rows(program: McuProgram) -> list[dict[str, Any]]:
    """One row per layer: path (weight pool / int8), why not pooled, flash and RAM bytes."""
    q, plan, src = program.model, program.plan, program.source
    rows = []
    for li in plan.order:
        layer = q.layers[li]
        weighted = layer.kind in ("conv", "fc", "dwconv")
        rows.append({
            "layer": layer.name, "kind": layer.kind,
            "path": ("weight pool" + (" (memoised)" if li in src.memoised else "")) if layer.pooled
            else ("int8" if weighted else "int8 (no weights)"),
            "why_not_pooled": layer.reason if weighted and not layer.pooled else "",
            "flash_bytes": int(src.flash.get(li, 0)),
            "int8_weight_bytes": int(layer.weight.size) if weighted else 0,
            "ram_bytes": int(plan.live_bytes.get(li, 0)),
            "output": list(q.tensors[layer.output].shape),
        })
    return rows


def build_report(program: McuProgram, engine: str) -> dict[str, Any]:
    q, plan, src = program.model, program.plan, program.source
    rows = layer_rows(program)
    pooled = [r["layer"] for r in rows if r["path"].startswith("weight pool")]
    not_pooled = [f"{r['layer']} ({r['why_not_pooled']})" for r in rows if r["why_not_pooled"]]
    flash_layers = sum(r["flash_bytes"] for r in rows)
    io = q.input_tensor.nbytes + q.output_tensor.nbytes
    report: dict[str, Any] = {
        "pool_size": 0 if q.pool is None else int(len(q.pool)),
        "pooled_layers": ", ".join(pooled) or "none",
        "not_pooled": "; ".join(not_pooled) or "none",
        "act_bits": program.act_bits,
        "table_bytes": int(src.flash.get("table", 0)),
        "flash_bytes_constants": int(flash_layers + src.flash.get("table", 0)),
        "ram_arena_bytes": int(plan.arena_bytes),
        "ram_scratch_bytes": int(src.scratch_bytes),
        "ram_io_bytes": int(io),
        "operator_order": "as given" if plan.order == sorted(plan.order) else "reordered for peak RAM",
        "calibration": program.calibration_note,
        "engine": "generated C, host build (gcc)" if engine == "c" else "numpy model of the kernels",
    }
    # One line per layer (the CLI prints each scalar entry on its own line).
    for pos, r in enumerate(rows):
        why = f" ({r['why_not_pooled']})" if r["why_not_pooled"] else ""
        report[f"layer {pos:02d} {r['layer']}"] = (f"{r['kind']}, {r['path']}{why}, flash {r['flash_bytes']} B, "
                                                 f"RAM {r['ram_bytes']} B live, output {r['output']}")
    return report
