"""CUDA semantics on the CPU: the emitted ``.cu`` (or ``.hip``) compiled UNCHANGED by g++ against
the project's header ``cuda_emu.h`` into a shared library, and launched through ctypes.  The
scheduler behind the header (``emu_runtime.cc``) is built once into its own library and loaded
first (its symbols global), so each program's build compiles only the program and CUDA's names.

:func:`build` compiles (cached by the hash of source, header and flags for the life of the
process); :class:`Library.launch` runs one grid under a scheduling :class:`Policy`.
:mod:`.fake_cupy` puts the CuPy surface the runner uses on top of this, so
:class:`rammer.backends.gpu.runner.CupyRunner` itself runs here.

What the emulation models and what it cannot is in the header's opening comment and in
``docs/gpu.md``.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["HEADER", "EmulatorError", "Policy", "Library", "build", "kernel_params", "available"]

FOLDER = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(FOLDER, "cuda_emu.h")
#: The scheduler, fibers and diagnostics: built once into its own library, loaded before any program.
RUNTIME = os.path.join(FOLDER, "emu_runtime.cc")
ABI = os.path.join(FOLDER, "emu_abi.h")
CXX = os.environ.get("RAMMER_EMU_CXX", "g++")
FLAGS = ("-std=c++20", "-O1", "-fno-strict-aliasing", "-ffp-contract=off", "-shared", "-fPIC", "-w")


class EmulatorError(RuntimeError):
    """The emulated launch failed: deadlock, divergence, out-of-bounds access or the watchdog."""


@dataclass(frozen=True)
class Policy:
    """How the serial grid picks the next block: ``order`` (0, 1, 2, ...), ``random`` (seeded) or
    ``starve`` (block ``victim`` runs only when no other block can move; it also starts last)."""

    kind: str = "order"
    seed: int = 0
    victim: int = -1
    #: Polls (spins) allowed with no progress anywhere before the watchdog stops the grid.
    max_polls: int = 2_000_000

    def code(self) -> int:
        return {"order": 0, "random": 1, "starve": 2}[self.kind]


class _Buffer(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("start", ctypes.c_size_t), ("bytes", ctypes.c_uint64)]


class _Config(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_int), ("block", ctypes.c_int), ("policy", ctypes.c_int), ("seed", ctypes.c_int),
                ("victim", ctypes.c_int), ("resident", ctypes.c_int), ("warp", ctypes.c_int),
                ("nbuffers", ctypes.c_int), ("buffers", ctypes.POINTER(_Buffer)), ("max_polls", ctypes.c_longlong)]


def available() -> str:
    """'' when g++ is here, else why not."""
    return "" if shutil.which(CXX) else f"{CXX} is not on PATH (the CUDA emulator compiles with it)"


_KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)')


def kernel_params(source: str) -> dict[str, list[str]]:
    """Per ``extern "C" __global__`` kernel of ``source``, its parameter names in order."""
    out = {}
    for m in _KERNEL_RE.finditer(source):
        params = [p.strip() for p in m.group(2).split(",") if p.strip()]
        out[m.group(1)] = [re.findall(r"\w+", p)[-1] for p in params]
    return out


_CACHE: dict[str, Library] = {}
_CACHE_LOCK = threading.Lock()
#: One emulated launch at a time in the process: a launch installs its own SIGSEGV/SIGBUS handlers
#: (the guard pages) and restores the previous ones after.
_LAUNCH_LOCK = threading.Lock()
_FOLDER: list[str] = []


def _cache_dir() -> str:
    if not _FOLDER:
        folder = os.environ.get("RAMMER_EMU_CACHE")
        if not folder:  # a private folder, removed when the process ends
            folder = tempfile.mkdtemp(prefix="rammer-emu-")
            atexit.register(shutil.rmtree, folder, True)
        os.makedirs(folder, exist_ok=True)
        _FOLDER.append(folder)
    return _FOLDER[0]


def _sources_digest() -> bytes:
    digest = hashlib.sha256()
    for path in (HEADER, ABI, RUNTIME):
        with open(path, "rb") as f:
            digest.update(f.read())
    digest.update(" ".join(FLAGS).encode())
    return digest.digest()


_RUNTIME: list[ctypes.CDLL] = []


def _compile(cmd: list[str], out: str, what: str) -> None:
    tmp = out + f".{os.getpid()}.tmp"
    proc = subprocess.run([*cmd, "-o", tmp], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise EmulatorError(f"g++ could not build {what}:\n{proc.stderr[:3000]}")
    os.replace(tmp, out)


def _runtime() -> None:
    """Build (once per cache folder) and load the runtime library, its symbols global so programs
    resolve against it.  Called with the cache lock held."""
    if _RUNTIME:
        return
    so = os.path.join(_cache_dir(), f"runtime-{_sources_digest().hex()[:24]}.so")
    if not os.path.exists(so):
        _compile([CXX, *FLAGS, "-I", FOLDER, RUNTIME], so, "the emulator's runtime")
    _RUNTIME.append(ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL))


def build(source: str, suffix: str = ".cu") -> Library:
    """Compile ``source`` unchanged with the emulator header; cached by content for this process
    (and on disk under ``$RAMMER_EMU_CACHE`` when set).  Raises :class:`EmulatorError` when g++
    fails (its first errors in the message)."""
    why = available()
    if why:
        raise EmulatorError(why)
    key = hashlib.sha256(_sources_digest() + source.encode()).hexdigest()[:24]
    with _CACHE_LOCK:
        lib = _CACHE.get(key)
        if lib is not None:
            return lib
        _runtime()
        kernels = kernel_params(source)
        if not kernels:
            raise EmulatorError('no extern "C" __global__ kernel in the source')
        folder = _cache_dir()
        so = os.path.join(folder, f"{key}.so")
        if not os.path.exists(so):
            src = os.path.join(folder, f"{key}{suffix}")
            wrapper = os.path.join(folder, f"{key}.cc")
            with open(src, "w", encoding="utf-8") as f:
                f.write(source)  # byte for byte what the backend emitted
            with open(wrapper, "w", encoding="utf-8") as f:
                f.write(f'#include "{src}"\n' + "".join(f"EMU_EXPORT({k})\n" for k in kernels))
            _compile([CXX, *FLAGS, "-x", "c++", "-include", HEADER, "-I", FOLDER, wrapper], so,
                     "the program against the emulator header")
        lib = Library(so, kernels)
        _CACHE[key] = lib
        return lib


class Library:
    """One compiled program; :meth:`launch` runs a kernel of it (one launch at a time in the process)."""

    def __init__(self, path: str, kernels: dict[str, list[str]]) -> None:
        self.path, self.params = path, kernels
        self.dll = ctypes.CDLL(path)
        self.dll.emu_shared_bytes.restype = ctypes.c_ulong
        self.signatures: dict[str, list[str]] = {}
        for k in kernels:
            fn = getattr(self.dll, f"emu_signature_{k}")
            fn.restype = ctypes.c_char_p
            self.signatures[k] = fn().decode().split(",") if kernels[k] else []

    @property
    def shared_bytes(self) -> int:
        return int(self.dll.emu_shared_bytes())

    def launch(self, kernel: str, grid: int, block: int, args: Sequence[Any],
               buffers: Sequence[tuple[str, int, int]] = (), policy: Policy = Policy(), resident: int = 0,
               warp: int = 32) -> None:
        """Run ``kernel`` on ``grid`` blocks of ``block`` threads; ``args`` are ctypes objects, one
        per parameter (their addresses are passed); ``buffers`` are ``(name, start, bytes)``
        ranges named in diagnostics; at most ``resident`` blocks live at once (0: all).
        Raises :class:`EmulatorError` with the emulator's diagnosis."""
        argv = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.addressof(a) for a in args])
        bufs = (_Buffer * max(len(buffers), 1))(*[_Buffer(n.encode(), s, b) for n, s, b in buffers])
        cfg = _Config(grid, block, policy.code(), policy.seed, policy.victim, resident, warp, len(buffers),
                      ctypes.cast(bufs, ctypes.POINTER(_Buffer)), policy.max_polls)
        err = ctypes.create_string_buffer(4096)
        fn = getattr(self.dll, f"emu_launch_{kernel}")
        with _LAUNCH_LOCK:
            rc = fn(ctypes.byref(cfg), argv, err, len(err))
        if rc != 0:
            raise EmulatorError(f"{kernel} on {grid} blocks x {block} threads: {err.value.decode(errors='replace')}")
