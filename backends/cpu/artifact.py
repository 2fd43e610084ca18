"""Saving and loading the cpu backend's compiled programs (``rammer.artifact``).

A saved program is the files of a compile-cache entry (``cache_entry``: task
tables, constants, schedules, metadata) without its folder manifest: the
``.rammer`` archive's own manifest holds their digests.  Loading decodes them
with the same bounds checks as a cache entry and runs the backend's graph
passes on the re-imported model, so host steps name the same nodes.

The program depends on the vector ISA it was compiled for (the width of the
micro-kernel's tiles and of the packed weight panels), which the artifact
records; the kernels themselves are compiled (or loaded from numba's cache)
on the machine that loads it.
"""

from __future__ import annotations

from typing import Any, Mapping

from rammer.backend import ArtifactParts
from rammer.errors import ModelLoadError
from rammer.ir import Graph

from . import cache_entry, ukernel
from .graph_passes import prepare
from .runtime import CpuExecutable

#: Files of the saved program (those of a cache entry).
FILES = cache_entry.FILES


def compat() -> dict[str, str]:
    """What a saved program needs of the machine that runs it."""
    return {"cpu.vector_width": str(ukernel.WIDTH),
            "cpu.isa": "avx512f" if ukernel.WIDTH == 16 else "avx2-or-older"}


def export(executable: Any) -> ArtifactParts:
    program = executable.program
    files = cache_entry.encode(program, executable.schedules)
    return ArtifactParts(format=cache_entry.FORMAT, files=files, compat=compat())


def restore(graph: Graph, files: Mapping[str, bytes], options: Mapping[str, Any]) -> CpuExecutable:
    missing = [f for f in FILES if f not in files]
    if missing:
        raise ModelLoadError(f"the saved cpu program lacks {', '.join(missing)}")
    prepared = prepare(graph)
    try:
        program = cache_entry.decode(dict(files), len(prepared.nodes))
    except cache_entry.CorruptEntry as exc:
        raise ModelLoadError(f"the saved cpu program is not valid for this model ({exc}); compile it again") from None
    max_wait_s = float(options.get("max_wait_s", 60.0))
    schedules_json = files["schedules.json"]

    def load_schedules() -> list:
        import json

        from rammer.schedule import Schedule

        return [Schedule.from_dict(d) for d in json.loads(schedules_json)]

    return CpuExecutable(prepared, program, max_wait_s, schedules_loader=load_schedules)
