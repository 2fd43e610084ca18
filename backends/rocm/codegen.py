"""HIP source of a compiled program and the hipcc command that builds it without a GPU.

``python -m rammer.backends.rocm.codegen MODEL.onnx|ZOO-NAME DIR`` writes the source file, the
schedule and the report to DIR and builds the source for each architecture of :data:`TOOLCHAIN`
when hipcc is on PATH (``rammer compile --backend rocm`` needs the GPU: the CLI compiles
only for available backends).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

from rammer.backends.gpu.compiler import GpuProgram
from rammer.backends.gpu.native import Toolchain

from .kernels import DIALECT

__all__ = ["render", "SUFFIX", "TOOLCHAIN", "emit"]

SUFFIX = ".hip"
TOOLCHAIN = Toolchain(compiler="hipcc",
                      args=("--offload-arch={arch}", "--genco", "{src}", "-o", "{out}"),
                      archs=("gfx90a", "gfx908"), env={"HIP_PLATFORM": "amd"},
                      usage=None)


def render(program: GpuProgram) -> str:
    """The self-contained ``.hip`` file of ``program``."""
    return program.source(DIALECT)


def emit(model: str, folder: str, build: bool = True) -> dict:
    """Compile ``model`` (a path or a zoo name) for this backend without a GPU and write
    ``program.hip``, ``schedule.json`` and ``report.json`` into ``folder``."""
    from rammer import zoo
    from rammer.frontend import load

    from .device import make_backend

    graph = load(model if os.path.exists(model) else zoo.build(model, seed=0))
    exe = make_backend().compile(graph, {})
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "program" + SUFFIX), "w", encoding="utf-8") as f:
        f.write(exe.source)
    exe.schedule.to_json(os.path.join(folder, "schedule.json"))
    report = dict(exe.report)
    if build and shutil.which(TOOLCHAIN.compiler):
        report["builds"] = [TOOLCHAIN.build(exe.source, SUFFIX, arch) for arch in TOOLCHAIN.archs]
    elif build:
        report["builds_skipped"] = f"{TOOLCHAIN.compiler} is not on PATH"
    with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, default=str)
    return report


if __name__ == "__main__":  # pragma: no cover - a command-line helper
    if len(sys.argv) != 3:
        sys.exit(f"usage: python -m rammer.backends.rocm.codegen MODEL.onnx|ZOO-NAME DIR")
    out = emit(sys.argv[1], sys.argv[2])
    print(json.dumps({k: out.get(k) for k in ("blocks", "rtasks", "barriers", "arena_bytes", "builds_skipped")}))
    for b in out.get("builds", []):
        print(f"{b['arch']}: {b['binary_bytes']} bytes; {b['usage'].get('rammer_main', {})}")
