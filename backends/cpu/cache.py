"""On-disk cache of compiled CPU programs.

Key: a hash of the graph (nodes, attributes, shapes, weights), the backend
options that change the program (vEUs, policy, pinning) and the versions
that change the code (rammer, numpy, numba, llvmlite, the CPU backend's own
sources).  An entry is a folder with the task tables, the constant region,
the program metadata and the generated driver; a digest of every file is in
``meta.json`` and is checked on load, so a truncated or corrupted entry is
detected, removed and rebuilt.  Entries are written to a temporary folder
and renamed into place, so readers never see half an entry.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import shutil
import tempfile
from typing import Any

import numpy as np

from rammer.ir import Graph

from .batching import DEFAULT_BATCH_ROWS
from .runtime import CompiledSegment, CpuExecutable, HostStep, Program

FORMAT = "rammer.cpu.program/1"


def cache_root(cache_dir: str | None) -> str:
    root = cache_dir or os.environ.get("RAMMER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rammer")
    return os.path.join(root, "cpu", "programs")


def _backend_fingerprint() -> str:
    h = hashlib.sha256()
    folder = os.path.dirname(os.path.abspath(__file__))
    for path in sorted(glob.glob(os.path.join(folder, "*.py"))):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _update_value(h: Any, value: Any) -> None:
    if isinstance(value, np.ndarray):
        h.update(f"nd{value.dtype.str}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes() if value.dtype != object else repr(value.tolist()).encode())
    elif isinstance(value, Graph):
        h.update(graph_digest(value).encode())
    elif isinstance(value, (list, tuple)):
        h.update(b"[")
        for v in value:
            _update_value(h, v)
        h.update(b"]")
    else:
        h.update(repr(value).encode())


def graph_digest(graph: Graph) -> str:
    h = hashlib.blake2b(digest_size=20)
    h.update(repr(sorted(graph.opset.items())).encode())
    for t in graph.inputs + graph.outputs:
        h.update(f"{t.name}:{t.dtype}:{t.shape};".encode())
    for node in graph.nodes:
        h.update(f"{node.domain}:{node.op_type}:{node.inputs}:{node.outputs}".encode())
        for k in sorted(node.attrs):
            h.update(k.encode())
            _update_value(h, node.attrs[k])
    for name in sorted(graph.value_info):
        t = graph.value_info[name]
        h.update(f"{name}:{t.dtype}:{t.shape};".encode())
    for name in sorted(graph.initializers):
        h.update(name.encode())
        _update_value(h, np.asarray(graph.initializers[name]))
    return h.hexdigest()


def cache_key(graph: Graph, num_veus: int, policy: str, pin: bool, batch_rows: int = DEFAULT_BATCH_ROWS) -> str:
    import numba
    import llvmlite

    from rammer import __version__

    from .ukernel import CPU_NAME, MR, NR

    h = hashlib.sha256()
    h.update(graph_digest(graph).encode())
    h.update(json.dumps({"veus": num_veus, "policy": policy, "pin": pin, "batch_rows": batch_rows,
                         "rammer": __version__,
                         "numpy": np.__version__, "numba": numba.__version__, "llvmlite": llvmlite.__version__,
                         "backend": _backend_fingerprint(), "format": FORMAT,
                         # scratch sizes depend on the micro-kernel chosen for this CPU
                         "cpu": CPU_NAME, "ukernel": [MR, NR]}, sort_keys=True).encode())
    return h.hexdigest()[:32]


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def save(folder: str, program: Program, schedules: list | None = None) -> None:
    """Write an entry atomically (temporary folder, then rename)."""
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=".tmp-")
    try:
        segs = [s for s in program.steps if isinstance(s, CompiledSegment)]
        buf = io.BytesIO()
        arrays = {"T": program.T, "X": program.X, "R": program.R}
        for k, s in enumerate(segs):
            arrays[f"starts{k}"] = s.starts
            arrays[f"ends{k}"] = s.ends
        np.savez(buf, **arrays)
        files = {"tables.npz": buf.getvalue(), "consts.bin": program.const_blob.tobytes(),
                 "schedules.json": json.dumps([s.to_dict() for s in schedules or []],
                                              separators=(",", ":")).encode()}
        steps = [{"host": s.node_index, "reason": s.reason} if isinstance(s, HostStep) else {"segment": k}
                 for k, s in enumerate(program.steps)]
        seg_no = 0
        for st in steps:
            if "segment" in st:
                st["segment"] = seg_no
                seg_no += 1
        meta = {
            "format": FORMAT, "arena_bytes": program.arena_bytes, "const_bytes": program.const_bytes,
            "kernel_names": program.kernel_names, "steps": steps,
            "tensors": {k: [v[0], v[1], list(v[2]), list(v[3])] for k, v in program.tensors.items()},
            "host_tensors": program.host_tensors, "num_veus": program.num_veus, "cores": program.cores,
            "report": program.report, "digests": {name: _digest(data) for name, data in files.items()},
        }
        for name, data in files.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f)
        try:
            os.rename(tmp, folder)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another process won the race
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class CorruptEntry(Exception):
    pass


def load(folder: str) -> Program:
    """Read and verify an entry; :class:`CorruptEntry` if anything is off."""
    try:
        with open(os.path.join(folder, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        if meta.get("format") != FORMAT:
            raise CorruptEntry(f"format {meta.get('format')!r}")
        blobs = {}
        for name, digest in meta["digests"].items():
            if name == "schedules.json":
                continue  # read (and checked) only when someone asks for the schedules
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            if _digest(data) != digest:
                raise CorruptEntry(f"{name} does not match its digest")
            blobs[name] = data
        if "schedules.json" not in meta["digests"] or not os.path.isfile(os.path.join(folder, "schedules.json")):
            raise CorruptEntry("schedules.json is missing")
        with np.load(io.BytesIO(blobs["tables.npz"]), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        steps = []
        for st in meta["steps"]:
            if "host" in st:
                steps.append(HostStep(int(st["host"]), st["reason"]))
            else:
                k = int(st["segment"])
                steps.append(CompiledSegment(arrays[f"starts{k}"], arrays[f"ends{k}"]))
        program = Program(
            arena_bytes=int(meta["arena_bytes"]), const_bytes=int(meta["const_bytes"]),
            const_blob=np.frombuffer(blobs["consts.bin"], dtype=np.uint8),
            T=arrays["T"], X=arrays["X"], R=arrays["R"], kernel_names=list(meta["kernel_names"]), steps=steps,
            tensors={k: (v[0], int(v[1]), tuple(v[2]), tuple(v[3])) for k, v in meta["tensors"].items()},
            host_tensors=list(meta["host_tensors"]), num_veus=int(meta["num_veus"]), cores=list(meta["cores"]),
            report=dict(meta["report"]))
        return program
    except CorruptEntry:
        raise
    except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CorruptEntry(f"{type(exc).__name__}: {exc}") from None


def load_schedules(folder: str) -> list:
    """The schedules of a cache entry (checked against their digest)."""
    from rammer.errors import RammerError
    from rammer.schedule import Schedule

    with open(os.path.join(folder, "meta.json"), encoding="utf-8") as f:
        digest = json.load(f)["digests"]["schedules.json"]
    with open(os.path.join(folder, "schedules.json"), "rb") as f:
        data = f.read()
    if _digest(data) != digest:
        raise RammerError(f"the cached schedules in {folder} are corrupt; delete the folder to rebuild it")
    return [Schedule.from_dict(d) for d in json.loads(data)]


def compile_cached(graph: Graph, num_veus: int | None, policy: str, pin: bool, use_cache: bool,
                   cache_dir: str | None, emit_dir: str | None, max_wait_s: float,
                   batch_rows: int = DEFAULT_BATCH_ROWS) -> CpuExecutable:
    from .graph_passes import prepare
    from .scheduling import default_veus

    n = num_veus or default_veus()
    folder = os.path.join(cache_root(cache_dir), cache_key(graph, n, policy, pin, batch_rows)) if use_cache else None
    # The program and its executable both see the rewritten graph (host steps name its
    # nodes by index); the passes are deterministic, so a cached program matches too.
    graph = prepare(graph)
    if folder and not emit_dir and os.path.isdir(folder):
        try:
            exe = CpuExecutable(graph, load(folder), max_wait_s, schedules_loader=lambda: load_schedules(folder))
            exe.cache_status = "hit"
            return exe
        except CorruptEntry as exc:
            shutil.rmtree(folder, ignore_errors=True)
            rebuilt = f"rebuilt (corrupt entry: {exc})"
        else:  # pragma: no cover
            rebuilt = ""
    else:
        rebuilt = "miss" if folder else "off"
    from .compiler import compile_program

    compiled = compile_program(graph, n, policy, pin, batch_rows=batch_rows)
    if folder:
        save(folder, compiled.program, compiled.schedules)
    if emit_dir:
        from .emit import emit

        emit(emit_dir, compiled)
    exe = CpuExecutable(graph, compiled.program, max_wait_s, schedules=compiled.schedules)
    exe.cache_status = rebuilt
    exe.compiled = compiled
    return exe
