"""Compile the kernel entries a program needs on both cores at once.

A cold start (fresh install, or kernel sources changed) spends most of
``rammer.compile`` in numba: the shared elementwise interpreter (the
epilogue every fused kernel calls, about half of it) and then each kernel
entry, one after the other on one core.  The entries do not need the
interpreter to compile, only its *symbol* (they call it by name, resolved
when the compiled code is loaded), so a helper process compiles the missing
entries into numba's on-disk cache against a placeholder symbol while this
process compiles the interpreter; afterwards every entry loads from the cache
and links against the real interpreter.

Nothing here is needed for correctness: when the cache is warm, there is one
core, or the helper fails, the entries compile in-process as before.
Run as ``python -m rammer.backends.cpu.warmup NAME...`` it is the helper;
``python -m rammer.backends.cpu.warmup --all`` fills numba's cache with every
kernel entry and the interpreter (after an install, or in the background of a
test run on a fresh clone: tests/conftest.py).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

_log = logging.getLogger(__name__)

#: A helper only pays off when this many entries or more are missing (its start costs about a second).
MIN_MISSING = 1
#: Seconds to wait for the helper before compiling in-process anyway.
HELPER_TIMEOUT_S = 600
#: What the last helper of this process did: ``{"entries": [...], "code": [micro-kernel module keys],
#: "returncode": int}`` (for tests and logs).
LAST_HELPER: dict = {}


def _on_disk(py_func, sig) -> bool:
    """Whether numba's cache holds ``py_func`` compiled for ``sig`` on this machine."""
    try:
        from numba.core.caching import FunctionCache
        from numba.core.registry import cpu_target

        cache = FunctionCache(py_func)
        key = cache._index_key(sig, cpu_target.target_context.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # numba internals moved: assume warm and compile in-process as before
        return True


def missing_entries(names: list[str]) -> list[str]:
    """The entries of ``names`` that are neither loaded in this process nor in numba's cache."""
    from . import entries

    return [n for n in names if n not in entries._COMPILED
            and not _on_disk(getattr(entries, f"entry_{n}"), entries.SIGNATURE)]


def epilogue_cached() -> bool:
    from . import kernels_ew

    return bool(kernels_ew._EPILOGUE) or _on_disk(kernels_ew._epilogue_entry, kernels_ew._EPILOGUE_SIG)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def warm(names: list[str]) -> None:
    """Make sure every entry of ``names`` is compiled, using a helper process for the cold ones.

    Afterwards :func:`.entries.entry_address` finds each of them in numba's cache."""
    from . import entries, machine_code
    from .kernels_ew import ensure_epilogue_symbol

    cold = missing_entries(names)
    if len(cold) < MIN_MISSING or _usable_cores() < 2 or epilogue_cached():
        return  # nothing to overlap with: entry_address compiles what is missing
    # The micro-kernel modules these entries call that are not in the machine-code cache either:
    # the helper compiles them into it first (this process loads them from there afterwards).
    code = machine_code.cold_code(set().union(*(entries.micro_kernels(n) for n in names)))
    helper = subprocess.Popen([sys.executable, "-m", __name__, *cold, *(f"code:{c.key}" for c in code)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ensure_epilogue_symbol()
    finally:
        try:
            _, err = helper.communicate(timeout=HELPER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            helper.kill()
            _, err = helper.communicate()
    LAST_HELPER.clear()
    LAST_HELPER.update(entries=cold, code=[c.key for c in code], returncode=helper.returncode)
    if helper.returncode != 0:
        _log.debug("kernel warm-up helper failed (%s): %s", helper.returncode, err.decode(errors="replace")[-2000:])
    # A failed helper leaves nothing behind (numba writes cache files atomically):
    # entry_address then compiles the entries here, as without a helper.


def _helper(names: list[str]) -> None:
    from llvmlite import binding as llvm

    from . import entries, kernels_ew, machine_code

    keys = {n[len("code:"):] for n in names if n.startswith("code:")}
    for code in machine_code.machine_code():
        if code.key in keys:
            code.build_cold()
    # Any address will do: the placeholders are only linked here, never called, and the
    # cached code refers to the interpreter and the micro-kernels by name.
    llvm.add_symbol(kernels_ew.EPILOGUE_SYMBOL, machine_code.PLACEHOLDER_ADDRESS)
    machine_code.register_placeholders()
    for name in names:
        if not name.startswith("code:"):
            entries.compile_entry(name)


#: The order :func:`precompile_all` compiles the entries in: the ones most programs need first (a
#: process that needs an entry the background compile has not reached compiles it itself).
COMMON_FIRST = ("k_ew", "k_copy", "k_gemm", "k_convp", "k_copy_many", "k_pool", "k_dwconv", "k_softmax",
                "k_layernorm", "k_reduce", "k_gather", "k_gemm_lda", "k_attention", "k_pad")


def all_entries() -> list[str]:
    """Every kernel entry, :data:`COMMON_FIRST` first."""
    from . import entries

    names = sorted(n[len("entry_"):] for n in dir(entries) if n.startswith("entry_k_"))
    return [n for n in COMMON_FIRST if n in names] + [n for n in names if n not in COMMON_FIRST]


def precompile_all() -> list[str]:
    """Compile the interpreter and every kernel entry that numba's cache does not hold yet (with
    their micro-kernel modules); returns the entries compiled."""
    from . import entries
    from .kernels_ew import ensure_epilogue_symbol

    cold = missing_entries(all_entries())
    if not cold and epilogue_cached():
        return []
    ensure_epilogue_symbol()
    for name in cold:
        entries.entry_address(name)
    return cold


if __name__ == "__main__":
    if sys.argv[1:] == ["--all"]:
        precompile_all()
    else:
        _helper(sys.argv[1:])
