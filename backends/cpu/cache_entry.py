"""One entry of the CPU compile cache: its files, their manifest, and the checks on load.

An entry is a folder of four files (``meta.json``, ``tables.npz``,
``consts.bin``, ``schedules.json``) and ``manifest.json``, which gives the
size and SHA-256 of each of them and a SHA-256 of itself.  An entry is
written once into a fresh temporary folder (each file created exclusively
and fsynced), then renamed into place, and never modified afterwards, so a
reader sees a whole entry or none.

Loading trusts nothing: every file is checked against the manifest (any
edit of any byte, including one that keeps ``meta.json`` valid JSON, is
caught), and then every index and offset the driver will follow without
checks (kernel ids, scratch offsets, barrier rows, row ranges, tensor
placements, host-step node indices) is bounds-checked against the arena and
the tables.  Anything off raises :class:`CorruptEntry`.  The kernels'
own parameters are not interpreted here; the manifest is what vouches for them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from typing import Any

import numpy as np

from . import entries as _entries
from .compiled import CompiledSegment, HostStep, Program
from .driver import BARRIER
from .entries import ROW_PARAMS
from .ops import ARENA_DTYPES

FORMAT = "rammer.cpu.program/2"
MANIFEST = "manifest.json"
#: The files of an entry besides the manifest, in the order they are written.
FILES = ("tables.npz", "consts.bin", "schedules.json", "meta.json")
#: Columns of a task row (kernel id, scratch offset, parameters); see codegen.ROW.
ROW = 2 + ROW_PARAMS


class CorruptEntry(Exception):
    """A cache entry that must not be used (and should be rebuilt)."""


# -- writing ----------------------------------------------------------------------------------------

def encode(program: Program, schedules: list | None) -> dict[str, bytes]:
    """The entry's files (name -> contents) for ``program``."""
    segs = [s for s in program.steps if isinstance(s, CompiledSegment)]
    arrays = {"T": program.T, "X": program.X, "R": program.R}
    for k, s in enumerate(segs):
        arrays[f"starts{k}"] = s.starts
        arrays[f"ends{k}"] = s.ends
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    steps: list[dict[str, Any]] = []
    seg_no = 0
    for s in program.steps:
        if isinstance(s, HostStep):
            steps.append({"host": s.node_index, "reason": s.reason})
        else:
            steps.append({"segment": seg_no})
            seg_no += 1
    meta = {
        "format": FORMAT, "arena_bytes": program.arena_bytes, "const_bytes": program.const_bytes,
        "kernel_names": program.kernel_names, "steps": steps,
        "tensors": {k: [v[0], v[1], list(v[2]), list(v[3])] for k, v in program.tensors.items()},
        "host_tensors": program.host_tensors, "num_veus": program.num_veus, "cores": program.cores,
        "report": program.report,
    }
    return {
        "tables.npz": buf.getvalue(),
        "consts.bin": np.ascontiguousarray(program.const_blob, dtype=np.uint8).tobytes(),
        "schedules.json": json.dumps([s.to_dict() for s in schedules or []], separators=(",", ":")).encode(),
        "meta.json": json.dumps(meta, default=str).encode(),
    }


def _manifest_digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def manifest(key: str, files: dict[str, bytes]) -> bytes:
    body = {"format": FORMAT, "key": key,
            "files": {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                      for name, data in files.items()}}
    return json.dumps(dict(body, sha256=_manifest_digest(body)), sort_keys=True).encode()


def write_file(path: str, data: bytes) -> None:
    """Create ``path`` (it must not exist), write ``data`` whole and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on folders; the rename is still atomic
    finally:
        os.close(fd)


# -- reading ----------------------------------------------------------------------------------------

def _read(folder: str, name: str, size: int | None = None) -> bytes:
    """A regular file's bytes (never a link, a FIFO or a device: those could hang or lie)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(os.path.join(folder, name), flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptEntry(f"{name} is not a regular file")
        if size is not None and st.st_size != size:
            raise CorruptEntry(f"{name} has {st.st_size} bytes, the manifest says {size}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    finally:
        os.close(fd)
    if size is not None and len(data) != size:
        raise CorruptEntry(f"{name} changed while it was read")
    return data


def read_verified(folder: str, key: str) -> dict[str, bytes]:
    """Every file of the entry, each checked against the manifest (which is checked against itself)."""
    raw = _read(folder, MANIFEST)
    if len(raw) > 1 << 20:
        raise CorruptEntry("the manifest is implausibly large")
    man = json.loads(raw)
    if not isinstance(man, dict) or not isinstance(man.get("files"), dict):
        raise CorruptEntry("the manifest is not an object with files")
    body = {k: v for k, v in man.items() if k != "sha256"}
    if man.get("sha256") != _manifest_digest(body):
        raise CorruptEntry("the manifest does not match its own digest")
    if raw != json.dumps(man, sort_keys=True).encode():
        raise CorruptEntry("the manifest is not byte for byte as written")
    if man.get("format") != FORMAT:
        raise CorruptEntry(f"format {man.get('format')!r}, expected {FORMAT!r}")
    if man.get("key") != key:
        raise CorruptEntry(f"the manifest is for key {man.get('key')!r}, not {key!r}")
    if sorted(man["files"]) != sorted(FILES):
        raise CorruptEntry(f"the manifest lists {sorted(man['files'])}, expected {sorted(FILES)}")
    blobs = {}
    for name in FILES:
        info = man["files"][name]
        size = info.get("bytes") if isinstance(info, dict) else None
        if not isinstance(size, int) or size < 0:
            raise CorruptEntry(f"the manifest gives no size for {name}")
        data = _read(folder, name, size)
        if hashlib.sha256(data).hexdigest() != info.get("sha256"):
            raise CorruptEntry(f"{name} does not match its SHA-256 in the manifest")
        blobs[name] = data
    return blobs


def decode(blobs: dict[str, bytes], num_nodes: int) -> Program:
    """The program of a verified entry, bounds-checked (``num_nodes``: nodes of the prepared graph)."""
    meta = json.loads(blobs["meta.json"])
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CorruptEntry("meta.json is not this format's metadata")
    with np.load(io.BytesIO(blobs["tables.npz"]), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    steps: list[Any] = []
    for st in meta["steps"]:
        if "host" in st:
            steps.append(HostStep(_int(st["host"]), str(st["reason"])))
        else:
            k = _int(st["segment"])
            if f"starts{k}" not in arrays or f"ends{k}" not in arrays:
                raise CorruptEntry(f"segment {k} has no row ranges in tables.npz")
            steps.append(CompiledSegment(arrays[f"starts{k}"], arrays[f"ends{k}"]))
    for name in ("T", "X", "R"):
        if name not in arrays:
            raise CorruptEntry(f"tables.npz has no {name}")
    program = Program(
        arena_bytes=_int(meta["arena_bytes"]), const_bytes=_int(meta["const_bytes"]),
        const_blob=np.frombuffer(blobs["consts.bin"], dtype=np.uint8),
        T=arrays["T"], X=arrays["X"], R=arrays["R"], kernel_names=list(meta["kernel_names"]), steps=steps,
        tensors={str(k): (str(v[0]), _int(v[1]), tuple(_int(d) for d in v[2]), tuple(_int(s) for s in v[3]))
                 for k, v in meta["tensors"].items()},
        host_tensors=[str(t) for t in meta["host_tensors"]], num_veus=_int(meta["num_veus"]),
        cores=[_int(c) for c in meta["cores"]], report=dict(meta["report"]))
    check_bounds(program, num_nodes)
    return program


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise CorruptEntry(f"{value!r} is not an integer")
    return int(value)


# -- bounds ------------------------------------------------------------------------------------------

def check_bounds(p: Program, num_nodes: int) -> None:
    """Every index the driver and runtime follow unchecked lies inside the arena and the tables.

    Raises :class:`CorruptEntry` naming the first violation.  Vectorised, so it
    costs little next to reading the entry.
    """
    if not 1 <= p.num_veus <= 4096:
        raise CorruptEntry(f"num_veus {p.num_veus}")
    if not 0 <= p.const_bytes <= p.arena_bytes or p.const_blob.size != p.const_bytes:
        raise CorruptEntry(f"constant region of {p.const_blob.size} bytes for const_bytes {p.const_bytes} "
                           f"in an arena of {p.arena_bytes}")
    if len(p.cores) != p.num_veus or any(c < -1 for c in p.cores):
        raise CorruptEntry(f"cores {p.cores} for {p.num_veus} vEUs")
    names = p.kernel_names
    if (not names or names[0] != "barrier" or len(set(names)) != len(names)
            or not all(isinstance(n, str) and hasattr(_entries, f"entry_{n}") for n in names[1:])):
        raise CorruptEntry(f"kernel names {names} are not the barrier and distinct known kernels")
    T, X, R = p.T, p.X, p.R
    if T.dtype != np.int64 or T.ndim != 2 or T.shape[1] != ROW or T.shape[0] < 1:
        raise CorruptEntry(f"task table of {T.dtype} {T.shape}")
    if X.dtype != np.int64 or X.ndim != 1 or R.dtype != np.float32 or R.ndim != 1:
        raise CorruptEntry(f"side tables X {X.dtype} {X.shape}, R {R.dtype} {R.shape}")
    kid = T[:, 0]
    if kid.min() < 0 or kid.max() >= len(names):
        raise CorruptEntry(f"kernel ids outside 0..{len(names) - 1}")
    work = kid != BARRIER
    scratch = T[work, 1]
    if scratch.size and (scratch.min() < 0 or scratch.max() * 4 > p.arena_bytes):
        raise CorruptEntry("a scratch offset lies outside the arena")
    rows = T.shape[0]
    segments = 0
    for step in p.steps:
        if isinstance(step, HostStep):
            if not 0 <= step.node_index < num_nodes:
                raise CorruptEntry(f"host step of node {step.node_index} in a graph of {num_nodes} nodes")
            continue
        segments += 1
        s, e = step.starts, step.ends
        if (s.dtype != np.int64 or e.dtype != np.int64 or s.shape != (p.num_veus,) or e.shape != (p.num_veus,)
                or (s < 0).any() or (e < s).any() or (e > rows).any()):
            raise CorruptEntry("a segment's row ranges do not fit the task table")
        lengths = e - s
        for v in range(p.num_veus):
            seg = T[s[v]:e[v]]
            waits = seg[seg[:, 0] == BARRIER]
            if waits.size:
                u = waits[:, 2]
                if (u < 0).any() or (u >= p.num_veus).any() or (u == v).any():
                    raise CorruptEntry(f"a barrier row of vEU {v} waits for a vEU that is not another one")
                if (waits[:, 3] < 0).any() or (waits[:, 3] > lengths[u]).any():
                    raise CorruptEntry(f"a barrier row of vEU {v} waits for more rows than the other vEU has")
    for name, (dtype, off, shape, strides) in p.tensors.items():
        size = ARENA_DTYPES.get(dtype)
        if size is None or len(shape) != len(strides) or any(d < 0 for d in shape):
            raise CorruptEntry(f"tensor {name!r} has placement {dtype} {shape} {strides}")
        if 0 in shape:
            lo, hi = off, off
        else:
            lo = off + size * sum(min(0, (d - 1) * st) for d, st in zip(shape, strides))
            hi = off + size * (1 + sum(max(0, (d - 1) * st) for d, st in zip(shape, strides)))
        if lo < 0 or hi > p.arena_bytes:
            raise CorruptEntry(f"tensor {name!r} at bytes {lo}..{hi} lies outside the arena of {p.arena_bytes}")
