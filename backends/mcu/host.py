"""The generated C built for this machine (gcc) and loaded with ctypes."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import weakref

import numpy as np

from rammer.errors import BackendUnavailableError, CompileError

from .codegen import CFLAGS, Source


def write_source(src: Source, folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.c"), "w") as f:
        f.write(src.c)
    with open(os.path.join(folder, "model.h"), "w") as f:
        f.write(src.h)


class HostBuild:
    """``model_run`` of the generated source, compiled with the host C compiler."""

    def __init__(self, src: Source, in_bytes: int, out_bytes: int, cc: str | None = None):
        cc = cc or os.environ.get("CC", "gcc")
        if shutil.which(cc) is None:
            raise BackendUnavailableError(f"the mcu backend's host build needs a C compiler ('{cc}' not found); "
                                          f"install gcc or set CC")
        self.folder = tempfile.mkdtemp(prefix="rammer-mcu-")
        # The library stays loaded after its file is gone (Linux): the folder goes with this object.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.folder, True)
        write_source(src, self.folder)
        lib = os.path.join(self.folder, "libmodel.so")
        cmd = [cc, *CFLAGS, "-O2", "-shared", "-fPIC", "-o", lib, os.path.join(self.folder, "model.c")]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise CompileError(f"the generated C did not compile ({' '.join(cmd)}):\n{done.stderr[-4000:]}")
        self.lib = ctypes.CDLL(lib)
        self.fn = self.lib.model_run
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        self.fn.restype = ctypes.c_int
        self.in_bytes, self.out_bytes = in_bytes, out_bytes

    def run(self, x: np.ndarray, act_bits: int = 8) -> np.ndarray:
        """x: int8 [N, ...] of in_bytes per sample -> int8 [N, out_bytes]."""
        x = np.ascontiguousarray(x, np.int8).reshape(len(x), -1)
        if x.shape[1] != self.in_bytes:
            raise ValueError(f"expected {self.in_bytes} bytes per sample, got {x.shape[1]}")
        y = np.empty((len(x), self.out_bytes), np.int8)
        for i in range(len(x)):
            rc = self.fn(x[i].ctypes.data, y[i].ctypes.data, int(act_bits))
            if rc:
                raise ValueError(f"model_run returned {rc} (act_bits {act_bits} outside 2..8?)")
        return y

    def close(self) -> None:
        self._cleanup()
