"""On-disk cache of compiled CPU programs.

Key: a hash of the graph (nodes, attributes, shapes, weights), the backend
options that change the program (vEUs, policy, pinning) and the versions
that change the code (rammer, numpy, numba, llvmlite, the sources of rammer
and of the CPU backend).  An entry is a folder (see :mod:`.cache_entry`)
whose every file is covered by a SHA-256 manifest and whose indices are
bounds-checked on load.

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
from typing import Any, Callable

import numpy as np

from rammer.errors import FeedError
from rammer.ir import Graph
from rammer.lower.batching import DEFAULT_BATCH_ROWS

from . import cache_entry
from .cache_entry import FORMAT, CorruptEntry
from .compiled import Program
from .runtime import CpuExecutable

__all__ = ["cache_root", "cache_key", "graph_digest", "compile_cached", "CorruptEntry", "CacheUnavailable"]

log = logging.getLogger("rammer")

_TMP = ".tmp-"
_TRASH = ".trash-"
#: (cache folder, kind of failure) pairs already warned about in this process.
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


class CacheUnavailable(Exception):
    """The cache folder cannot be used (read-only, full, not a folder, ...)."""


def cache_root(cache_dir: str | None) -> str:
    root = cache_dir or os.environ.get("RAMMER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rammer")
    return os.path.join(root, "cpu", "programs")


@functools.lru_cache(maxsize=1)
def _source_fingerprint() -> str:
    """The sources of rammer and of this backend: graph passes and lowering live in both."""
    import rammer

    h = hashlib.sha256()
    folders = [os.path.dirname(os.path.abspath(rammer.__file__)), os.path.dirname(os.path.abspath(__file__))]
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "**", "*.py"), recursive=True)):
            h.update(os.path.relpath(path, folder).encode())
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


def cache_key(graph: Graph, num_veus: int, policy: str, pin: bool, batch_rows: int = DEFAULT_BATCH_ROWS) -> str:
    import llvmlite
    import numba

    from rammer import __version__

    from .machine_code import CPU_NAME
    from .ukernel import MR, NR

    h = hashlib.sha256()
    h.update(graph_digest(graph).encode())
    # The graph's name is in the report (and the emitted program), so it is part of the entry.
    h.update(repr(graph.name).encode())
    h.update(json.dumps({"veus": num_veus, "policy": policy, "pin": pin, "batch_rows": batch_rows,
                         "rammer": __version__,
                         "numpy": np.__version__, "numba": numba.__version__, "llvmlite": llvmlite.__version__,
                         "sources": _source_fingerprint(), "format": FORMAT,
                         # scratch sizes depend on the micro-kernel chosen for this CPU
                         "cpu": CPU_NAME, "ukernel": [MR, NR]}, sort_keys=True).encode())
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


def load(folder: str, num_nodes: int) -> tuple[Program, bytes]:
    """The verified program of an entry and its schedules' JSON; :class:`CorruptEntry` if anything is off."""
    key = os.path.basename(folder)
    try:
        if os.path.islink(folder) or not os.path.isdir(folder):
            raise CorruptEntry("not a folder")
        blobs = cache_entry.read_verified(folder, key)
        return cache_entry.decode(blobs, num_nodes), blobs["schedules.json"]
    except CorruptEntry:
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, json.JSONDecodeError) as exc:
        raise CorruptEntry(f"{type(exc).__name__}: {exc}") from None


def save(folder: str, program: Program, schedules: list | None = None) -> None:
    """Write an entry atomically; :class:`CacheUnavailable` when the cache folder cannot take it."""
    parent = os.path.dirname(folder)
    files = cache_entry.encode(program, schedules)
    files[cache_entry.MANIFEST] = cache_entry.manifest(os.path.basename(folder), files)
    try:
        os.makedirs(parent, exist_ok=True)
        _sweep(parent)
        tmp = os.path.join(parent, f"{_TMP}{_owner_tag()}-{secrets.token_hex(4)}")
        os.mkdir(tmp, 0o755)
    except OSError as exc:
        raise CacheUnavailable(f"{type(exc).__name__}: {exc}") from None
    try:
        # the manifest last: a folder without one is never accepted
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
    the run is retried on the rebuilt program."""

    def __init__(self, graph: Graph, program: Program, max_wait_s: float, schedules_loader: Callable[[], list],
                 rebuild: Callable[[], Any]):
        super().__init__(graph, program, max_wait_s, schedules_loader=schedules_loader)
        self._rebuild = rebuild
        self._max_wait_s = max_wait_s
        self._proven = False
        self._first_run_lock = threading.Lock()

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
                CpuExecutable.__init__(self, self.graph, compiled.program, self._max_wait_s,
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


def compile_cached(graph: Graph, num_veus: int | None, policy: str, pin: bool, use_cache: bool,
                   cache_dir: str | None, emit_dir: str | None, max_wait_s: float,
                   batch_rows: int = DEFAULT_BATCH_ROWS) -> CpuExecutable:
    from .compiler import compile_program
    from .graph_passes import prepare
    from .scheduling import default_veus

    n = num_veus or default_veus()
    root = cache_root(cache_dir) if use_cache else ""
    folder = os.path.join(root, cache_key(graph, n, policy, pin, batch_rows)) if use_cache else None
    # The program and its executable both see the rewritten graph (host steps name its
    # nodes by index); the passes are deterministic, so a cached program matches too.
    graph = prepare(graph)

    def build() -> Any:
        return compile_program(graph, n, policy, pin, batch_rows=batch_rows)

    def store(compiled: Any) -> str:
        """Save ``compiled``; the status suffix when that was not possible."""
        try:
            save(folder, compiled.program, compiled.schedules)
            return ""
        except CacheUnavailable as exc:
            _warn_once(root, "write", f"the cpu compile cache at {root} cannot be written ({exc}); "
                       "compiling without it")
            return f" (not saved: {exc})"
        except Exception as exc:  # the cache is best-effort: a failure to save never fails the compile
            log.warning("the cpu compile cache could not save '%s' (%s: %s)", graph.name, type(exc).__name__, exc)
            return f" (not saved: {type(exc).__name__})"

    status = "off"
    if folder:
        status = "miss"
        if not emit_dir and os.path.lexists(folder):
            exe = None
            try:
                program, schedules_json = load(folder, len(graph.nodes))

                def rebuild() -> Any:
                    _remove(folder)
                    compiled = build()
                    store(compiled)
                    return compiled

                exe = CachedExecutable(graph, program, max_wait_s, _schedules_from(schedules_json), rebuild)
            except Exception as exc:  # any failure to load an entry costs a compile, never the model
                reason = f"{type(exc).__name__}: {exc}" if not isinstance(exc, CorruptEntry) else str(exc)
                log.warning("the cpu compile cache entry %s is unusable (%s); rebuilding it", folder, reason)
                _remove(folder)
                status = f"rebuilt (corrupt entry: {reason})"
            if exe is not None:
                exe.cache_status = "hit"
                return exe
    compiled = build()
    if folder and not (emit_dir and os.path.isdir(folder)):  # --emit compiles anew; a saved entry stays
        status += store(compiled)
    if emit_dir:
        from .emit import emit

        emit(emit_dir, compiled)
    exe = CpuExecutable(graph, compiled.program, max_wait_s, schedules=compiled.schedules)
    exe.cache_status = status
    exe.compiled = compiled
    return exe
