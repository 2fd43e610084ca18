"""One entry of the CPU compile cache: its files, their manifest, and the checks on load.

An entry is a folder of six files (``meta.json``, ``tables.npz``,
``consts.bin``, ``schedules.json``, and ``graph.json`` with ``graph.npz``: what
the executable needs of the graph, see :mod:`rammer.ir_codec`) and
``manifest.json``, which gives the size and a digest of each of them and a
SHA-256 of itself.  An entry is written once into a fresh temporary folder
(each file created exclusively and fsynced), then renamed into place, and never
modified afterwards, so a reader sees a whole entry or none.

Loading trusts nothing: every file is checked against the manifest (any edit of
any byte, including one that keeps ``meta.json`` valid JSON, is caught), and
then every index and offset the driver will follow without checks (kernel ids,
scratch offsets, barrier rows, row ranges, tensor placements, host-step node
indices) is bounds-checked against the arena and the tables.  Anything off
raises :class:`CorruptEntry`.  The kernels' own parameters are not interpreted
here; the manifest is what vouches for them.

What is verified on a load, and how: the small files by SHA-256, and the
constants (``consts.bin``, most of a model's bytes) by a CRC-32 of every 4 MiB
block, computed on the bytes as they land in the arena the kernels read, so
what is checked is exactly what runs even if another process scribbles over the
file meanwhile (:mod:`rammer.block_crc` says why CRCs: SHA-256 of 100 MB alone
takes 0.33 s here, more than a whole cache hit may).  The digests are there to
catch corruption, not an adversary: whoever can write the cache can rewrite the
manifest too.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from typing import Any

import numpy as np

from rammer.block_crc import BLOCK as CONST_BLOCK
from rammer.block_crc import BlockChecked, CheckFailed, block_crcs

from .compiled import CompiledSegment, HostStep, Program, aligned_arena
from .ops import ARENA_DTYPES
from .task_rows import BARRIER, KERNELS, ROW_PARAMS

FORMAT = "rammer.cpu.program/3"
MANIFEST = "manifest.json"
#: The files of an entry besides the manifest, in the order they are written.
FILES = ("tables.npz", "consts.bin", "schedules.json", "meta.json", "graph.json", "graph.npz")
CONSTS = "consts.bin"
#: Columns of a task row (kernel id, scratch offset, parameters); see codegen.ROW.
ROW = 2 + ROW_PARAMS


class CorruptEntry(Exception):
    """A cache entry that must not be used (and should be rebuilt)."""


# -- writing ----------------------------------------------------------------------------------------

def encode(program: Program, schedules: list | None, graph_files: tuple[bytes, bytes]) -> dict[str, Any]:
    """The entry's files (name -> contents: bytes, or for ``consts.bin`` a uint8 array) for ``program``;
    ``graph_files``: the graph's (JSON, npz) from :func:`rammer.ir_codec.encode_graph`."""
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
        CONSTS: np.ascontiguousarray(program.const_blob, dtype=np.uint8).reshape(-1),
        "schedules.json": json.dumps([s.to_dict() for s in schedules or []], separators=(",", ":")).encode(),
        "meta.json": json.dumps(meta, default=str).encode(),
        "graph.json": graph_files[0],
        "graph.npz": graph_files[1],
    }


def _manifest_digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def file_digests(files: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each file's size and digest, as the manifests (of an entry and of a saved model) give them."""
    out = {}
    for name, data in files.items():
        size = memoryview(data).nbytes
        if name == CONSTS:
            out[name] = {"bytes": size, "crc32": block_crcs(data, CONST_BLOCK), "block": CONST_BLOCK}
        else:
            out[name] = {"bytes": size, "sha256": hashlib.sha256(data).hexdigest()}
    return out


def manifest(key: str, files: dict[str, Any]) -> bytes:
    body = {"format": FORMAT, "key": key, "files": file_digests(files)}
    return json.dumps(dict(body, sha256=_manifest_digest(body)), sort_keys=True).encode()


def write_file(path: str, data: Any) -> None:
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

def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """A descriptor of a regular file (never a link, a FIFO or a device: those could hang or lie)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CorruptEntry(f"{os.path.basename(path)} is not a regular file")
    return fd, st


def _read(folder: str, name: str, size: int | None = None) -> bytes:
    """A regular file's bytes, ``size`` of them when given."""
    fd, st = _open_regular(os.path.join(folder, name))
    try:
        if size is not None and st.st_size != size:
            raise CorruptEntry(f"{name} has {st.st_size} bytes, the manifest says {size}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    finally:
        os.close(fd)
    if size is not None and len(data) != size:
        raise CorruptEntry(f"{name} changed while it was read")
    return data


def read_verified(folder: str, key: str) -> tuple[dict[str, bytes], BlockChecked]:
    """Every small file of the entry, each checked against the manifest (which is checked against
    itself), and where its constants are (read and checked by :func:`load_program`)."""
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
        if name == CONSTS:
            continue
        info = man["files"][name]
        size = info.get("bytes") if isinstance(info, dict) else None
        if not isinstance(size, int) or size < 0:
            raise CorruptEntry(f"the manifest gives no size for {name}")
        data = _read(folder, name, size)
        if hashlib.sha256(data).hexdigest() != info.get("sha256"):
            raise CorruptEntry(f"{name} does not match its SHA-256 in the manifest")
        blobs[name] = data
    info = man["files"][CONSTS]
    if not isinstance(info, dict) or info.get("block") != CONST_BLOCK:
        raise CorruptEntry(f"the manifest gives no block CRCs for {CONSTS}")
    try:
        consts = BlockChecked.checked(os.path.join(folder, CONSTS), 0, info.get("bytes"), info.get("crc32"),
                                      CONST_BLOCK, info.get("bytes"), CONSTS)
    except CheckFailed as exc:
        raise CorruptEntry(str(exc)) from None
    return blobs, consts


#: The largest arena a loaded program may ask for (bytes): a forged size must not allocate the machine away.
MAX_ARENA_BYTES = 1 << 40


def load_program(blobs: dict[str, bytes], consts: BlockChecked | bytes, num_nodes: int) -> tuple[Program, tuple]:
    """The program of verified files, its constants read (and checked) straight into a new arena
    (``consts``: where they are, or their bytes, verified already), bounds-checked; and that arena
    (``(raw buffer, aligned arena)``) for the executable."""
    meta = json.loads(blobs["meta.json"])
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CorruptEntry("meta.json is not this format's metadata")
    arena_bytes, const_bytes = _int(meta["arena_bytes"]), _int(meta["const_bytes"])
    if not 0 <= const_bytes <= arena_bytes <= MAX_ARENA_BYTES:
        raise CorruptEntry(f"constant region of {const_bytes} bytes in an arena of {arena_bytes}")
    size = consts.size if isinstance(consts, BlockChecked) else len(consts)
    if size != const_bytes:
        raise CorruptEntry(f"{CONSTS} holds {size} bytes, the program's constants {const_bytes}")
    arena = aligned_arena(arena_bytes)
    if isinstance(consts, BlockChecked):
        try:
            consts.read_into(arena[1][:const_bytes], CONSTS)
        except CheckFailed as exc:
            raise CorruptEntry(str(exc)) from None
    else:
        arena[1][:const_bytes] = np.frombuffer(consts, np.uint8)
    const_blob = arena[1][:const_bytes]
    return decode(blobs, num_nodes, const_blob), arena


def decode(blobs: dict[str, Any], num_nodes: int, const_blob: np.ndarray | None = None) -> Program:
    """The program of a verified entry, bounds-checked (``num_nodes``: nodes of the prepared graph;
    ``const_blob``: the constants, by default ``blobs["consts.bin"]``)."""
    meta = json.loads(blobs["meta.json"])
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CorruptEntry("meta.json is not this format's metadata")
    if const_blob is None:
        const_blob = np.frombuffer(blobs[CONSTS], dtype=np.uint8)
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
        const_blob=const_blob,
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
            or not all(isinstance(n, str) and n in KERNELS for n in names[1:])):
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
