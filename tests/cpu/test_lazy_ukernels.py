"""Micro-kernel modules are built on first need (backends/cpu/machine_code.py ``MachineCode``): an
entry loaded from numba's cache generates no code, so it must build first the modules whose
symbols it calls, as :func:`machine_code.symbols_called` finds them in its code."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from rammer.backends.cpu import (
    entries,
    machine_code,
    ukernel,
    ukernel_ew,
    ukernel_lda,
    ukernel_pack,
    ukernel_window,
    ukernel_winograd,
)
from rammer.time_limits import scaled_limit

ENTRIES = sorted(n[len("entry_"):] for n in vars(entries) if n.startswith("entry_k_"))


def test_entries_name_the_micro_kernels_they_call():
    interpreter = set(ukernel_ew.EW_SYMBOLS.values())
    assert entries.micro_kernels("k_gemm") == {
        ukernel.SYMBOL, *(ukernel.packed_symbol(r) for r in ukernel.PACKED_SHORT_ROWS), ukernel_pack.SYMBOL,
        ukernel_pack.COLUMNS_SYMBOL, *interpreter}
    # a GEMM reading A in place has an entry of its own: only it builds the strided-A kernels
    assert entries.micro_kernels("k_gemm_lda") == {ukernel_lda.lda_symbol(r) for r in range(1, 13)} | interpreter
    # the elementwise interpreter's vector kernels only (every entry may run an epilogue)
    assert entries.micro_kernels("k_ew") == interpreter
    assert ukernel_window.DISPATCH_SYMBOL in entries.micro_kernels("k_dwconv")
    assert ukernel_window.DISPATCH_SYMBOL in entries.micro_kernels("k_pool")
    conv = entries.micro_kernels("k_convp")
    assert {ukernel.ROWS_SYMBOL, ukernel.LDB_SYMBOL, ukernel_winograd.IN_SYMBOL, ukernel_winograd.OUT_SYMBOL} <= conv
    # every symbol found is one a module defines
    for name in ENTRIES:
        assert entries.micro_kernels(name) <= set(machine_code._CODE_OF), name


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=scaled_limit(600))


def test_a_gemm_model_builds_only_the_packed_kernel():
    # with its A-panel packing, and the elementwise interpreter's (every kernel may run an epilogue through it)
    done = _run("""
        from rammer.backends.cpu import machine_code, ukernel, ukernel_ew, ukernel_pack
        from cpu_helpers import compare, model, node, rand
        m = model([node("MatMul", ["x", "w"], ["y"])], {"x": rand(5, 40)}, ["y"], {"w": rand(40, 24, seed=1)})
        compare(m, {"x": rand(5, 40, seed=2)})
        built = [c.key for c in machine_code.machine_code() if c._engine is not None]
        print(built)
        assert sorted(built) == sorted([ukernel.PACKED.key, ukernel_pack.PACK.key, ukernel_ew.EW.key]), built
    """)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", ENTRIES)
def test_each_entry_loads_from_the_cache_with_only_the_modules_it_names(name):
    entries.entry_address(name)  # compiled here (or already in numba's cache): the child loads it
    done = _run(f"""
        from rammer.backends.cpu import entries, machine_code
        assert entries.entry_address({name!r})
        # loaded code is linked when numba's engine next finalizes a module: make it happen now
        from numba import njit
        assert njit(lambda: 7)() == 7
        built = {{s for c in machine_code.machine_code() if c._engine is not None for s in c.symbols}}
        assert built >= entries.micro_kernels({name!r})
        print(sorted(built))
    """)
    # a symbol missing when the cached code is linked aborts the process (LLVM: "could not be resolved")
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
