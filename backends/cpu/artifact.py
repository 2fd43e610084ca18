"""Saving and loading the cpu backend's compiled programs (``rammer.artifact``).

A saved program is the files of a compile-cache entry (``cache_entry``: task
tables, constants, schedules, metadata, and the part of the graph the program
needs: inputs, outputs and the nodes run on the host) without its folder
manifest: the ``.rammer`` archive's own manifest holds their digests.  The
ONNX model is not saved (``needs_model=False``): the file holds the weights
once, as the program's constants, and loading reads them straight into the
arena (checking their block CRCs) with the same bounds checks as a cache
entry; nothing is imported or compiled.

A program of several vEUs is saved with its 1-vEU twin (``lane_*`` files: the
tables only; both programs share the constants, which the lowering lays out
the same whatever the vEU count): concurrent callers run it on lanes and a
fork()ed child runs it, which otherwise would need the graph to compile it.
Should the constants ever differ, the twin is left out and the loaded model
serves concurrent callers one at a time.

The program depends on the vector ISA it was compiled for (the width of the
micro-kernel's tiles and of the packed weight panels), which the artifact
records; the kernels themselves are compiled (or loaded from numba's cache)
on the machine that loads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from rammer.backend import ArtifactParts
from rammer.errors import ModelLoadError, OpExecutionError, RammerError
from rammer.ir import Graph
from rammer.ir_codec import CodecError, decode_graph, encode_graph

from . import cache_entry, runtime, ukernel
from .cache import host_nodes
from .compiled import Program
from .runtime import CpuExecutable

#: Files of the saved program (those of a cache entry).
FILES = cache_entry.FILES
#: The 1-vEU twin's files (its tables and metadata; the constants are shared).
LANE_FILES = {"lane_tables.npz": "tables.npz", "lane_meta.json": "meta.json"}


def compat() -> dict[str, str]:
    """What a saved program needs of the machine that runs it."""
    return {"cpu.vector_width": str(ukernel.WIDTH),
            "cpu.isa": "avx512f" if ukernel.WIDTH == 16 else "avx2-or-older"}


def _lane_program(executable: Any) -> Program | None:
    """The 1-vEU twin of a multi-vEU program, when it shares the program's constants."""
    program = executable.program
    if program.num_veus == 1:
        return None
    lane = getattr(executable, "_lane_program", None)
    if lane is None:
        from rammer import api

        policy = str(program.report.get("policy", "wavefront"))
        lane = api.compile(executable.full_graph(), backend="cpu", veus=1, policy=policy).executable.program
    if lane.const_bytes != program.const_bytes or not np.array_equal(lane.const_blob, program.const_blob):
        return None
    return lane


def export(executable: Any) -> ArtifactParts:
    program = executable.program
    try:
        graph_files = encode_graph(executable.graph, keep=host_nodes(program))
    except CodecError as exc:
        raise RammerError(f"cannot save this model's host steps ({exc}); it runs, but compile it where it is "
                          f"needed instead of saving it") from None
    files = cache_entry.encode(program, executable.schedules, graph_files)
    lane = _lane_program(executable)
    if lane is not None:
        lane_files = cache_entry.encode(lane, None, graph_files)
        files.update({saved: lane_files[name] for saved, name in LANE_FILES.items()})
    return ArtifactParts(format=cache_entry.FORMAT, files=files, compat=compat(), needs_model=False)


class SavedExecutable(CpuExecutable):
    """A program loaded from a ``.rammer`` file, which holds no graph to compile again."""

    def full_graph(self) -> Graph:
        raise RammerError("this model was loaded from a .rammer file, which holds its compiled program, not its "
                          "whole graph; compile the ONNX model to get the graph")

    def run(self, feeds, outputs=None):
        if self._lane_program is not None or not self._multi_veu:
            return super().run(feeds, outputs)
        # no 1-vEU twin: callers take turns on the whole program, and a fork()ed child cannot run it
        if self._forks != runtime._FORKS[0]:
            raise OpExecutionError(
                f"this model of {self.program.num_veus} vEUs, loaded from a .rammer file, cannot run in a process "
                f"made by fork() (GNU OpenMP); use multiprocessing's 'spawn' or 'forkserver' start method")
        with self._lock:
            return self._run_here(feeds, outputs)


def restore(graph: Graph | None, files: Mapping[str, Any], options: Mapping[str, Any]) -> CpuExecutable:
    del graph  # the files hold what the program needs of it
    missing = [f for f in FILES if f not in files]
    if missing:
        raise ModelLoadError(f"the saved cpu program lacks {', '.join(missing)}")
    consts = files[cache_entry.CONSTS]  # a range of the file (large), or bytes (checked already)
    blobs = {k: v for k, v in files.items() if k != cache_entry.CONSTS}
    try:
        kept = decode_graph(blobs["graph.json"], blobs["graph.npz"])
        program, arena = cache_entry.load_program(blobs, consts, len(kept.nodes))
        lane = None
        if all(k in blobs for k in LANE_FILES):
            lane = cache_entry.decode({name: blobs[saved] for saved, name in LANE_FILES.items()}, len(kept.nodes),
                                      program.const_blob)
            if lane.num_veus != 1 or lane.const_bytes != program.const_bytes:
                raise cache_entry.CorruptEntry("the 1-vEU twin does not match the program")
    except (cache_entry.CorruptEntry, CodecError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"the saved cpu program is not valid ({exc}); compile the model again") from None
    max_wait_s = float(options.get("max_wait_s", 60.0))
    schedules_json = blobs["schedules.json"]

    def load_schedules() -> list:
        from rammer.schedule import Schedule

        return [Schedule.from_dict(d) for d in json.loads(schedules_json)]

    exe = SavedExecutable(kept, program, max_wait_s, schedules_loader=load_schedules, arena=arena)
    exe._lane_program = lane
    return exe

