"""What the compile cache's key records of the toolchain, without importing numba.

The key of a cached program names numba's and llvmlite's versions, the CPU as LLVM names it and
the GEMM micro-kernel's tile (it sets scratch sizes).  Finding these out imports numba and LLVM
(about 0.5 s), which a cache hit that runs a native image otherwise never does.  So they are
remembered in a small file under the cache folder, named by a stamp that changes with anything
they follow from: the installed numba and llvmlite (their version files' paths, sizes and times),
this machine's CPU (``/proc/cpuinfo``'s model and flags) and rammer's sources.  Without
``/proc/cpuinfo`` nothing is remembered.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from typing import Any

from rammer.atomic_file import atomic_write
from rammer.errors import RammerError


def _file_stamp(package: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return f"{package}:missing"
    folder = os.path.dirname(spec.origin)
    parts = []
    for name in ("__init__.py", "_version.py"):
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return f"{folder}|{'|'.join(parts)}"


def _cpu_stamp() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:
        return None
    fields = [line for line in text.splitlines() if line.split(":")[0].strip() in ("model name", "flags", "Features",
                                                                                  "CPU part")]
    return "\n".join(sorted(set(fields)))


def _computed() -> dict[str, Any]:
    import llvmlite
    import numba

    from .machine_code import CPU_NAME
    from .ukernel import MR, NR

    return {"numba": numba.__version__, "llvmlite": llvmlite.__version__, "cpu": CPU_NAME, "ukernel": [MR, NR]}


@functools.cache
def settings(base: str, sources: str) -> dict[str, Any]:
    """numba's and llvmlite's versions, the CPU's LLVM name and the micro-kernel tile
    (``numba``, ``llvmlite``, ``cpu``, ``ukernel``), remembered under cache folder ``base``."""
    cpu = _cpu_stamp()
    if cpu is None:
        return _computed()
    stamp = "\n".join((_file_stamp("numba"), _file_stamp("llvmlite"), cpu, sources))
    path = os.path.join(base, "cpu", f"toolchain-{hashlib.sha256(stamp.encode()).hexdigest()[:24]}.json")
    try:
        with open(path, "rb") as f:
            found = json.loads(f.read())
        if isinstance(found, dict) and set(found) == {"numba", "llvmlite", "cpu", "ukernel"}:
            return found
    except (OSError, ValueError):
        pass
    found = _computed()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_write(path, "the toolchain's settings") as f:
            f.write(json.dumps(found, sort_keys=True).encode())
    except (OSError, RammerError):
        pass  # a read-only cache folder: computed again next time
    return found
