"""Saved mcu programs (``rammer compile -o M.rammer`` / ``CompiledModel.save``): the generated C and
the input/output quantization, never pickle.  Loading rebuilds the host build from the C (the
numpy model of the kernels is not saved: a loaded program runs the C)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from rammer.backend import ArtifactParts
from rammer.errors import CompileError
from rammer.ir import Graph

from .codegen import Source
from .host import HostBuild
from .quantize import QTensor
from .runtime import McuExecutable, run_float_io

FORMAT = "mcu-1"


def _tensor(t: QTensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "scale": t.scale, "zero_point": t.zero_point}


def export(exe: McuExecutable) -> ArtifactParts:
    q = exe.program.model
    meta = {"input": _tensor(q.input_tensor), "output": _tensor(q.output_tensor), "act_bits": exe.program.act_bits,
            "report": {k: v for k, v in exe.report.items() if isinstance(v, (str, int, float))}}
    files = {"model.c": exe.program.source.c.encode(), "model.h": exe.program.source.h.encode(),
             "program.json": json.dumps(meta, indent=1).encode()}
    return ArtifactParts(FORMAT, files, {})


class LoadedMcuExecutable:
    """A saved program: its C built here, float feeds quantized with the saved input parameters."""

    def __init__(self, graph: Graph, files: Mapping[str, bytes]):
        try:
            meta = json.loads(files["program.json"])
            src = Source(files["model.c"].decode(), files["model.h"].decode())
            self.tin = QTensor(0, tuple(meta["input"]["shape"]), float(meta["input"]["scale"]),
                               int(meta["input"]["zero_point"]))
            self.tout = QTensor(1, tuple(meta["output"]["shape"]), float(meta["output"]["scale"]),
                                int(meta["output"]["zero_point"]))
            self.act_bits = int(meta["act_bits"])
            self.report = dict(meta["report"])
        except (KeyError, ValueError, TypeError) as exc:
            raise CompileError(f"saved mcu program is damaged ({type(exc).__name__}: {exc}); compile the model again")
        self.graph = graph
        self.source = src.single_file()
        self.host = HostBuild(src, self.tin.nbytes, self.tout.nbytes)

    def run(self, feeds: Mapping[str, np.ndarray], act_bits: int | None = None) -> dict[str, np.ndarray]:
        bits = self.act_bits if act_bits is None else act_bits
        return run_float_io(self.graph, feeds, self.tin, self.tout, lambda xq: self.host.run(xq, bits))


def restore(graph: Graph, files: Mapping[str, bytes], options: Mapping[str, Any]) -> LoadedMcuExecutable:
    return LoadedMcuExecutable(graph, files)
