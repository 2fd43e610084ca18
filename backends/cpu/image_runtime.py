"""Loading a native image (:mod:`.native_image`) and running its driver, without numba.

:class:`NativeImage` opens the shared library with ctypes (after checking its SHA-256 against the
metadata saved with it) and gives the executable what the numba path gives it: the table of entry
addresses and a driver with :func:`.driver.run`'s arguments.  ``run`` releases the GIL while the
vEUs walk (ctypes does so around foreign calls); ``run_holding_gil`` keeps it, as
:func:`.driver.run_holding_gil` does, through a ``PyDLL`` handle of the same library.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
from typing import Any

import numpy as np

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_ARGTYPES = [_PTR, _I64, _PTR, _I64, _PTR, _I64, _PTR, _PTR, _PTR, _I64, _PTR, _PTR, _I64, _PTR, _PTR, _PTR,
             _I64, _PTR]


class ImageUnusable(Exception):
    """The image files are missing, altered or do not load: the numba path runs instead."""


def _function(lib: ctypes.CDLL) -> Any:
    fn = lib.rammer_image_run
    fn.argtypes = _ARGTYPES
    fn.restype = _I64
    return fn


class NativeImage:
    """A loaded image: ``library`` is the path of its shared library, ``meta`` its metadata."""

    def __init__(self, library: str, meta: dict[str, Any]):
        self.path = library
        self.meta = meta
        mode = getattr(os, "RTLD_NOW", 2) | getattr(os, "RTLD_LOCAL", 0)
        try:
            self._lib = ctypes.CDLL(library, mode=mode)
            self._pylib = ctypes.PyDLL(library, mode=mode)
        except OSError as exc:
            raise ImageUnusable(f"cannot load {library}: {exc}") from None
        self._blas = self._bind_blas(meta.get("blas"))
        self._run = _function(self._lib)
        self._run_gil = _function(self._pylib)
        self._addresses: dict[str, int] = {}
        for name, symbol in meta["entries"].items():
            try:
                self._addresses[name] = ctypes.cast(self._lib[symbol], ctypes.c_void_p).value or 0
            except AttributeError:
                raise ImageUnusable(f"{library} lacks the entry of {name}") from None

    def _bind_blas(self, blas: dict[str, str] | None) -> ctypes.CDLL | None:
        """Point the image's ``rammer_cpu_sgemm`` at the BLAS the kernels were built for, set to one
        thread (as :mod:`.blas` does: the vEUs already occupy the cores)."""
        if not blas:
            return None
        try:
            lib = ctypes.CDLL(blas["path"])
            sgemm = ctypes.cast(lib[blas["sgemm"]], ctypes.c_void_p).value
            threads = lib[blas["threads"]]
        except (OSError, AttributeError, KeyError, TypeError) as exc:
            raise ImageUnusable(f"the BLAS library of the image: {exc}") from None
        threads.argtypes = [ctypes.c_int]
        threads(1)
        setter = self._lib.rammer_image_set_sgemm
        setter.argtypes = [_PTR]
        setter(sgemm)
        return lib

    @classmethod
    def open(cls, folder: str, library_name: str, meta_name: str) -> NativeImage:
        """The image saved in ``folder``; :class:`ImageUnusable` if it is missing or altered."""
        try:
            with open(os.path.join(folder, meta_name), "rb") as f:
                meta = json.loads(f.read())
            path = os.path.join(folder, library_name)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except (OSError, ValueError) as exc:
            raise ImageUnusable(f"{type(exc).__name__}: {exc}") from None
        if not isinstance(meta, dict) or meta.get("sha256") != digest or not isinstance(meta.get("entries"), dict):
            raise ImageUnusable("the library does not match its metadata")
        return cls(path, meta)

    def covers(self, kernel_names: list[str]) -> bool:
        return all(name in self._addresses for name in kernel_names[1:])

    def entry_table(self, kernel_names: list[str]) -> np.ndarray:
        """Entry addresses by kernel id, as :func:`.codegen.entry_table` gives them."""
        return np.array([0] + [self._addresses[name] for name in kernel_names[1:]], dtype=np.int64)

    @staticmethod
    def bind(arena: np.ndarray, X: np.ndarray, R: np.ndarray, T: np.ndarray, starts: np.ndarray, ends: np.ndarray,
             entries: np.ndarray, counters: np.ndarray, status: np.ndarray, cores: np.ndarray, allowed: np.ndarray,
             max_sleeps: int, trace: np.ndarray | None = None) -> tuple:
        """:func:`.driver.run`'s arguments as the C driver takes them (addresses and sizes).  The
        caller keeps the arrays alive while the bound arguments are used."""
        for a, dtype in ((X, np.int64), (R, np.float32), (T, np.int64), (starts, np.int64), (ends, np.int64),
                         (entries, np.int64), (counters, np.int64), (status, np.int64), (cores, np.int64),
                         (allowed, np.int64)):
            if a.dtype != dtype or not a.flags.c_contiguous:
                raise ValueError("the driver's tables must be C-contiguous arrays of their dtype")
        if trace is not None and (trace.dtype != np.int64 or not trace.flags.c_contiguous):
            raise ValueError("a trace must be a C-contiguous int64 array")
        return (arena.ctypes.data, arena.shape[0], X.ctypes.data, X.shape[0], R.ctypes.data, R.shape[0],
                T.ctypes.data, starts.ctypes.data, ends.ctypes.data, starts.shape[0], entries.ctypes.data,
                counters.ctypes.data, counters.shape[0], status.ctypes.data, cores.ctypes.data, allowed.ctypes.data,
                int(max_sleeps), None if trace is None else trace.ctypes.data)

    def run(self, *bound: Any) -> int:
        """One launch (the arguments from :meth:`bind`), the GIL released; the worst vEU status."""
        return int(self._run(*bound))

    def run_holding_gil(self, *bound: Any) -> int:
        """:meth:`run` keeping the GIL (short 1-vEU launches of several callers, as the numba path)."""
        return int(self._run_gil(*bound))
