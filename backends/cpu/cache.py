"""On-disk cache of compiled CPU programs.

Key: what identifies the graph, the backend options that change the program
(vEUs, policy, pinning) and the versions that change the code (rammer, numpy,
numba, llvmlite, the sources of rammer and of the CPU backend).  What
identifies the graph is, for a model given as a file, bytes or ModelProto, its
:func:`rammer.model_key.model_key` (a digest of its bytes and the import
settings, known without importing it), so that a hit skips the ONNX frontend
and the graph passes; for an IR graph, a hash of the graph itself (nodes,
attributes, shapes, weights).  An entry is a folder (see :mod:`.cache_entry`)
whose every file is covered by a manifest and whose indices are bounds-checked
on load; it holds what the executable needs of the graph (inputs, outputs, the
host steps' nodes), and the whole graph is imported only if something asks for
it later (a 1-vEU lane for concurrent callers, a fork()ed child, a rebuild).

The cache is best-effort.  Whatever goes wrong with it costs a compile,
never a model:

* a corrupt, truncated, edited or half-written entry, or one whose loading
  or first run fails, is logged, removed and rebuilt;
* a cache folder that cannot be written (read-only, disk full, a file where
  a folder should be) is logged once per folder and the model is compiled
  without saving;
* concurrent processes compiling the same model each write their own
  temporary folder; the first rename wins and the others drop theirs.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import logging
import os
import secrets
import shutil
import socket
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from rammer.atomic_file import atomic_write
from rammer.errors import FeedError, RammerError
from rammer.ir import Graph
from rammer.ir_codec import CodecError, decode_graph, encode_graph
from rammer.lower.batching import DEFAULT_BATCH_ROWS

from . import cache_entry, toolchain
from .cache_entry import FORMAT, CorruptEntry
from .compiled import HostStep, Program
from .image_runtime import ImageUnusable, NativeImage
from .runtime import CpuExecutable

#: A cache entry's native image (native_image.py): the shared library and its metadata.
IMAGE_LIBRARY = "native.so"
IMAGE_META = "native.json"

__all__ = ["cache_root", "cache_key", "source_key", "graph_digest", "compile_cached", "load_cached", "CorruptEntry",
           "CacheUnavailable"]

log = logging.getLogger("rammer")

_TMP = ".tmp-"
_TRASH = ".trash-"
#: (cache folder, kind of failure) pairs already warned about in this process.
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


class CacheUnavailable(Exception):
    """The cache folder cannot be used (read-only, full, not a folder, ...)."""


def cache_base(cache_dir: str | None) -> str:
    """The folder of rammer's caches (``cache_dir``, ``$RAMMER_CACHE_DIR`` or ``~/.cache/rammer``)."""
    return cache_dir or os.environ.get("RAMMER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rammer")


def cache_root(cache_dir: str | None) -> str:
    return os.path.join(cache_base(cache_dir), "cpu", "programs")


@functools.lru_cache(maxsize=1)
def _source_fingerprint() -> str:
    """The sources of rammer and of this backend: graph passes and lowering live in both.

    Reading every source (about 200 files) took 0.04-0.14 s of each process's first cache hit; the
    fingerprint is remembered under the cache folder by the files' names, sizes and modification
    times, so a process whose sources are unchanged only lists them."""
    import rammer

    folders = [os.path.dirname(os.path.abspath(rammer.__file__)), os.path.dirname(os.path.abspath(__file__))]
    paths = [(folder, path) for folder in folders
             for path in sorted(glob.glob(os.path.join(folder, "**", "*.py"), recursive=True))]
    stamp = hashlib.sha256()
    try:
        for _, path in paths:
            st = os.stat(path)
            stamp.update(f"{path}:{st.st_size}:{st.st_mtime_ns};".encode())
    except OSError:
        stamp = None  # type: ignore[assignment]
    memo = (os.path.join(cache_base(None), "cpu", f"sources-{stamp.hexdigest()[:24]}")
            if stamp is not None else None)
    if memo is not None:
        try:
            with open(memo, encoding="ascii") as f:
                found = f.read().strip()
            if len(found) == 16:
                return found
        except (OSError, ValueError):
            pass
    h = hashlib.sha256()
    for folder, path in paths:
        h.update(os.path.relpath(path, folder).encode())
        with open(path, "rb") as f:
            h.update(f.read())
    fingerprint = h.hexdigest()[:16]
    if memo is not None:
        try:
            os.makedirs(os.path.dirname(memo), exist_ok=True)
            with atomic_write(memo, "the sources' fingerprint") as f:
                f.write(fingerprint.encode())
        except (OSError, RammerError):
            pass  # a read-only cache folder: read again next time
    return fingerprint


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
        h.update(f"{t.name!r}:{t.dtype}:{t.shape};".encode())
    for node in graph.nodes:
        # node names too: they appear in the report and in host steps' reasons
        h.update(f"{node.name!r}:{node.domain!r}:{node.op_type!r}:{node.inputs!r}:{node.outputs!r}".encode())
        for k in sorted(node.attrs):
            h.update(repr(k).encode())
            _update_value(h, node.attrs[k])
    for name in sorted(graph.value_info):
        t = graph.value_info[name]
        h.update(f"{name!r}:{t.dtype}:{t.shape};".encode())
    for name in sorted(graph.initializers):
        h.update(repr(name).encode())
        _update_value(h, np.asarray(graph.initializers[name]))
    return h.hexdigest()


def _settings_json(num_veus: int | str, policy: str, pin: bool, batch_rows: int) -> bytes:
    from rammer import __version__

    tools = toolchain.settings(cache_base(None), _source_fingerprint())
    return json.dumps({"veus": num_veus, "policy": policy, "pin": pin, "batch_rows": batch_rows,
                       "rammer": __version__,
                       "numpy": np.__version__, "numba": tools["numba"], "llvmlite": tools["llvmlite"],
                       "sources": _source_fingerprint(), "format": FORMAT,
                       # scratch sizes depend on the micro-kernel chosen for this CPU
                       "cpu": tools["cpu"], "ukernel": tools["ukernel"]}, sort_keys=True).encode()


def cache_key(graph: Graph, num_veus: int | str, policy: str, pin: bool, batch_rows: int = DEFAULT_BATCH_ROWS) -> str:
    """The key of ``graph``'s program (a model given as an IR graph)."""
    h = hashlib.sha256()
    h.update(graph_digest(graph).encode())
    # The graph's name is in the report (and the emitted program), so it is part of the entry.
    h.update(repr(graph.name).encode())
    h.update(_settings_json(num_veus, policy, pin, batch_rows))
    return h.hexdigest()[:32]


def source_key(model_key: str, num_veus: int | str, policy: str, pin: bool,
               batch_rows: int = DEFAULT_BATCH_ROWS) -> str:
    """The key of the program of the model :func:`rammer.model_key.model_key` names (its name and
    nodes follow from its bytes)."""
    h = hashlib.sha256(b"model:" + model_key.encode())
    h.update(_settings_json(num_veus, policy, pin, batch_rows))
    return h.hexdigest()[:32]


# -- the store ---------------------------------------------------------------------------------------

def _warn_once(root: str, kind: str, message: str) -> None:
    with _warned_lock:
        if (root, kind) in _warned:
            return
        _warned.add((root, kind))
    log.warning(message)


def _owner_tag() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _remove(path: str) -> None:
    """Remove an entry (or a stray file where one should be) without racing its readers:
    rename it out of the way first, so the key is free at once."""
    parent = os.path.dirname(path)
    trash = os.path.join(parent, f"{_TRASH}{_owner_tag()}-{secrets.token_hex(4)}")
    try:
        os.rename(path, trash)
    except OSError:
        trash = path
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        try:
            os.unlink(trash)
        except OSError:
            pass


def _sweep(parent: str) -> None:
    """Remove temporary folders left by processes of this host that died while writing."""
    host = socket.gethostname()
    for path in glob.glob(os.path.join(parent, f"{_TMP}*")) + glob.glob(os.path.join(parent, f"{_TRASH}*")):
        tag = os.path.basename(path).split("-")
        # .tmp-<host>-<pid>-<random>; a host name may hold dashes
        if len(tag) < 4 or "-".join(tag[1:-2]) != host or not tag[-2].isdigit():
            continue
        pid = int(tag[-2])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # still alive: maybe still writing
        except ProcessLookupError:
            pass
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)


def host_nodes(program: Program) -> list[int]:
    """The graph's node indices the program runs on the host (what an entry keeps of the graph)."""
    return [s.node_index for s in program.steps if isinstance(s, HostStep)]


def load(folder: str, graph: Graph | None = None) -> tuple[Program, tuple, Graph, bytes]:
    """The verified program of an entry, its arena (constants read in), the graph it runs on
    (``graph`` when given, else the part the entry keeps) and its schedules' JSON;
    :class:`CorruptEntry` if anything is off."""
    key = os.path.basename(folder)
    try:
        if os.path.islink(folder) or not os.path.isdir(folder):
            raise CorruptEntry("not a folder")
        blobs, consts = cache_entry.read_verified(folder, key)
        kept = decode_graph(blobs["graph.json"], blobs["graph.npz"])
        if graph is not None and len(graph.nodes) != len(kept.nodes):
            raise CorruptEntry(f"graph.json has {len(kept.nodes)} nodes, the model {len(graph.nodes)}")
        program, arena = cache_entry.load_program(blobs, consts, len(kept.nodes))
        return program, arena, graph if graph is not None else kept, blobs["schedules.json"]
    except CorruptEntry:
        raise
    except CodecError as exc:
        raise CorruptEntry(f"graph.json: {exc}") from None
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, json.JSONDecodeError) as exc:
        raise CorruptEntry(f"{type(exc).__name__}: {exc}") from None


def save(folder: str, program: Program, schedules: list | None, graph: Graph) -> None:
    """Write an entry atomically; :class:`CacheUnavailable` when the cache folder cannot take it.
    The entry gets a native image of the program's kernels where one can be built
    (:func:`.native_image.build`); a hit then runs without numba."""
    from . import native_image

    parent = os.path.dirname(folder)
    files = cache_entry.encode(program, schedules, encode_graph(graph, keep=host_nodes(program)))
    files[cache_entry.MANIFEST] = cache_entry.manifest(os.path.basename(folder), files)
    try:
        image = native_image.build(program.kernel_names)
    except Exception as exc:  # the image is an optimisation: the numba path stays without it
        log.debug("no native image for '%s': %s: %s", graph.name, type(exc).__name__, exc)
        image = None
    try:
        os.makedirs(parent, exist_ok=True)
        _sweep(parent)
        tmp = os.path.join(parent, f"{_TMP}{_owner_tag()}-{secrets.token_hex(4)}")
        os.mkdir(tmp, 0o755)
    except OSError as exc:
        raise CacheUnavailable(f"{type(exc).__name__}: {exc}") from None
    try:
        # the manifest last: a folder without one is never accepted
        if image is not None:  # before the manifest: an entry is complete once its manifest is there
            cache_entry.write_file(os.path.join(tmp, IMAGE_LIBRARY), image[0])
            cache_entry.write_file(os.path.join(tmp, IMAGE_META), native_image.encode_meta(image[1]))
        for name in cache_entry.FILES + (cache_entry.MANIFEST,):
            cache_entry.write_file(os.path.join(tmp, name), files[name])
        cache_entry.fsync_dir(tmp)
        for attempt in range(3):
            if os.path.lexists(folder) and (os.path.islink(folder) or not os.path.isdir(folder)):
                _remove(folder)  # a stray file where the entry goes
            try:
                os.rename(tmp, folder)
                break
            except OSError:
                if os.path.isdir(folder) and not os.path.islink(folder):
                    return  # another process saved this entry first; the finally drops ours
                if attempt == 2:
                    raise
        tmp = ""
        cache_entry.fsync_dir(parent)
    except OSError as exc:
        raise CacheUnavailable(f"{type(exc).__name__}: {exc}") from None
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _schedules_from(data: bytes) -> Callable[[], list]:
    def load_schedules() -> list:
        from rammer.schedule import Schedule

        return [Schedule.from_dict(d) for d in json.loads(data)]

    return load_schedules


class CachedExecutable(CpuExecutable):
    """An executable whose program came from the cache.  If its first run fails for any
    reason but the caller's feeds, the program is rebuilt (and the entry replaced), and
    the run is retried on the rebuilt program.

    ``graph`` may be the part of the graph the entry keeps; ``load_graph`` then gives the
    whole (prepared) graph when something needs it (a rebuild, a lane, a fork()ed child)."""

    def __init__(self, graph: Graph, program: Program, max_wait_s: float, schedules_loader: Callable[[], list],
                 rebuild: Callable[[], Any], arena: tuple | None = None,
                 load_graph: Callable[[], Graph] | None = None, image: NativeImage | None = None):
        super().__init__(graph, program, max_wait_s, schedules_loader=schedules_loader, arena=arena, image=image)
        self._rebuild = rebuild
        self._max_wait_s = max_wait_s
        self._proven = False
        self._first_run_lock = threading.Lock()
        self._load_graph = load_graph
        self._full: Graph | None = graph if load_graph is None else None
        self._full_lock = threading.Lock()

    def full_graph(self) -> Graph:
        with self._full_lock:
            if self._full is None:
                self._full = self._load_graph()
            return self._full

    @functools.wraps(CpuExecutable.run)
    def run(self, feeds, *args: Any, **kwargs: Any):
        if self._proven:
            return super().run(feeds, *args, **kwargs)
        with self._first_run_lock:
            if self._proven:
                return super().run(feeds, *args, **kwargs)
            try:
                out = super().run(feeds, *args, **kwargs)
            except FeedError:
                raise
            except Exception as exc:
                log.warning("the cached cpu program of '%s' failed on its first run (%s: %s); rebuilding it",
                            self.graph.name, type(exc).__name__, exc)
                compiled = self._rebuild()
                CpuExecutable.__init__(self, self.full_graph(), compiled.program, self._max_wait_s,
                                       schedules=compiled.schedules)
                self.cache_status = f"rebuilt (first run failed: {type(exc).__name__})"
                self.compiled = compiled
                self._proven = True
                self._skip_first_run_check()
                return super().run(feeds, *args, **kwargs)
            self._proven = True
            self._skip_first_run_check()
            return out

    def _skip_first_run_check(self) -> None:
        # Proven: later calls go straight to CpuExecutable.run (an instance attribute shadows
        # this method), without this frame: after an idle spell each Python frame on the call
        # path runs from cold caches.
        self.run = types.MethodType(CpuExecutable.run, self)


class _Store:
    """One cache entry's folder and how to (re)build and save its program."""

    def __init__(self, root: str, folder: str | None, build_graph: Callable[[], Graph], num_veus: int | None,
                 policy: str, pin: bool, batch_rows: int):
        self.root, self.folder = root, folder
        self._build_graph = build_graph
        self.n, self.policy, self.pin, self.batch_rows = num_veus, policy, pin, batch_rows

    def build(self) -> Any:
        from .compiler import compile_program

        return compile_program(self._build_graph(), self.n, self.policy, self.pin, batch_rows=self.batch_rows)

    def store(self, compiled: Any) -> str:
        """Save ``compiled``; the status suffix when that was not possible."""
        graph = self._build_graph()
        try:
            save(self.folder, compiled.program, compiled.schedules, graph)
            return ""
        except CacheUnavailable as exc:
            _warn_once(self.root, "write", f"the cpu compile cache at {self.root} cannot be written ({exc}); "
                       "compiling without it")
            return f" (not saved: {exc})"
        except Exception as exc:  # the cache is best-effort: a failure to save never fails the compile
            log.warning("the cpu compile cache could not save '%s' (%s: %s)", graph.name, type(exc).__name__, exc)
            return f" (not saved: {type(exc).__name__})"

    def rebuild(self) -> Any:
        _remove(self.folder)
        compiled = self.build()
        self.store(compiled)
        return compiled

    def load(self, graph: Graph | None, max_wait_s: float) -> tuple[CachedExecutable | None, str]:
        """The entry's executable (None when there is none or it is unusable) and the status."""
        if not os.path.lexists(self.folder):
            return None, "miss"
        try:
            program, arena, run_graph, schedules_json = load(self.folder, graph)
            exe = CachedExecutable(run_graph, program, max_wait_s, _schedules_from(schedules_json), self.rebuild,
                                   arena=arena, load_graph=None if graph is not None else self._build_graph,
                                   image=_image(self.folder))
        except Exception as exc:  # any failure to load an entry costs a compile, never the model
            reason = f"{type(exc).__name__}: {exc}" if not isinstance(exc, CorruptEntry) else str(exc)
            log.warning("the cpu compile cache entry %s is unusable (%s); rebuilding it", self.folder, reason)
            _remove(self.folder)
            return None, f"rebuilt (corrupt entry: {reason})"
        exe.cache_status = "hit"
        return exe, "hit"


#: Images opened in this process, by their library's path and stat stamp: a second hit on the same
#: entry neither reads and hashes the library again nor loads its BLAS (tens of milliseconds).
_opened: dict[tuple, NativeImage] = {}


def _image(folder: str) -> NativeImage | None:
    """The entry's native image, or None (none saved, altered, or it does not load here): the
    numba driver and kernels run instead."""
    if os.environ.get("RAMMER_NATIVE_IMAGE", "1") == "0":
        return None
    try:
        lib, meta = os.stat(os.path.join(folder, IMAGE_LIBRARY)), os.stat(os.path.join(folder, IMAGE_META))
    except OSError:
        return None
    stamp = (folder, lib.st_ino, lib.st_size, lib.st_mtime_ns, meta.st_ino, meta.st_size, meta.st_mtime_ns)
    found = _opened.get(stamp)
    if found is not None:
        return found
    try:
        found = _opened[stamp] = NativeImage.open(folder, IMAGE_LIBRARY, IMAGE_META)
    except ImageUnusable as exc:
        log.debug("the native image of %s is not used: %s", folder, exc)
        return None
    return found


def _prepared(load_graph: Callable[[], Graph]) -> Callable[[], Graph]:
    """``load_graph`` after the backend's graph passes, computed once."""
    done: list[Graph] = []
    lock = threading.Lock()

    def get() -> Graph:
        from .graph_passes import prepare

        with lock:
            if not done:
                done.append(prepare(load_graph()))
            return done[0]
    return get


def compile_cached(graph: Graph | None, num_veus: int | None, policy: str, pin: bool, use_cache: bool,
                   cache_dir: str | None, emit_dir: str | None, max_wait_s: float,
                   batch_rows: int = DEFAULT_BATCH_ROWS, model_key: str | None = None,
                   load_graph: Callable[[], Graph] | None = None) -> CpuExecutable:
    """The program of ``graph``, from the cache or compiled (and saved).  With ``model_key``
    (what :func:`rammer.model_key.model_key` gave for the model) the entry is looked up by it,
    and ``load_graph`` (which gives ``graph``: pass None for it) is called only on a miss."""
    from .task_rows import default_veus

    n = num_veus or default_veus()
    # Without a vEU count the compiler picks one from the cost model (up to n): a key of its own,
    # so that an explicit count never loads the program chosen for "auto" or the reverse.
    key_veus: int | str = num_veus if num_veus else f"auto-{n}"
    root = cache_root(cache_dir) if use_cache else ""
    if graph is not None:
        given = graph
        load_graph = lambda: given  # noqa: E731
    assert load_graph is not None
    # The program and its executable both see the rewritten graph (host steps name its
    # nodes by index); the passes are deterministic, so a cached program matches too.
    prepared = _prepared(load_graph)
    folder = None
    if use_cache:
        key = source_key(model_key, key_veus, policy, pin, batch_rows) if model_key else \
            cache_key(load_graph(), key_veus, policy, pin, batch_rows)
        folder = os.path.join(root, key)
    entry = _Store(root, folder, prepared, num_veus, policy, pin, batch_rows)

    status = "off"
    if folder:
        status = "miss"
        if not emit_dir:
            exe, status = entry.load(prepared() if graph is not None else None, max_wait_s)
            if exe is not None:
                return exe
    compiled = entry.build()
    if folder and not (emit_dir and os.path.isdir(folder)):  # --emit compiles anew; a saved entry stays
        status += entry.store(compiled)
    if emit_dir:
        from .emit import emit

        emit(emit_dir, compiled)
    exe = CpuExecutable(prepared(), compiled.program, max_wait_s, schedules=compiled.schedules)
    exe.cache_status = status
    exe.compiled = compiled
    return exe
