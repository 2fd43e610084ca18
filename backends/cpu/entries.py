"""C-callable entry points of the rKernels, for the driver's indirect calls.

Each entry has the one signature the driver calls through a function
pointer (arena, side tables and task row as raw pointers plus sizes) and
rebuilds the typed arena views before calling its kernel.  Entries are
compiled lazily (:func:`entry_address`), each once, and cached on disk by
numba, so a model only ever pays for the kernels it uses the first time any
model uses them.
"""

from __future__ import annotations

import numpy as np
from numba import carray, cfunc, types

from . import (
    _numba_cache,  # noqa: F401  (drops stale numba caches first)
    machine_code,
    native_image,  # noqa: F401  (makes numba keep the entries' object code, before any is loaded)
)
from .kernels_attention import k_attention
from .kernels_conv import k_convp
from .kernels_data import k_copy, k_copy_many, k_gather, k_pad, k_resize
from .kernels_ew import arena_views, ensure_epilogue_symbol, epilogue_micro_kernels, k_ew
from .kernels_gemm import k_gemm, k_gemm_lda
from .kernels_index import k_argreduce, k_cumsum, k_gather_elements
from .kernels_nn import k_layernorm, k_reduce, k_softmax
from .kernels_qdw import k_qdwconv
from .kernels_quant import (
    k_byte_table,
    k_dequantize,
    k_dynquant,
    k_gemm_int8,
    k_matmul_int,
    k_qadd,
    k_qconv_int8,
    k_qlinear_matmul,
    k_qlinearconv,
    k_quantize,
)
from .kernels_rnn import k_rnn
from .kernels_tree import k_tree
from .kernels_window import k_dwconv, k_pool
from .task_rows import KERNELS, ROW_PARAMS

SIGNATURE = types.int64(types.voidptr, types.int64, types.voidptr, types.int64, types.voidptr, types.int64,
                        types.voidptr, types.int64)


def entry_k_ew(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_ew(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_gemm(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_gemm(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_gemm_lda(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_gemm_lda(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_copy(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_copy(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_pad(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_pad(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_gather(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_gather(F, B, I, J, X, R, p, sbase)


def entry_k_resize(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_resize(F, B, I, J, X, R, p, sbase)



def entry_k_dwconv(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_dwconv(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_pool(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_pool(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_reduce(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_reduce(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_softmax(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_softmax(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_layernorm(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_layernorm(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_copy_many(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_copy_many(F, B, I, J, X, R, p, sbase)
    return 0



def entry_k_convp(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_convp(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_cumsum(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_cumsum(F, B, I, J, X, R, p, sbase)


def entry_k_argreduce(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_argreduce(F, B, I, J, X, R, p, sbase)


def entry_k_tree(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_tree(F, B, I, J, X, R, p, sbase)


def entry_k_gather_elements(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_gather_elements(F, B, I, J, X, R, p, sbase)


def entry_k_quantize(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_quantize(F, B, I, J, X, R, p, sbase)


def entry_k_dequantize(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_dequantize(F, B, I, J, X, R, p, sbase)


def entry_k_dynquant(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_dynquant(F, B, I, J, X, R, p, sbase)


def entry_k_matmul_int(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_matmul_int(F, B, I, J, X, R, p, sbase)


def entry_k_qlinearconv(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_qlinearconv(F, B, I, J, X, R, p, sbase)


def entry_k_gemm_int8(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_gemm_int8(F, B, I, J, X, R, p, sbase)


def entry_k_qconv_int8(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_qconv_int8(F, B, I, J, X, R, p, sbase)


def entry_k_byte_table(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_byte_table(F, B, I, J, X, R, p, sbase)


def entry_k_qadd(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_qadd(F, B, I, J, X, R, p, sbase)


def entry_k_qdwconv(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_qdwconv(F, B, I, J, X, R, p, sbase)


def entry_k_qlinear_matmul(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    return k_qlinear_matmul(F, B, I, J, X, R, p, sbase)


def entry_k_attention(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_attention(F, B, I, J, X, R, p, sbase)
    return 0


def entry_k_rnn(arena, nbytes, x, nx, r, nr, row, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    p = carray(row, (ROW_PARAMS,), np.int64)
    k_rnn(F, B, I, J, X, R, p, sbase)
    return 0


_COMPILED: dict[str, object] = {}


def compile_entry(name: str) -> object:
    """Kernel ``name``'s entry as a numba cfunc, compiled or loaded from numba's cache.  The
    interpreter's symbol must be registered first (see :func:`entry_address`)."""
    return cfunc(SIGNATURE, nopython=True, nogil=True, cache=True)(globals()[f"entry_{name}"])


def entry_address(name: str) -> int:
    """The address of kernel ``name``'s entry, compiling (or loading) it on first use."""
    found = _COMPILED.get(name)
    if found is None:
        ensure_epilogue_symbol()  # the kernels call the shared interpreter through this symbol
        # and the micro-kernels they call (built on first need; code loaded from numba's cache
        # links against them by name)
        machine_code.ensure_symbols(micro_kernels(name))
        found = _COMPILED[name] = compile_entry(name)
    return found.address


def micro_kernels(name: str) -> set[str]:
    """The micro-kernel symbols kernel ``name``'s entry calls (see :func:`.machine_code.symbols_called`)."""
    found = _SYMBOLS.get(name)
    if found is None:
        # every entry may run the elementwise interpreter (an epilogue), which has its own
        found = _SYMBOLS[name] = (machine_code.symbols_called(globals()[f"entry_{name}"])
                                  | epilogue_micro_kernels())
    return found


_SYMBOLS: dict[str, set[str]] = {}


def ensure_all_micro_kernels() -> None:
    """Build every micro-kernel module.  Needed before calling, from Python, a numba kernel that
    calls micro-kernels and may come from numba's cache (tests of the kernels themselves): code
    loaded from the cache generates nothing, so it builds nothing.  Compiled models need not:
    they reach their kernels through :func:`entry_address`, which builds what each entry calls."""
    for code in machine_code.machine_code():
        code.engine()


if {n[len("entry_"):] for n in dir() if n.startswith("entry_k_")} != KERNELS:  # pragma: no cover
    raise AssertionError("task_rows.KERNELS must name exactly the kernels with an entry here")
