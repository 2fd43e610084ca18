"""Keep numba's on-disk cache of the CPU kernels consistent with their sources.

numba invalidates a cached function only when the file that defines it
changes, not when a function it calls changes (a cached ``k_gemm`` keeps an
old inlined ``ew_run``).  The kernels call each other across modules, so on
import we fingerprint every kernel source file together and, when the
fingerprint differs from the one recorded next to the cache, drop this
package's cached functions before numba can load a stale one.
"""

from __future__ import annotations

import glob
import hashlib
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
#: Modules holding numba-compiled code (their cached functions call each other).
#: Every ``kernels_*`` and ``ukernel*`` module is included by name pattern, so a new one cannot be forgotten.
SOURCES = tuple(sorted({"atomics", "blas", "ewops", "fastmath", "entries", "driver"}
                       | {os.path.basename(p)[:-3] for pattern in ("kernels_*.py", "ukernel*.py")
                          for p in glob.glob(os.path.join(_HERE, pattern))}))


def fingerprint() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        with open(os.path.join(_HERE, name + ".py"), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _guard() -> None:
    folder = os.path.join(_HERE, "__pycache__")
    stamp = os.path.join(folder, "rammer-kernels.stamp")
    current = fingerprint()
    try:
        with open(stamp, encoding="utf-8") as f:
            if f.read().strip() == current:
                return
    except OSError:
        pass
    for name in SOURCES:
        for path in glob.glob(os.path.join(folder, f"{name}.*.nb[ic]")):
            try:
                os.unlink(path)
            except OSError:
                pass
    try:
        os.makedirs(folder, exist_ok=True)
        tmp = f"{stamp}.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(current)
        os.replace(tmp, stamp)
    except OSError:
        pass  # read-only install: numba uses its own cache folder, keyed by file stamps


_guard()
