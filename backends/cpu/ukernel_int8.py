"""The 8-bit GEMM micro-kernel (u8 x s8 -> int32), generated as LLVM IR for this CPU.

::

    T[r, j] = sum_{g < k4} sum_{t < 4} A[r*lda + 4g + t] * Bp[(g*NR + j)*4 + t]     r < MR, j < NR

A is read in place (row-major bytes, ``lda`` apart; rows beyond ``rows`` repeat the last one) as
unsigned bytes -- with ``flip_a`` its bytes are XORed with 0x80 first, which turns int8 into
``int8 + 128`` as uint8; B is a panel packed at compile time (:func:`pack_b`) in the layout VNNI
reads: the 4 consecutive k values of one column contiguous, NR columns after each other, as int8.
The MR x NR int32 tile is stored row-major at ``c`` (``ldc`` apart); the AVX2 form may leave rows past
``rows`` unwritten (the callers read rows < ``rows``; the other forms store them from the repeated row).
Every kernel takes a last argument ``wsafe``: 1 where the caller has checked that its weights (here B)
hold no -128, which the AVX2 form would otherwise read for at every call; the other forms ignore it.
The IR of the ``vnni`` and ``portable`` forms is in :mod:`.ukernel_int8_ir`.  The callers
(:mod:`.kernels_quant`) correct the sums for the signedness shifts and zero points with row and
column sums, and requantize.

Three forms, chosen when the module is built from the host's features:

* ``vnni`` (avx512vnni): one ``vpdpbusd`` per 16 columns x 4 k (``llvm.x86.avx512.vpdpbusd.512``);
* ``avx2`` (AVX2 without VNNI, :mod:`.ukernel_int8_avx2`): an exact use of ``vpmaddubsw`` on the
  activation taken as ``x = a' - 128``, the tile walked in column chunks that fit 16 ymm registers; its
  sums are ``T - 128 * colsum(B)`` (``D - 128 * rowsum(w)`` for the pointwise kernel), which the callers
  learn from :func:`int8_shift` at run time;
* ``portable``: the same sums as ``vnni`` in plain LLVM vector IR (widen, multiply, add the 4 products
  of each lane), which any CPU compiles.

Every form a CPU can build can be forced (tests compare them; ``RAMMER_CPU_INT8=portable`` or ``=avx2``
makes a process's kernels call that one); they share one set of symbols, so numba's cached kernels link
to whichever form the process built, and ask it for its shift.
"""

from __future__ import annotations

import ctypes
import hashlib
import os

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .machine_code import HOST_FEATURES, MachineCode, call_codegen, compile_module, ensure_symbols, uses
from .ukernel_int8_ir import MR, NR, add_conv_kernel, add_kernel, add_pack4, add_pointwise_kernel, add_shift, add_wscan

HAS_VNNI = "avx512vnni" in HOST_FEATURES and "avx512f" in HOST_FEATURES
HAS_AVX2 = "avx2" in HOST_FEATURES
#: The forms this CPU can build, fastest first.
FORMS = tuple(f for f, ok in (("vnni", HAS_VNNI), ("avx2", HAS_AVX2), ("portable", True)) if ok)
#: What each form's sums are short of the plain ``sum a' * b`` (times the weights' column or row sums).
SHIFTS = {"vnni": 0, "avx2": 128, "portable": 0}


def _chosen_form() -> str:
    """The host's fastest form, or ``RAMMER_CPU_INT8`` (``portable``, ``avx2``, ``vnni``) where set."""
    want = os.environ.get("RAMMER_CPU_INT8", "")
    if not want:
        return FORMS[0]
    if want not in FORMS:
        raise RuntimeError(f"RAMMER_CPU_INT8={want!r}: this CPU builds the int8 kernels as {', '.join(FORMS)}")
    return want


FORM = _chosen_form()
USE_VNNI = FORM == "vnni"

#: One symbol for either form: numba's cached kernels link against it by name, whichever form this
#: process built.
SYMBOL = "rammer_cpu_int8"
#: The convolution form (:func:`.ukernel_int8_ir.add_conv_kernel`): rows are output pixels read through offsets into an
#: NHWC input, the taps of the window summed in the registers.
SYMBOL_CONV = "rammer_cpu_int8_conv"
#: The pointwise form (:func:`.ukernel_int8_ir.add_pointwise_kernel`): weights as signed rows, activations as unsigned
#: columns, the tile requantized to bytes as it is stored.
SYMBOL_PW = "rammer_cpu_int8_pw"
#: The interleave of 4 channel planes into the pointwise kernel's column panels (:func:`.ukernel_int8_ir.add_pack4`).
SYMBOL_PACK4 = "rammer_cpu_int8_pack4"
#: ``() -> i64``: the form's shift (:data:`SHIFTS`), asked at run time by :func:`int8_shift`.
SYMBOL_SHIFT = "rammer_cpu_int8_shift"
#: ``(p, n) -> i64``: 1 when none of the n bytes at p is -128 (:func:`no_min_byte`).
SYMBOL_WSCAN = "rammer_cpu_int8_wscan"


def pack_b(b: np.ndarray) -> np.ndarray:
    """A K x N int8 matrix as panels of NR columns, K padded with zeros to a multiple of 4:
    panel p, group g, column j, t at byte ``((p * K4 + g) * NR + j) * 4 + t``, K4 = ceil(K / 4);
    N is padded with zero columns to a multiple of NR."""
    k, n = b.shape
    k4 = -(-k // 4)
    panels = -(-n // NR)
    padded = np.zeros((k4 * 4, panels * NR), np.int8)
    padded[:k, :n] = b
    # [g, t, p, j] -> [p, g, j, t]
    return np.ascontiguousarray(padded.reshape(k4, 4, panels, NR).transpose(2, 0, 3, 1)).reshape(-1)


def panel_bytes(k: int) -> int:
    """Bytes of one packed panel of a K-row matrix."""
    return -(-k // 4) * 4 * NR


def int8_module(form: bool | str) -> ir.Module:
    """The module of one form of the kernels (``True`` / ``False``: ``vnni`` / ``portable``; ``vnni``
    needs avx512vnni to compile, ``avx2`` AVX2)."""
    form = _form_name(form)
    mod = ir.Module(name="rammer_ukernel_int8")
    if form == "avx2":
        from . import ukernel_int8_avx2 as avx2  # its builders import this module's helpers

        # the portable sums of the same shifted values, for the calls whose weights hold a -128
        exact = (add_kernel(mod, SYMBOL + "_x", False, True), add_conv_kernel(mod, SYMBOL_CONV + "_x", False, True),
                 add_pointwise_kernel(mod, SYMBOL_PW + "_x", False, True))
        for fn in exact:
            fn.linkage = "internal"
        avx2.add_gemm_kernel(mod, SYMBOL, exact[0])
        avx2.add_conv_kernel(mod, SYMBOL_CONV, exact[1])
        avx2.add_pointwise_kernel(mod, SYMBOL_PW, exact[2])
    else:
        add_kernel(mod, SYMBOL, form == "vnni")
        add_conv_kernel(mod, SYMBOL_CONV, form == "vnni")
        add_pointwise_kernel(mod, SYMBOL_PW, form == "vnni")
    add_pack4(mod, SYMBOL_PACK4)
    add_shift(mod, SYMBOL_SHIFT, SHIFTS[form])
    add_wscan(mod, SYMBOL_WSCAN)
    return mod


def _form_name(form: bool | str) -> str:
    return ("vnni" if form else "portable") if isinstance(form, bool) else form


def _source_key() -> str:
    # machine_code keys cached modules by its own generator files; this file's text joins the key here
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


CODE = MachineCode(f"ukernel int8 {FORM} {MR}x{NR} {_source_key()}", lambda: int8_module(FORM),
                   (SYMBOL, SYMBOL_CONV, SYMBOL_PW, SYMBOL_PACK4, SYMBOL_SHIFT, SYMBOL_WSCAN))

#: ctypes type of the kernel: (k4, a, lda, rows, flip_a, b, c, ldc, wsafe).
CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_ENGINES: dict[str, object] = {}


def _engine(form: bool | str) -> object:
    form = _form_name(form)
    if form not in FORMS:
        raise RuntimeError(f"this CPU cannot build the {form} form of the int8 kernels (it builds {', '.join(FORMS)})")
    engine = _ENGINES.get(form)
    if engine is None:
        engine = _ENGINES[form] = compile_module(int8_module(form))
    return engine


def cfunc(form: bool | str) -> object:
    """One form of the kernel as a ctypes function, compiled apart from the one the kernels call
    (tests compare the forms; ``True`` / ``False`` name ``vnni`` / ``portable``; ``vnni`` needs a VNNI
    CPU, ``avx2`` an AVX2 one).  Its sums are short of ``sum a' * b`` by ``SHIFTS[form] * colsum(B)``."""
    return CFUNCTYPE(_engine(form).get_function_address(SYMBOL))


#: ctypes type of the convolution kernel: (ntaps, toff, cg, a, poff, rows, b, c, ldc, wsafe).
CONV_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                  ctypes.c_int64)


def conv_cfunc(form: bool | str) -> object:
    """The convolution kernel (:func:`.ukernel_int8_ir.add_conv_kernel`) of one form as a ctypes function, as
    :func:`cfunc`."""
    return CONV_CFUNCTYPE(_engine(form).get_function_address(SYMBOL_CONV))


@intrinsic
def rint_f32(typingctx, v):
    """``np.rint`` of a float32 (half to even) as LLVM's ``llvm.rint.f32``, which the loop vectorizer
    turns into ``vroundps``: numba's ``np.rint`` of a float32 is a call per element, which kept every
    requantizing loop around it scalar."""
    if v != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.call(builder.module.declare_intrinsic("llvm.rint", [ir.FloatType()]), args)

    return types.float32(types.float32), codegen


@uses(SYMBOL)
@intrinsic
def ukernel_int8(typingctx, k4, A, a_off, lda, rows, flip_a, Bp, b_off, C, c_off, ldc, wsafe):
    """The tile: ``C[c_off + r*ldc + j] = sum_k A'[a_off + r*lda + k] * Bp[b_off + ...]`` (bytes of A
    and Bp, int32 C; see the module docstring)."""
    if not (isinstance(A, types.Array) and isinstance(Bp, types.Array) and isinstance(C, types.Array)):
        return None
    if A.dtype != types.uint8 or Bp.dtype != types.uint8 or C.dtype != types.int32:
        return None
    sig = types.none(k4, A, a_off, lda, rows, flip_a, Bp, b_off, C, c_off, ldc, wsafe)
    return sig, call_codegen(SYMBOL, "ifiiiffii")


@uses(SYMBOL_CONV)
@intrinsic
def ukernel_int8_conv(typingctx, ntaps, toff, t_off, cg, A, a_off, poff, p_off, rows, Bp, b_off, C, c_off, ldc,
                      wsafe):
    """The convolution tile (:func:`.ukernel_int8_ir.add_conv_kernel`): ``toff`` / ``poff`` int64 arrays of tap and
    pixel offsets into the NHWC bytes at ``A[a_off:]``; B packed, C int32."""
    if not all(isinstance(x, types.Array) for x in (toff, A, poff, Bp, C)):
        return None
    if toff.dtype != types.int64 or poff.dtype != types.int64 or A.dtype != types.uint8 or Bp.dtype != types.uint8 \
            or C.dtype != types.int32:
        return None
    sig = types.none(ntaps, toff, t_off, cg, A, a_off, poff, p_off, rows, Bp, b_off, C, c_off, ldc, wsafe)
    return sig, call_codegen(SYMBOL_CONV, "iqiqqiqqii")


#: ctypes type of the pointwise kernel: (k4, w, ldw, rows, b, terms, mults, params, out, ldo, wsafe).
PW_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64)
#: ctypes type of the 4-row interleave: (src, plane, k4, dst, flip).
PACK4_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                   ctypes.c_int64)


def pointwise_cfuncs(form: bool | str) -> tuple[object, object]:
    """The pointwise kernel (:func:`.ukernel_int8_ir.add_pointwise_kernel`) of one form and the interleave
    (:func:`.ukernel_int8_ir.add_pack4`) as ctypes functions, as :func:`cfunc` (its sums short of ``sum w * b`` by
    ``SHIFTS[form] * rowsum(w)`` before the requantization)."""
    engine = _engine(form)
    return (PW_CFUNCTYPE(engine.get_function_address(SYMBOL_PW)),
            PACK4_CFUNCTYPE(engine.get_function_address(SYMBOL_PACK4)))


@uses(SYMBOL_PW)
@intrinsic
def ukernel_int8_pw(typingctx, k4, W, w_off, ldw, rows, Bp, b_off, T, t_off, M, m_off, P, p_off, O, o_off, ldo,
                    wsafe):
    """The pointwise tile (:func:`.ukernel_int8_ir.add_pointwise_kernel`): weight rows and the column panel are bytes,
    ``T`` int32 row terms, ``M`` float32 row multipliers, ``P`` float32 [zy, lo, hi], ``O`` the bytes
    stored."""
    if not all(isinstance(x, types.Array) for x in (W, Bp, T, M, P, O)):
        return None
    if W.dtype != types.uint8 or Bp.dtype != types.uint8 or T.dtype != types.int32 or M.dtype != types.float32 \
            or P.dtype != types.float32 or O.dtype != types.uint8:
        return None
    sig = types.none(k4, W, w_off, ldw, rows, Bp, b_off, T, t_off, M, m_off, P, p_off, O, o_off, ldo, wsafe)
    return sig, call_codegen(SYMBOL_PW, "ifiifqfffii")


@uses(SYMBOL_PACK4)
@intrinsic
def pack4_int8(typingctx, S, s_off, plane, k4, D, d_off, flip):
    """The interleave (:func:`.ukernel_int8_ir.add_pack4`) from bytes ``S[s_off:]`` into ``D[d_off:]``."""
    if not (isinstance(S, types.Array) and isinstance(D, types.Array)):
        return None
    if S.dtype != types.uint8 or D.dtype != types.uint8:
        return None
    sig = types.none(S, s_off, plane, k4, D, d_off, flip)
    return sig, call_codegen(SYMBOL_PACK4, "fiifi")


@uses(SYMBOL_SHIFT)
@intrinsic
def int8_shift(typingctx):
    """The shift of the form this process built (:data:`SHIFTS`): its GEMM and conv sums are
    ``sum a' * b - shift * colsum(B)``, its pointwise sums ``sum w * b - shift * rowsum(w)``.  Asked at
    run time, so a numba kernel cached under one form is right under another."""
    def codegen(context, builder, signature, args):
        ensure_symbols((SYMBOL_SHIFT,))
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []), SYMBOL_SHIFT)
        return builder.call(fn, [])
    return types.int64(), codegen


@uses(SYMBOL_WSCAN)
@intrinsic
def no_min_byte(typingctx, B, at, n):
    """1 when none of the ``n`` bytes of ``B`` from ``at`` is -128 (0x80): the ``wsafe`` of a kernel call
    whose weights are those bytes (checked once by a task, not at every call; :func:`.ukernel_int8_ir.add_wscan`)."""
    if not (isinstance(B, types.Array) and B.dtype == types.uint8):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [context.cast(builder, args[1], signature.args[1], types.intp)])
        count = context.cast(builder, args[2], signature.args[2], types.int64)
        ensure_symbols((SYMBOL_WSCAN,))
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [ptr.type, i64]), SYMBOL_WSCAN)
        return builder.call(fn, [ptr, count])
    return types.int64(B, at, n), codegen
