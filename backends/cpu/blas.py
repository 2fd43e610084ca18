"""BLAS ``sgemm`` callable from numba-compiled rKernels.

The address of scipy's Fortran ``sgemm`` (from ``scipy.linalg.cython_blas``)
is registered with LLVM under a private symbol name, and an intrinsic emits
the call with its by-reference scalar arguments on the stack.  Going through a
symbol rather than a ctypes pointer keeps the calling kernels cacheable on
disk by numba.

The OpenBLAS behind it is set to one thread: rammer's vEUs already occupy
the cores, and a BLAS call inside a vEU must not start threads of its own.
"""

from __future__ import annotations

import ctypes
import glob
import os

from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)

SYMBOL = "rammer_cpu_sgemm"


def _capsule_address(capsule: object) -> int:
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype = ctypes.c_void_p
    get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get_ptr(capsule, get_name(capsule)))


def _single_thread_openblas(module_file: str) -> None:
    """Set the OpenBLAS bundled with scipy to one thread, if we can find it."""
    libs = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(module_file))), "scipy.libs")
    for path in glob.glob(os.path.join(libs, "*openblas*.so*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_set_num_threads", "openblas_set_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn(1)
                return


def _bind() -> bool:
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        # No scipy: the GEMM kernels use their own loops; the symbol still
        # resolves (to a stub that is never called) so the kernels compile.
        llvm_binding.add_symbol(SYMBOL, ctypes.cast(_STUB, ctypes.c_void_p).value)
        return False
    llvm_binding.add_symbol(SYMBOL, _capsule_address(cython_blas.__pyx_capi__["sgemm"]))
    _single_thread_openblas(cython_blas.__file__)
    return True


_STUB = ctypes.CFUNCTYPE(None)(lambda: None)
HAVE_BLAS = _bind()


@intrinsic
def sgemm(typingctx, transa, transb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc):
    """Column-major ``C = alpha op(A) op(B) + beta C`` on float32 arrays at element offsets.

    ``transa``/``transb`` are 0 (``'N'``) or 1 (``'T'``).
    """
    for arr in (a, b, c):
        if not (isinstance(arr, types.Array) and arr.dtype == types.float32):
            return None
    ints = (transa, transb, m, n, k, a_off, lda, b_off, ldb, c_off, ldc)
    if not all(isinstance(t, types.Integer) for t in ints):
        return None
    sig = types.none(transa, transb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc)

    def codegen(context, builder, signature, args):
        (ta, tb, m_, n_, k_, al, a_, ao, lda_, b_, bo, ldb_, be, c_, co, ldc_) = args
        sargs = signature.args
        i32 = ir.IntType(32)
        i8 = ir.IntType(8)
        f32 = ir.FloatType()

        def on_stack(value, from_type, to_type, llty):
            v = context.cast(builder, value, from_type, to_type)
            if llty == i32:
                v = builder.trunc(v, i32) if v.type.width > 32 else v
            return cgutils.alloca_once_value(builder, v)

        def char(flag, flag_type):
            v = context.cast(builder, flag, flag_type, types.int64)
            is_t = builder.icmp_signed("!=", v, ir.Constant(ir.IntType(64), 0))
            ch = builder.select(is_t, ir.Constant(i8, ord("T")), ir.Constant(i8, ord("N")))
            return cgutils.alloca_once_value(builder, ch)

        def data(arr, arrty, off, offty):
            ary = context.make_array(arrty)(context, builder, arr)
            i = context.cast(builder, off, offty, types.intp)
            return builder.gep(ary.data, [i])

        args_ll = [
            char(ta, sargs[0]), char(tb, sargs[1]),
            on_stack(m_, sargs[2], types.int64, i32), on_stack(n_, sargs[3], types.int64, i32),
            on_stack(k_, sargs[4], types.int64, i32),
            on_stack(al, sargs[5], types.float32, f32),
            data(a_, sargs[6], ao, sargs[7]), on_stack(lda_, sargs[8], types.int64, i32),
            data(b_, sargs[9], bo, sargs[10]), on_stack(ldb_, sargs[11], types.int64, i32),
            on_stack(be, sargs[12], types.float32, f32),
            data(c_, sargs[13], co, sargs[14]), on_stack(ldc_, sargs[15], types.int64, i32),
        ]
        p_i8, p_i32, p_f32 = i8.as_pointer(), i32.as_pointer(), f32.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [p_i8, p_i8, p_i32, p_i32, p_i32, p_f32, p_f32, p_i32,
                                               p_f32, p_i32, p_f32, p_f32, p_i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, SYMBOL)
        builder.call(fn, args_ll)
        return context.get_dummy_value()

    return sig, codegen
