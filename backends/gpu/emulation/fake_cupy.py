"""A stand-in ``cupy`` module over the CPU emulator: exactly the CuPy surface
:class:`rammer.backends.gpu.runner.CupyRunner` uses, so the runner itself (argument layout,
epochs, counter resets, co-residency checks, locking) executes without a GPU.

Faithful where it matters to the runner:

- Kernel arguments are checked against the kernel's parameter types as CuPy would pass them: an
  ndarray is a pointer (its dtype must match the pointee), ``numpy.int32`` is 4 bytes, and a
  Python ``int`` goes as 8 bytes, ``float`` as a double (a runner passing a bare ``int`` to an
  ``int`` parameter is a bug on a GPU and an error here).
- Device memory has a guard page after every allocation: an out-of-bounds access in the kernel
  is caught by the emulator and named.
- ``ndarray.__setitem__`` raises: on a real GPU it launches an elementwise kernel that needs
  NVRTC and the CUDA headers (``cupy[ctk]``), which the runner must not depend on.
- A cooperative launch of more blocks than the emulated device holds is shrunk with CuPy's warning
  (``cooperative_too_large = "shrink"``, what CuPy 13+ does) or fails with CUDA's error name
  (``"error"``, the driver's answer); a plain launch of such a grid runs with only that many blocks resident, so it
  deadlocks as on a GPU (and the emulator names the deadlock instead of hanging).

Use: ``fake = make_cupy(sms=4, blocks_per_sm=2)``, then ``sys.modules["cupy"] = fake``.
"""

from __future__ import annotations

import ctypes
import mmap
import time
import types
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import EmulatorError, Policy, build

__all__ = ["make_cupy", "ndarray", "CUDADriverError"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_PAGE = mmap.PAGESIZE


class CUDADriverError(RuntimeError):
    """What CuPy raises for a failed driver call (the message starts with CUDA's error name)."""


class _Allocation:
    """``nbytes`` of 'device' memory ending exactly at a PROT_NONE guard page."""

    def __init__(self, nbytes: int) -> None:
        nbytes = max(int(nbytes), 1)
        pages = -(-nbytes // _PAGE)
        self.total = (pages + 2) * _PAGE
        base = _libc.mmap(None, self.total, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                          -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise MemoryError(f"out of emulated device memory ({nbytes} bytes)")
        self.base = base
        _libc.mprotect(base, _PAGE, 0)
        _libc.mprotect(base + (pages + 1) * _PAGE, _PAGE, 0)
        span = -(-nbytes // 8) * 8
        self.start = base + (pages + 1) * _PAGE - span
        self.nbytes = span
        weakref.finalize(self, _libc.munmap, base, self.total)


class _Pointer:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class ndarray:
    """Device memory as a numpy view of a guarded allocation."""

    def __init__(self, shape: Any, dtype: Any = np.float32, _view: np.ndarray | None = None,
                 _alloc: _Allocation | None = None) -> None:
        if _view is None:
            dtype = np.dtype(dtype)
            count = int(np.prod(shape))
            _alloc = _Allocation(count * dtype.itemsize)
            raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(_alloc.start)
            _view = np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)
        self._a, self._alloc = _view, _alloc

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    ndim = property(lambda self: self._a.ndim)
    data = property(lambda self: _Pointer(self._a.ctypes.data))

    def __len__(self) -> int:
        return len(self._a)

    def __getitem__(self, key: Any) -> ndarray:
        return ndarray(None, _view=self._a[key], _alloc=self._alloc)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise RuntimeError("cupy stand-in: slice assignment launches a CuPy elementwise kernel (it needs NVRTC and "
                           "the CUDA headers at run time); use ndarray.set()")

    def set(self, arr: Any, stream: Any = None) -> None:
        arr = np.asarray(arr)
        if not self._a.flags.c_contiguous:
            raise RuntimeError("cupy stand-in: set() needs a contiguous array")
        if arr.dtype != self._a.dtype:
            raise TypeError(f"cupy stand-in: set() of {arr.dtype} into {self._a.dtype}")
        if arr.shape != self._a.shape:
            raise ValueError(f"cupy stand-in: set() of shape {arr.shape} into {self._a.shape}")
        self._a[...] = arr

    def get(self, stream: Any = None) -> np.ndarray:
        return np.array(self._a, copy=True)


def _asarray(a: Any, dtype: Any = None) -> ndarray:
    host = np.ascontiguousarray(a, dtype=dtype)
    out = ndarray(host.shape, host.dtype)
    out.set(host)
    return out


def _zeros(shape: Any, dtype: Any = np.float32) -> ndarray:
    return ndarray(shape, dtype)  # fresh anonymous pages are zero (a memset on a GPU)


_KIND = {np.dtype(np.float32): "f4", np.dtype(np.float64): "f8", np.dtype(np.int32): "i4",
         np.dtype(np.int64): "i8", np.dtype(np.uint32): "u4", np.dtype(np.uint64): "u8"}
_CTYPE = {"f4": ctypes.c_float, "f8": ctypes.c_double, "i4": ctypes.c_int32, "i8": ctypes.c_int64,
          "u4": ctypes.c_uint32, "u8": ctypes.c_uint64}


class _Kernel:
    def __init__(self, module: _RawModule, name: str) -> None:
        self.module, self.name = module, name
        self.lib = module.lib
        if name not in self.lib.signatures:
            raise CUDADriverError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name}")
        self.kernel = _Pointer(id(self))

    num_regs = property(lambda self: 32)  # unknown on the CPU: a typical figure
    shared_size_bytes = property(lambda self: self.lib.shared_bytes)
    max_threads_per_block = property(lambda self: 1024)

    def _marshal(self, args: Sequence[Any]) -> tuple[list[Any], list[tuple[str, int, int]]]:
        sig, names = self.lib.signatures[self.name], self.lib.params[self.name]
        if len(args) != len(sig):
            raise TypeError(f"{self.name} takes {len(sig)} arguments, got {len(args)}")
        values, buffers = [], []
        for i, (a, kind, pname) in enumerate(zip(args, sig, names)):
            if isinstance(a, ndarray):
                if not kind.startswith("p:"):
                    raise TypeError(f"{self.name} argument {i} ({pname}) is {kind}, got an array")
                if kind != "p:v" and _KIND.get(a.dtype) != kind[2:]:
                    raise TypeError(f"{self.name} argument {i} ({pname}) points to {kind[2:]}, got a {a.dtype} array")
                values.append(ctypes.c_void_p(a.data.ptr))
                buffers.append((pname, a.data.ptr, a.nbytes))
                continue
            if kind.startswith("p:"):
                raise TypeError(f"{self.name} argument {i} ({pname}) is a pointer, got {type(a).__name__}")
            if isinstance(a, (bool, np.bool_)):
                got = "i1"
            elif isinstance(a, int):  # CuPy passes a Python int as a 64-bit integer
                got = "i8"
            elif isinstance(a, float):  # ... and a Python float as a double
                got = "f8"
            elif isinstance(a, np.generic):
                got = _KIND.get(a.dtype, str(a.dtype))
            else:
                raise TypeError(f"{self.name} argument {i} ({pname}): unsupported {type(a).__name__}")
            if got != kind:
                raise TypeError(f"{self.name} argument {i} ({pname}) takes {kind} but CuPy would pass {got} "
                                f"({type(a).__name__}); pass numpy.{ {'i4': 'int32', 'f4': 'float32'}.get(kind, kind)}")
            values.append(_CTYPE[kind](a))
        return values, buffers

    def __call__(self, grid: tuple, block: tuple, args: Sequence[Any], shared_mem: int = 0) -> None:
        cp = self.module.cp
        blocks, threads = int(np.prod(grid)), int(np.prod(block))
        if threads > 1024:
            raise CUDADriverError("CUDA_ERROR_INVALID_VALUE: more than 1024 threads per block")
        values, buffers = self._marshal(args)
        resident = cp._resident(threads)
        if self.module.cooperative and blocks > resident:
            if cp.cooperative_too_large == "shrink":  # what CuPy 13+ does (cupy/cuda/function.pyx)
                warnings.warn(f"The grid size will be reduced from {blocks} to {resident}, as the specified grid "
                              f"size exceeds the limit.")
                blocks = resident
            else:  # the driver's answer to cuLaunchCooperativeKernel (older CuPy)
                raise CUDADriverError(f"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: too many blocks in cooperative "
                                      f"launch ({blocks} > {resident})")
        cp.launches.append((self.name, blocks, threads, tuple(a.value for a in values if not
                                                               isinstance(a, ctypes.c_void_p))))
        self.lib.launch(self.name, blocks, threads, values, buffers, cp.policy, resident, cp.warp)


class _RawModule:
    def __init__(self, cp: Any, code: str | None = None, options: tuple = (), backend: str = "nvrtc",
                 enable_cooperative_groups: bool = False, **_: Any) -> None:
        if code is None:
            raise TypeError("cupy stand-in: RawModule needs code=")
        if enable_cooperative_groups and cp.cuda.runtime.is_hip:
            raise RuntimeError("cupy stand-in: cooperative groups are not supported on HIP")
        self.cp, self.cooperative = cp, enable_cooperative_groups
        self.lib = build(code, ".hip" if cp.cuda.runtime.is_hip else ".cu")

    def get_function(self, name: str) -> _Kernel:
        return _Kernel(self, name)


class _Event:
    """``cupy.cuda.Event`` on the host clock: emulated launches are synchronous, so the host's time
    between two records is the program's (an emulator's time, never a GPU's)."""

    def __init__(self) -> None:
        self.when = 0.0

    def record(self) -> None:
        self.when = time.perf_counter()

    def synchronize(self) -> None:
        pass


def make_cupy(sms: int = 16, blocks_per_sm: int = 8, hip: bool = False, policy: Policy = Policy(),
              name: str = "rammer CPU emulator") -> types.ModuleType:
    """A stand-in ``cupy`` module for a device of ``sms`` multiprocessors holding
    ``blocks_per_sm`` blocks each (also bounded by 2048 threads per multiprocessor).  Its
    ``policy`` (a :class:`~rammer.backends.gpu.emulation.Policy`) and ``launches`` (name, blocks,
    threads, scalar arguments of every launch) can be set and read by tests."""
    cp = types.ModuleType("cupy")
    cp.__file__ = __file__
    cp.__version__ = "0+rammer.emulator"
    cp.ndarray, cp.int32, cp.float32, cp.int64 = ndarray, np.int32, np.float32, np.int64
    cp.asarray, cp.zeros = _asarray, _zeros
    cp.asnumpy = lambda a: a.get() if isinstance(a, ndarray) else np.asarray(a)
    cp.policy, cp.launches, cp.warp = policy, [], 64 if hip else 32
    #: A cooperative launch larger than the device: "shrink" (CuPy 13+: warn, launch fewer blocks) or
    #: "error" (the driver's CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).
    cp.cooperative_too_large = "shrink"
    props = {"name": name.encode(), "multiProcessorCount": sms, "maxBlocksPerMultiProcessor": blocks_per_sm,
             "maxThreadsPerMultiProcessor": 2048, "regsPerMultiprocessor": 65536,
             "sharedMemPerMultiprocessor": 228 * 1024, "warpSize": cp.warp}

    def per_sm(threads: int) -> int:
        return max(min(blocks_per_sm, 2048 // max(threads, 1)), 0)

    cp._resident = lambda threads: per_sm(threads) * sms
    runtime = types.SimpleNamespace(
        is_hip=hip, getDeviceCount=lambda: 1, getDevice=lambda: 0, deviceSynchronize=lambda: None,
        getDeviceProperties=lambda dev: dict(props))
    driver = types.SimpleNamespace(
        CUDADriverError=CUDADriverError,
        occupancyMaxActiveBlocksPerMultiprocessor=lambda func, threads, smem: per_sm(threads))
    stream = types.SimpleNamespace(synchronize=lambda: None)
    cp.cuda = types.SimpleNamespace(runtime=runtime, driver=driver, Device=lambda dev=0: types.SimpleNamespace(
        id=dev, synchronize=lambda: None), get_current_stream=lambda: stream, Event=_Event,
        get_elapsed_time=lambda start, end: (end.when - start.when) * 1000.0)
    cp.RawModule = lambda **kw: _RawModule(cp, **kw)
    cp.EmulatorError = EmulatorError
    return cp
