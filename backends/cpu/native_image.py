"""Building a native image: a model's kernel entries as one shared library that runs without numba.

A compile (numba loaded) links the object code numba produced for each kernel entry the model uses
(numba keeps it for its disk cache; :func:`keep_object_code` keeps a copy of what it loads from
there), the interpreter entry those kernels call (``rammer_cpu_ew_epilogue``), the micro-kernels'
machine code (:mod:`.machine_code`'s object cache) and :mod:`.image_driver`'s C driver into one
shared library, with the system C compiler.  A cache hit then loads it with ctypes
(:mod:`.image_runtime`) and never imports numba.

There is no image, and the numba path stays, when any part is missing: no C compiler (``cc`` or
``$CC``) on the PATH, an entry whose object code numba did not keep (compiled before this module
was imported), a micro-kernel module without its object-cache file, a machine other than x86-64 or
aarch64 Linux, a link error, or ``RAMMER_NATIVE_IMAGE=0``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading

log = logging.getLogger("rammer")

#: What the image's metadata records of each kernel: the entry's symbol in the library.
IMAGE_FORMAT = 1
_LOCK = threading.Lock()


def keep_object_code() -> bool:
    """Make numba keep the object code of every library it loads from its cache (it drops it once
    loaded).  Must run before the kernel entries are loaded; returns whether it could."""
    try:
        from numba.core.codegen import CPUCodeLibrary
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    original = getattr(CPUCodeLibrary, "_set_compiled_object", None)
    if original is None:
        return False
    if getattr(original, "_rammer_keeps", False):
        return True

    def set_compiled_object(self, value):  # type: ignore[no-untyped-def]
        self._rammer_object = value
        return original(self, value)

    set_compiled_object._rammer_keeps = True  # type: ignore[attr-defined]
    CPUCodeLibrary._set_compiled_object = set_compiled_object
    return True


# numba drops a library's object code once it has loaded it from its cache; the image links it
keep_object_code()


def enabled() -> bool:
    """Whether images are built at all (``RAMMER_NATIVE_IMAGE=0`` turns them off)."""
    if os.environ.get("RAMMER_NATIVE_IMAGE", "1") == "0":
        return False
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64", "aarch64")


def compiler() -> str | None:
    """The C compiler images are linked with (``$CC`` or ``cc``), or None."""
    return shutil.which(os.environ.get("CC", "cc"))


def _object_of(fn: object) -> bytes | None:
    lib = getattr(fn, "_library", None)
    data = getattr(lib, "_rammer_object", None) or getattr(lib, "_compiled_object", None)
    return bytes(data) if data else None


def _micro_kernel_objects(symbols: set[str]) -> dict[str, bytes] | None:
    """The machine code of the micro-kernel modules defining ``symbols``, by module key."""
    from . import machine_code

    out: dict[str, bytes] = {}
    for sym in sorted(symbols):
        code = machine_code._CODE_OF[sym]
        if code.key in out:
            continue
        path = machine_code.object_cache_path(machine_code.generator_source() + code.key)
        blob = machine_code.read_checked_object(path) if path else None
        if blob is None:
            return None
        out[code.key] = blob
    return out


def _blas_library() -> dict[str, str] | None:
    """Where the image finds ``sgemm`` when the kernels call BLAS (:mod:`.blas`): scipy's OpenBLAS,
    the library ``scipy.linalg.cython_blas.sgemm`` forwards to, and its symbols (the image loads it
    with ctypes instead of importing scipy).  None when the kernels were built without BLAS."""
    from . import blas

    if not blas.HAVE_BLAS:
        return None
    from scipy.linalg import cython_blas

    libs = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(cython_blas.__file__))), "scipy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "*openblas*.so*"))):
        for prefix in ("scipy_", ""):
            found = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True)
            names = set(found.stdout.split())
            if f"{prefix}sgemm_" in names and f"{prefix}openblas_set_num_threads" in names:
                return {"path": path, "sgemm": f"{prefix}sgemm_", "threads": f"{prefix}openblas_set_num_threads"}
    raise LookupError("scipy's OpenBLAS library was not found")


def _run_compiler(cmd: list[str], failure: str) -> bool:
    """Run the C compiler or linker; False (logged, with ``failure`` and its messages) when it cannot
    run or fails: the caller then builds no image."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("no native image: %s", exc)
        return False
    if done.returncode != 0:
        log.debug("no native image: %s: %s", failure, done.stderr[-2000:])
        return False
    return True


def _driver_object(cc: str, tmp: str) -> str | None:
    """The C driver compiled to an object file (in ``tmp``), from an on-disk cache beside the
    micro-kernels' machine code when there: compiling it costs 0.1 s of CPU (over 1 s of wall time
    on a loaded machine), linking an image 0.02 s.  None when it does not compile."""
    from . import machine_code
    from .image_driver import DRIVER_SOURCE

    try:
        st = os.stat(cc)
        stamp = f"{cc}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = cc
    key = hashlib.sha256(f"{DRIVER_SOURCE}\n{stamp}".encode()).hexdigest()[:24]
    ukernel_path = machine_code.object_cache_path(key)
    cached = os.path.join(os.path.dirname(ukernel_path), f"rammer-image-driver-{key}.o") if ukernel_path else None
    out = os.path.join(tmp, "driver.o")
    blob = machine_code.read_checked_object(cached) if cached is not None else None
    if blob is not None:
        with open(out, "wb") as f:
            f.write(blob)
        return out
    src = os.path.join(tmp, "driver.c")
    with open(src, "w", encoding="utf-8") as f:
        f.write(DRIVER_SOURCE)
    if not _run_compiler([cc, "-O2", "-fPIC", "-c", "-o", out, src], "the driver does not compile"):
        return None
    if cached is not None:
        with open(out, "rb") as f:
            machine_code.write_checked_object(cached, f.read())
    return out


def build(kernel_names: list[str]) -> tuple[bytes, dict] | None:
    """The shared library running kernels ``kernel_names`` (index 0, the barrier, has none) and its
    metadata (the entry symbol of each kernel), or None when no image can be built (see the module
    docstring); the caller then keeps the numba path."""
    if not enabled():
        return None
    cc = compiler()
    if cc is None:
        return None
    from . import entries, kernels_ew

    with _LOCK:
        objects: dict[str, bytes] = {}
        symbols: dict[str, str] = {}
        micro: set[str] = set()
        for name in kernel_names[1:]:
            entries.entry_address(name)  # compiled or loaded now, if this process has not yet
            fn = entries._COMPILED[name]
            data = _object_of(fn)
            wrapper = getattr(fn, "_wrapper_name", None)
            if data is None or not wrapper:
                log.debug("no native image: numba kept no object code of %s", name)
                return None
            objects[f"entry_{name}.o"] = data
            symbols[name] = wrapper
            micro |= entries.micro_kernels(name)
        epilogue = kernels_ew._EPILOGUE[0] if kernels_ew._EPILOGUE else None
        epilogue_data = _object_of(epilogue) if epilogue is not None else None
        epilogue_name = getattr(epilogue, "_wrapper_name", None)
        if epilogue_data is None or not epilogue_name:
            return None
        objects["epilogue.o"] = epilogue_data
        micro_objects = _micro_kernel_objects(micro)
        if micro_objects is None:
            return None
        for key, data in micro_objects.items():
            objects[f"ukernel_{hashlib.sha256(key.encode()).hexdigest()[:16]}.o"] = data
        with tempfile.TemporaryDirectory(prefix="rammer-image-") as tmp:
            for fname, data in objects.items():
                with open(os.path.join(tmp, fname), "wb") as f:
                    f.write(data)
            driver = _driver_object(cc, tmp)
            if driver is None:
                return None
            out = os.path.join(tmp, "image.so")
            cmd = [cc, "-shared", "-o", out, driver, *sorted(os.path.join(tmp, n) for n in objects),
                   "-lm", "-lpthread", "-Wl,-Bsymbolic", f"-Wl,--defsym=rammer_cpu_ew_epilogue={epilogue_name}"]
            if not _run_compiler(cmd, "the link failed"):
                return None
            with open(out, "rb") as f:
                library = f.read()
    try:
        blas_library = _blas_library()
    except (LookupError, OSError, ImportError) as exc:
        log.debug("no native image: %s", exc)
        return None
    meta = {"format": IMAGE_FORMAT, "entries": symbols, "sha256": hashlib.sha256(library).hexdigest(),
            "blas": blas_library}
    return library, meta


def encode_meta(meta: dict) -> bytes:
    return json.dumps(meta, sort_keys=True).encode()
