"""What the cuda and rocm backends share beyond the model compiler: an executable holding the
rendered source, a check that the vendor compiler builds it (registers and shared memory per
kernel), and the CuPy runner (:mod:`.runner`) used only when CuPy and a GPU are present.

Without a GPU the executable still has ``source``/``sources``, ``schedule`` and ``report``;
``run`` raises a :class:`~rammer.errors.BackendUnavailableError` naming the missing GPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rammer.errors import BackendUnavailableError, RammerError

from .compiler import KERNEL_NAME, GpuProgram
from .occupancy import GpuLimits, check_grid, occupancy
from .runner import CupyRunner

__all__ = ["Toolchain", "NativeExecutable", "cupy_gpu", "emit"]


@dataclass(frozen=True)
class Toolchain:
    """How a vendor compiler builds one source file for one architecture without a GPU."""

    compiler: str
    #: ``{arch}``, ``{src}``, ``{out}`` are replaced.
    args: tuple[str, ...]
    archs: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    #: Regexes reading (kernel, registers, shared bytes) from the compiler's verbose output, if any.
    usage: tuple[str, str, str] | None = None
    #: Per vDevice preset, the device's limits (its ``arch`` is the compiler target for it).
    limits: Mapping[str, GpuLimits] = field(default_factory=dict)

    def build(self, source: str, suffix: str, arch: str, folder: str | None = None) -> dict[str, Any]:
        """Compile ``source`` for ``arch``; returns the command, output and per-kernel usage.
        Raises :class:`RammerError` when the compiler fails, and when it is absent."""
        if shutil.which(self.compiler) is None:
            raise RammerError(f"{self.compiler} is not on PATH")
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src = os.path.join(tmp, "program" + suffix)
            out = os.path.join(tmp, f"program_{arch}.bin")
            with open(src, "w", encoding="utf-8") as f:
                f.write(source)
            cmd = [a.format(arch=arch, src=src, out=out) for a in (self.compiler, *self.args)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                                  env={**os.environ, **self.env})
            if proc.returncode != 0:
                raise RammerError(f"{' '.join(cmd)} failed:\n{(proc.stderr or proc.stdout)[-3000:]}")
            size = os.path.getsize(out) if os.path.exists(out) else 0
        return {"arch": arch, "command": " ".join(os.path.basename(c) if c == src else c for c in cmd),
                "binary_bytes": size, "usage": self._usage(proc.stderr + proc.stdout)}

    def _usage(self, text: str) -> dict[str, dict[str, int]]:
        """Per kernel, registers per thread and static shared bytes per block (each on its own
        line or on one line, whichever the compiler prints)."""
        if not self.usage:
            return {}
        entry, regs, smem = (re.compile(p) for p in self.usage)
        found: dict[str, dict[str, int]] = {}
        current = None
        for line in text.splitlines():
            m = entry.search(line)
            if m:
                current = m.group(1)
                found[current] = {"registers": 0, "smem": 0}
            if current is None:
                continue
            m = regs.search(line)
            if m:
                found[current]["registers"] = int(m.group(1))
            m = smem.search(line)
            if m:
                found[current]["smem"] = int(m.group(1))
        return found


def cupy_gpu() -> tuple[Any, str]:
    """``(cupy, "")`` when CuPy imports and sees a GPU, else ``(None, why not)``."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA/ROCm library that fails to load
        return None, f"CuPy is not installed ({type(exc).__name__})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"the driver reports no device ({type(exc).__name__}: {exc})"
    return (cupy, "") if count > 0 else (None, "the driver reports no device")


class NativeExecutable:
    """The program rendered in the backend's dialect; runs through CuPy when a GPU is present."""

    def __init__(self, program: GpuProgram, dialect: str, suffix: str, toolchain: Toolchain,
                 gpu: Callable[[], tuple[Any, str]], gpu_name: str) -> None:
        self.program = program
        self.schedule = program.schedule
        self.source = program.source(dialect)
        self.sources = {f"{program.graph_name or 'model'}{suffix}": self.source}
        self.suffix, self.toolchain, self.gpu_name = suffix, toolchain, gpu_name
        self.report = dict(program.report, dialect=dialect)
        self._gpu = gpu
        self._runner: Any = None
        self._runner_lock = threading.Lock()

    def compile_check(self, arch: str | None = None) -> dict[str, Any]:
        """Build the source with the vendor compiler for ``arch`` (default: the first of the table)."""
        return self.toolchain.build(self.source, self.suffix, arch or self.toolchain.archs[0])

    def occupancy(self, preset: str | None = None) -> dict[str, Any]:
        """Build for ``preset``'s device (default: the one scheduled for) and return its registers,
        shared memory, blocks per multiprocessor and co-resident grid; raises when the program's
        grid is larger (its blocks would spin forever)."""
        preset = preset or str(self.program.report.get("vdevice"))
        limits = self.toolchain.limits.get(preset)
        if limits is None:
            raise RammerError(f"no device limits for vDevice '{preset}' (known: {', '.join(self.toolchain.limits)})")
        built = self.compile_check(limits.build_arch or limits.arch)
        usage = built["usage"].get(KERNEL_NAME)
        if usage is None:
            raise RammerError(f"{self.toolchain.compiler} reported no resource usage for {KERNEL_NAME}")
        occ = {"preset": preset, **occupancy(limits, self.program.block_threads, usage["registers"], usage["smem"]),
               "grid": self.program.blocks, "binary_bytes": built["binary_bytes"], "built_for": built["arch"]}
        if self.program.mode == "persistent":
            check_grid(self.program.blocks, occ, preset)
        return occ

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._runner_lock:  # two threads' first runs build one runner
            if self._runner is None:
                cupy, why = self._gpu()
                if cupy is None:
                    raise BackendUnavailableError(f"no {self.gpu_name} to run on: {why}")
                self._runner = CupyRunner(cupy, self.program, self.source,
                                          self.toolchain.limits.get(str(self.program.report.get("vdevice"))),
                                          self.gpu_name)
        return self._runner(feeds)  # the runner's own lock orders concurrent runs


def emit(backend: Any, toolchain: Toolchain, suffix: str, model: str, folder: str, build: bool = True,
         options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Compile ``model`` (an ``.onnx`` path or a zoo name) for ``backend`` without a GPU and write
    ``program<suffix>``, ``schedule.json`` and ``report.json`` (with, per architecture, the
    compiler's build and, per preset, the occupancy) into ``folder``."""
    import json

    from rammer import zoo
    from rammer.frontend import load

    graph = load(model if os.path.exists(model) else zoo.build(model, seed=0))
    exe = backend.compile(graph, dict(options or {}))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "program" + suffix), "w", encoding="utf-8") as f:
        f.write(exe.source)
    exe.schedule.to_json(os.path.join(folder, "schedule.json"))
    report = dict(exe.report)
    if build and shutil.which(toolchain.compiler):
        report["builds"] = [toolchain.build(exe.source, suffix, arch) for arch in toolchain.archs]
        preset = str(exe.report.get("vdevice"))
        if preset in toolchain.limits:
            report["occupancy"] = exe.occupancy(preset)
    elif build:
        report["builds_skipped"] = f"{toolchain.compiler} is not on PATH"
    with open(os.path.join(folder, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, default=str)
    return report


def emit_main(backend: str, emit_fn: Callable[..., dict[str, Any]], argv: list[str]) -> int:
    """``python -m rammer.backends.<backend>.codegen MODEL DIR [--mode M] [--vdevice P]``."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog=f"python -m rammer.backends.{backend}.codegen",
                                     description="Write the program, schedule and report of MODEL without a GPU.")
    parser.add_argument("model", help="an .onnx path or a zoo name")
    parser.add_argument("folder")
    parser.add_argument("--mode", choices=("persistent", "wave"), default="persistent")
    parser.add_argument("--vdevice", default=None, help="a GPU vDevice preset (default: the backend's first)")
    args = parser.parse_args(argv)
    options = {"mode": args.mode, **({"vdevice": args.vdevice} if args.vdevice else {})}
    try:
        out = emit_fn(args.model, args.folder, **options)
    except RammerError as exc:
        print(f"error: {exc}", file=__import__("sys").stderr)
        return 1
    print(json.dumps({k: out.get(k) for k in ("vdevice", "mode", "blocks", "rtasks", "barriers", "arena_bytes",
                                              "builds_skipped")}))
    for b in out.get("builds", []):
        print(f"{b['arch']}: {b['binary_bytes']} bytes; {b['usage'].get(KERNEL_NAME, {})}")
    if "occupancy" in out:
        print(json.dumps(out["occupancy"]))
    return 0
