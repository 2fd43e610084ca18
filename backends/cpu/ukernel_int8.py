"""The 8-bit GEMM micro-kernel (u8 x s8 -> int32), generated as LLVM IR for this CPU.

::

    T[r, j] = sum_{g < k4} sum_{t < 4} A[r*lda + 4g + t] * Bp[(g*NR + j)*4 + t]     r < MR, j < NR

A is read in place (row-major bytes, ``lda`` apart; rows beyond ``rows`` repeat the last one) as
unsigned bytes -- with ``flip_a`` its bytes are XORed with 0x80 first, which turns int8 into
``int8 + 128`` as uint8; B is a panel packed at compile time (:func:`pack_b`) in the layout VNNI
reads: the 4 consecutive k values of one column contiguous, NR columns after each other, as int8.
The MR x NR int32 tile is stored row-major at ``c`` (``ldc`` apart); the AVX2 form may leave rows past
``rows`` unwritten (the callers read rows < ``rows``; the other forms store them from the repeated row).
Every kernel takes a last
argument ``wsafe``: 1 where the caller has checked that its weights (here B) hold no -128, which the
AVX2 form would otherwise read for at every call; the other forms ignore it.  The callers
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

#: Rows and columns of the tile: 6 x 64 keeps 24 zmm accumulators, 4 B vectors and a broadcast
#: in AVX-512's 32 registers.  The packed layout depends on NR only, the same on every CPU.
MR, NR = 6, 64
LANES = 16  # int32 lanes per vector (4 columns' worth of bytes each is one int32 lane of 4 k)
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
#: The convolution form (:func:`_add_conv_kernel`): rows are output pixels read through offsets into an
#: NHWC input, the taps of the window summed in the registers.
SYMBOL_CONV = "rammer_cpu_int8_conv"
#: The pointwise form (:func:`_add_pointwise_kernel`): weights as signed rows, activations as unsigned
#: columns, the tile requantized to bytes as it is stored.
SYMBOL_PW = "rammer_cpu_int8_pw"
#: The interleave of 4 channel planes into the pointwise kernel's column panels (:func:`_add_pack4`).
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


def _dot_vnni(bld: ir.IRBuilder, acc: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    vec = acc.type
    name = "llvm.x86.avx512.vpdpbusd.512"
    fn = bld.module.globals.get(name)
    if fn is None:
        fn = ir.Function(bld.module, ir.FunctionType(vec, [vec, vec, vec]), name=name)
    return bld.call(fn, [acc, a, b])


def _dot_portable(bld: ir.IRBuilder, acc: ir.Value, a: ir.Value, b: ir.Value, a_signed: bool = False) -> ir.Value:
    lanes = acc.type.count
    i32 = ir.IntType(32)
    bytes_ = ir.VectorType(ir.IntType(8), lanes * 4)
    wide = ir.VectorType(i32, lanes * 4)
    wa = (bld.sext if a_signed else bld.zext)(bld.bitcast(a, bytes_), wide)
    prod = bld.mul(wa, bld.sext(bld.bitcast(b, bytes_), wide))
    # Products of a byte and a signed byte fit 16 bits, so adjacent pairs summed as (even + odd)
    # lanes is the pattern LLVM lowers to one pmaddwd per 8 or 16 pairs (AVX2, SSE); summing the 4
    # products of a lane one shuffle at a time had left a multiply and 4 shuffles per product.
    def half(vec: ir.Value, count: int, odd: int) -> ir.Value:
        mask = ir.Constant(ir.VectorType(i32, count), [2 * j + odd for j in range(count)])
        return bld.shuffle_vector(vec, ir.Constant(vec.type, ir.Undefined), mask)
    pairs = bld.add(half(prod, lanes * 2, 0), half(prod, lanes * 2, 1))   # lane 2j: t 0-1 of column j, 2j+1: t 2-3
    return bld.add(acc, bld.add(half(pairs, lanes, 0), half(pairs, lanes, 1)))


def _dot_x(bld: ir.IRBuilder, acc: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    return _dot_portable(bld, acc, a, b, a_signed=True)


def _add_kernel(mod: ir.Module, name: str, vnni: bool, xdomain: bool = False) -> ir.Function:
    """``(k4, a, lda, rows, flip_a, b, c, ldc)`` as in the module's docstring.  ``xdomain``: the
    portable sums of x = a' - 128 (the avx2 form's, for the calls it cannot take exactly)."""
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    i64 = ir.IntType(64)
    vec = ir.VectorType(i32, LANES)
    nv = NR // LANES
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, i8p, i64, i64, i64, i8p, i32.as_pointer(), i64,
                                                          i64]), name=name)
    k4, a, lda, rows, flip_a, b, c, ldc, _ = fn.args
    for arg, n in zip(fn.args, ("k4", "a", "lda", "rows", "flip_a", "b", "c", "ldc")):
        arg.name = n
    dot = _dot_vnni if vnni else _dot_x if xdomain else _dot_portable
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    last = entry.sub(rows, ir.Constant(i64, 1))
    row_ptrs = []
    for r in range(MR):
        rr = entry.select(entry.icmp_signed("<", ir.Constant(i64, r), rows), ir.Constant(i64, r), last)
        row_ptrs.append(entry.gep(a, [entry.mul(rr, lda)]))
    flips = (ir.Constant(i32, 0x80808080 - 2**32), ir.Constant(i32, 0))
    flip = entry.select(entry.icmp_signed("!=", flip_a, ir.Constant(i64, 0)), *(flips[::-1] if xdomain else flips))
    head, body, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    start = entry.block
    entry.branch(head)
    bld = ir.IRBuilder(head)
    g = bld.phi(i64, name="g")
    g.add_incoming(ir.Constant(i64, 0), start)
    zero = ir.Constant(vec, [0] * LANES)
    accs = [[bld.phi(vec, name=f"c{r}_{v}") for v in range(nv)] for r in range(MR)]
    for row in accs:
        for ph in row:
            ph.add_incoming(zero, start)
    bld.cbranch(bld.icmp_signed("<", g, k4), body, done)

    bld = ir.IRBuilder(body)
    bbase = bld.gep(b, [bld.mul(g, ir.Constant(i64, NR * 4))])
    bvals = [bld.load(bld.bitcast(bld.gep(bbase, [ir.Constant(i64, v * LANES * 4)]), vec.as_pointer()), align=1)
             for v in range(nv)]
    koff = bld.mul(g, ir.Constant(i64, 4))
    new = []
    for r in range(MR):
        word = bld.load(bld.bitcast(bld.gep(row_ptrs[r], [koff]), i32.as_pointer()), align=1)
        word = bld.xor(word, flip)
        splat = bld.shuffle_vector(bld.insert_element(ir.Constant(vec, ir.Undefined), word, ir.Constant(i32, 0)),
                                   ir.Constant(vec, ir.Undefined), ir.Constant(vec, [0] * LANES))
        new.append([dot(bld, accs[r][v], splat, bvals[v]) for v in range(nv)])
    g.add_incoming(bld.add(g, ir.Constant(i64, 1)), body)
    bld.branch(head)
    for r in range(MR):
        for v in range(nv):
            accs[r][v].add_incoming(new[r][v], body)

    _store_tile(ir.IRBuilder(done), accs, c, ldc)
    return fn


def _store_tile(bld: ir.IRBuilder, accs: list, c: ir.Value, ldc: ir.Value) -> None:
    """Stores the int32 accumulator vectors ``accs[r][v]`` at ``c + r*ldc + v*LANES`` and returns."""
    i64 = ir.IntType(64)
    for r, row in enumerate(accs):
        rowp = bld.gep(c, [bld.mul(ir.Constant(i64, r), ldc)])
        for v, acc in enumerate(row):
            bld.store(acc, bld.bitcast(bld.gep(rowp, [ir.Constant(i64, v * LANES)]), acc.type.as_pointer()), align=4)
    bld.ret_void()


def splat(bld: ir.IRBuilder, word: ir.Value, vec: ir.VectorType) -> ir.Value:
    """``word`` in every lane of ``vec``."""
    undef = ir.Constant(vec, ir.Undefined)
    return bld.shuffle_vector(bld.insert_element(undef, word, ir.Constant(ir.IntType(32), 0)), undef,
                              ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count))


def _add_conv_kernel(mod: ir.Module, name: str, vnni: bool, xdomain: bool = False) -> ir.Function:
    """``(ntaps, toff, cg, a, poff, rows, b, c, ldc)``: the MR x NR tile of a convolution over an NHWC
    uint8 input (channels padded to a multiple of 4), output pixels as rows::

        T[r, j] = sum_{t < ntaps} sum_{g < cg} sum_{u < 4} a[poff[r] + toff[t] + 4g + u] * b[((t*cg + g)*NR + j)*4 + u]

    ``poff[r]``: where pixel r's window starts (rows >= ``rows`` repeat the last), ``toff[t]``: tap t's
    offset from there, ``cg``: channels / 4; b: the taps' weight panels one after the other (as
    :func:`pack_b` packs a [ntaps * 4cg, NR] matrix).  The accumulators stay in registers over all the
    taps, so nothing is gathered (the A bytes are read where they lie) and A needs no XOR: its loads
    fold into ``vpbroadcastd`` from memory, which leaves the vector ports to ``vpdpbusd``.  ``xdomain``:
    the portable sums of A's bytes read as int8 x (the AVX2 form's, whose callers store a' ^ 0x80 =
    a' - 128 in A)."""
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    i64 = ir.IntType(64)
    i64p = i64.as_pointer()
    vec = ir.VectorType(i32, LANES)
    nv = NR // LANES
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, i64p, i64, i8p, i64p, i64, i8p, i32.as_pointer(),
                                                          i64, i64]), name=name)
    ntaps, toff, cg, a, poff, rows, b, c, ldc, _ = fn.args
    for arg, n in zip(fn.args, ("ntaps", "toff", "cg", "a", "poff", "rows", "b", "c", "ldc")):
        arg.name = n
    dot = _dot_vnni if vnni else _dot_x if xdomain else _dot_portable
    zero = ir.Constant(vec, [0] * LANES)
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    last = entry.sub(rows, ir.Constant(i64, 1))
    row_base = []
    for r in range(MR):
        rr = entry.select(entry.icmp_signed("<", ir.Constant(i64, r), rows), ir.Constant(i64, r), last)
        row_base.append(entry.gep(a, [entry.load(entry.gep(poff, [rr]))]))
    thead, tbody, ghead, gbody, tnext, done = (fn.append_basic_block(n) for n in
                                               ("thead", "tbody", "ghead", "gbody", "tnext", "done"))
    entry.branch(thead)

    bld = ir.IRBuilder(thead)
    t = bld.phi(i64, name="t")
    t_bp = bld.phi(i8p, name="tb")
    t_accs = [[bld.phi(vec) for _ in range(nv)] for _ in range(MR)]
    t.add_incoming(ir.Constant(i64, 0), entry.block)
    t_bp.add_incoming(b, entry.block)
    for row in t_accs:
        for ph in row:
            ph.add_incoming(zero, entry.block)
    bld.cbranch(bld.icmp_signed("<", t, ntaps), tbody, done)

    bld = ir.IRBuilder(tbody)
    off = bld.load(bld.gep(toff, [t]))
    rows_t = [bld.gep(rb, [off]) for rb in row_base]
    bld.branch(ghead)

    bld = ir.IRBuilder(ghead)
    g = bld.phi(i64, name="g")
    g_bp = bld.phi(i8p, name="gb")
    g_accs = [[bld.phi(vec) for _ in range(nv)] for _ in range(MR)]
    g.add_incoming(ir.Constant(i64, 0), tbody)
    g_bp.add_incoming(t_bp, tbody)
    for r in range(MR):
        for v in range(nv):
            g_accs[r][v].add_incoming(t_accs[r][v], tbody)
    bld.cbranch(bld.icmp_signed("<", g, cg), gbody, tnext)

    bld = ir.IRBuilder(gbody)
    bvals = [bld.load(bld.bitcast(bld.gep(g_bp, [ir.Constant(i64, v * LANES * 4)]), vec.as_pointer()), align=1)
             for v in range(nv)]
    koff = bld.mul(g, ir.Constant(i64, 4))
    new = []
    for r in range(MR):
        word = bld.load(bld.bitcast(bld.gep(rows_t[r], [koff]), i32.as_pointer()), align=1)
        bcast = splat(bld, word, vec)
        new.append([dot(bld, g_accs[r][v], bcast, bvals[v]) for v in range(nv)])
    g.add_incoming(bld.add(g, ir.Constant(i64, 1)), gbody)
    g_bp.add_incoming(bld.gep(g_bp, [ir.Constant(i64, NR * 4)]), gbody)
    for r in range(MR):
        for v in range(nv):
            g_accs[r][v].add_incoming(new[r][v], gbody)
    bld.branch(ghead)

    bld = ir.IRBuilder(tnext)
    t.add_incoming(bld.add(t, ir.Constant(i64, 1)), tnext)
    t_bp.add_incoming(g_bp, tnext)
    for r in range(MR):
        for v in range(nv):
            t_accs[r][v].add_incoming(g_accs[r][v], tnext)
    bld.branch(thead)

    _store_tile(ir.IRBuilder(done), t_accs, c, ldc)
    return fn


def _add_pointwise_kernel(mod: ir.Module, name: str, vnni: bool, xdomain: bool = False) -> ir.Function:
    """``(k4, w, ldw, rows, b, terms, mults, params, out, ldo)``: the MR x NR tile of a GEMM whose rows
    are signed weights and whose columns are unsigned bytes, requantized as it is stored::

        D[r, j] = sum_{g < k4} sum_{t < 4} int8(w[r*ldw + 4g + t]) * uint8(b[(g*NR + j)*4 + t])
        out[r*ldo + j] = saturate(rint(float32(D[r, j] + terms[r]) * mults[r]) + params[0])

    saturated to [params[1], params[2]] and stored as the low byte, for r < ``rows`` (rows past it
    read the last row's weights and store nothing) and all NR columns.  ``b`` is a panel in
    :func:`pack_b`'s layout but of unsigned bytes (:func:`_add_pack4` builds it from NCHW planes).
    The dot step takes the unsigned operand from the panel and the signed one broadcast from the weight
    row, the reverse of :func:`_add_kernel`: symmetric int8 weights need no shift, so the only
    zero-point term is a per-row constant (``-zx * rowsum(w)``, with the bias, in ``terms``) and no
    column sums are needed.  The requantization is the float32 formula of ``kernels_quant`` step for
    step (int32 wrap, one rounding per operation), so the bytes are the same.  ``xdomain``: the portable
    sums of w * (b - 128) (as :func:`_add_kernel`)."""
    i8 = ir.IntType(8)
    i8p = i8.as_pointer()
    i32 = ir.IntType(32)
    i64 = ir.IntType(64)
    f32t = ir.FloatType()
    vec = ir.VectorType(i32, LANES)
    fvec = ir.VectorType(f32t, LANES)
    nv = NR // LANES
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, i8p, i64, i64, i8p, i32.as_pointer(),
                                                          f32t.as_pointer(), f32t.as_pointer(), i8p, i64, i64]),
                     name=name)
    k4, w, ldw, rows, b, terms, mults, params, out, ldo, _ = fn.args
    for arg, n in zip(fn.args, ("k4", "w", "ldw", "rows", "b", "terms", "mults", "params", "out", "ldo")):
        arg.name = n
    dot = _dot_vnni if vnni else _dot_x if xdomain else _dot_portable
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    last = entry.sub(rows, ir.Constant(i64, 1))
    row_ptrs = []
    for r in range(MR):
        rr = entry.select(entry.icmp_signed("<", ir.Constant(i64, r), rows), ir.Constant(i64, r), last)
        row_ptrs.append(entry.gep(w, [entry.mul(rr, ldw)]))
    head, body, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    start = entry.block
    entry.branch(head)
    bld = ir.IRBuilder(head)
    g = bld.phi(i64, name="g")
    g.add_incoming(ir.Constant(i64, 0), start)
    zero = ir.Constant(vec, [0] * LANES)
    accs = [[bld.phi(vec, name=f"c{r}_{v}") for v in range(nv)] for r in range(MR)]
    for row in accs:
        for ph in row:
            ph.add_incoming(zero, start)
    bld.cbranch(bld.icmp_signed("<", g, k4), body, done)

    bld = ir.IRBuilder(body)
    bbase = bld.gep(b, [bld.mul(g, ir.Constant(i64, NR * 4))])
    bvals = [bld.load(bld.bitcast(bld.gep(bbase, [ir.Constant(i64, v * LANES * 4)]), vec.as_pointer()), align=1)
             for v in range(nv)]
    if xdomain:
        bvals = [bld.xor(v, ir.Constant(vec, [0x80808080 - 2**32] * LANES)) for v in bvals]
    koff = bld.mul(g, ir.Constant(i64, 4))
    new = []
    for r in range(MR):
        word = bld.load(bld.bitcast(bld.gep(row_ptrs[r], [koff]), i32.as_pointer()), align=1)
        bcast = splat(bld, word, vec)
        new.append([dot(bld, accs[r][v], bvals[v], bcast) for v in range(nv)])
    g.add_incoming(bld.add(g, ir.Constant(i64, 1)), body)
    bld.branch(head)
    for r in range(MR):
        for v in range(nv):
            accs[r][v].add_incoming(new[r][v], body)

    bld = ir.IRBuilder(done)
    zy, lo, hi = (fsplat(bld, bld.load(bld.gep(params, [ir.Constant(i64, i)])), fvec) for i in range(3))
    for r in range(MR):
        store, after = fn.append_basic_block(f"store{r}"), fn.append_basic_block(f"after{r}")
        bld.cbranch(bld.icmp_signed("<", ir.Constant(i64, r), rows), store, after)
        bld = ir.IRBuilder(store)
        requantize(bld, accs[r], bld.load(bld.gep(terms, [ir.Constant(i64, r)])),
                   bld.load(bld.gep(mults, [ir.Constant(i64, r)])), zy, lo, hi,
                   bld.gep(out, [bld.mul(ir.Constant(i64, r), ldo)]))
        bld.branch(after)
        bld = ir.IRBuilder(after)
    bld.ret_void()
    return fn


def requantize(bld: ir.IRBuilder, accs: list, term: ir.Value, mult: ir.Value, zy: ir.Value, lo: ir.Value,
               hi: ir.Value, rowp: ir.Value) -> None:
    """Stores ``saturate(rint(float32(acc + term) * mult) + zy)`` to [lo, hi] as bytes, the int32 vectors
    ``accs`` one after the other from ``rowp`` (``zy``, ``lo``, ``hi``: float vectors of their width)."""
    i64 = ir.IntType(64)
    at = 0
    for acc in accs:
        vec, n = acc.type, acc.type.count
        fvec = ir.VectorType(ir.FloatType(), n)
        bvec = ir.VectorType(ir.IntType(8), n)
        y = bld.fmul(bld.sitofp(bld.add(acc, splat(bld, term, vec)), fvec), fsplat(bld, mult, fvec))
        y = bld.fadd(_rint(bld, y), zy)
        y = bld.select(bld.fcmp_ordered(">", y, lo), y, lo)   # max(y, lo)
        y = bld.select(bld.fcmp_ordered("<", y, hi), y, hi)   # min(y, hi)
        q = bld.trunc(bld.fptosi(y, vec), bvec)
        bld.store(q, bld.bitcast(bld.gep(rowp, [ir.Constant(i64, at)]), bvec.as_pointer()), align=1)
        at += n


def fsplat(bld: ir.IRBuilder, value: ir.Value, fvec: ir.VectorType) -> ir.Value:
    undef = ir.Constant(fvec, ir.Undefined)
    return bld.shuffle_vector(bld.insert_element(undef, value, ir.Constant(ir.IntType(32), 0)), undef,
                              ir.Constant(ir.VectorType(ir.IntType(32), fvec.count), [0] * fvec.count))


def _rint(bld: ir.IRBuilder, y: ir.Value) -> ir.Value:
    """Round to nearest, ties to even (``np.rint`` in the default rounding mode)."""
    name = f"llvm.rint.v{y.type.count}f32"
    fn = bld.module.globals.get(name)
    if fn is None:
        fn = ir.Function(bld.module, ir.FunctionType(y.type, [y.type]), name=name)
    return bld.call(fn, [y])


def _add_pack4(mod: ir.Module, name: str) -> None:
    """``(src, plane, k4, dst, flip)``: NR columns of 4 * k4 rows of bytes, row k at ``src + k * plane``,
    as a column panel of :func:`_add_pointwise_kernel` (``dst[(g*NR + j)*4 + t] = src[(4g + t)*plane + j]
    ^ flip``): four rows interleaved byte by byte, 16 columns per vector shuffle (the NCHW planes of 4
    channels into 4 bytes per pixel)."""
    i8 = ir.IntType(8)
    i8p = i8.as_pointer()
    i16 = ir.IntType(16)
    i32 = ir.IntType(32)
    i64 = ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i8p, i64, i64, i8p, i64]), name=name)
    src, plane, k4, dst, flip = fn.args
    for arg, n in zip(fn.args, ("src", "plane", "k4", "dst", "flip")):
        arg.name = n
    v16 = ir.VectorType(i8, 16)
    v64 = ir.VectorType(i8, 64)
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    fb = entry.trunc(flip, i8)
    flipv = entry.shuffle_vector(entry.insert_element(ir.Constant(v64, ir.Undefined), fb, ir.Constant(i32, 0)),
                                 ir.Constant(v64, ir.Undefined), ir.Constant(ir.VectorType(i32, 64), [0] * 64))
    head, body, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    entry.branch(head)
    bld = ir.IRBuilder(head)
    g = bld.phi(i64, name="g")
    g.add_incoming(ir.Constant(i64, 0), entry.block)
    bld.cbranch(bld.icmp_signed("<", g, k4), body, done)
    bld = ir.IRBuilder(body)
    base = bld.gep(src, [bld.mul(bld.mul(g, ir.Constant(i64, 4)), plane)])
    rows = [bld.gep(base, [bld.mul(ir.Constant(i64, t), plane)]) for t in range(4)]
    out = bld.gep(dst, [bld.mul(g, ir.Constant(i64, NR * 4))])
    pair = ir.Constant(ir.VectorType(i32, 32), [i // 2 + 16 * (i % 2) for i in range(32)])
    for c in range(NR // 16):
        a, b_, c_, d = (bld.load(bld.bitcast(bld.gep(rp, [ir.Constant(i64, 16 * c)]), v16.as_pointer()), align=1)
                        for rp in rows)
        ab = bld.bitcast(bld.shuffle_vector(a, b_, pair), ir.VectorType(i16, 16))
        cd = bld.bitcast(bld.shuffle_vector(c_, d, pair), ir.VectorType(i16, 16))
        quad = bld.bitcast(bld.shuffle_vector(ab, cd, pair), v64)
        bld.store(bld.xor(quad, flipv), bld.bitcast(bld.gep(out, [ir.Constant(i64, 64 * c)]), v64.as_pointer()),
                  align=1)
    g.add_incoming(bld.add(g, ir.Constant(i64, 1)), body)
    bld.branch(head)
    ir.IRBuilder(done).ret_void()


def _add_wscan(mod: ir.Module) -> None:
    """``(p, n) -> i64``: 1 when no byte of ``p[:n]`` is -128: a running ``vpminsb`` over 32 bytes at a
    time, then the tail byte by byte (numba's loop over the bytes ran at 6 GB/s, as long as a 1-row
    GEMM call over the same panel)."""
    i8, i64 = ir.IntType(8), ir.IntType(64)
    v32 = ir.VectorType(i8, 32)
    fn = ir.Function(mod, ir.FunctionType(i64, [i8.as_pointer(), i64]), name=SYMBOL_WSCAN)
    p, n = fn.args
    def declare(name: str, ret: ir.Type, args: list) -> ir.Function:
        fn = mod.globals.get(name)
        return fn if fn is not None else ir.Function(mod, ir.FunctionType(ret, args), name=name)
    smin_v = declare("llvm.smin.v32i8", v32, [v32, v32])
    smin_s = declare("llvm.smin.i8", i8, [i8, i8])
    reduce = declare("llvm.vector.reduce.smin.v32i8", i8, [v32])
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    nv = entry.ashr(n, ir.Constant(i64, 5))
    vhead, vbody, vdone, thead, tbody, done = (fn.append_basic_block(x) for x in
                                               ("vhead", "vbody", "vdone", "thead", "tbody", "done"))
    entry.branch(vhead)
    bld = ir.IRBuilder(vhead)
    i = bld.phi(i64)
    m = bld.phi(v32)
    i.add_incoming(ir.Constant(i64, 0), entry.block)
    m.add_incoming(ir.Constant(v32, [127] * 32), entry.block)
    bld.cbranch(bld.icmp_signed("<", i, nv), vbody, vdone)
    bld = ir.IRBuilder(vbody)
    v = bld.load(bld.bitcast(bld.gep(p, [bld.mul(i, ir.Constant(i64, 32))]), v32.as_pointer()), align=1)
    m.add_incoming(bld.call(smin_v, [m, v]), vbody)
    i.add_incoming(bld.add(i, ir.Constant(i64, 1)), vbody)
    bld.branch(vhead)
    bld = ir.IRBuilder(vdone)
    j0, low0 = bld.mul(nv, ir.Constant(i64, 32)), bld.call(reduce, [m])
    bld.branch(thead)
    bld = ir.IRBuilder(thead)
    j = bld.phi(i64)
    low = bld.phi(i8)
    j.add_incoming(j0, vdone)
    low.add_incoming(low0, vdone)
    bld.cbranch(bld.icmp_signed("<", j, n), tbody, done)
    bld = ir.IRBuilder(tbody)
    low.add_incoming(bld.call(smin_s, [low, bld.load(bld.gep(p, [j]))]), tbody)
    j.add_incoming(bld.add(j, ir.Constant(i64, 1)), tbody)
    bld.branch(thead)
    bld = ir.IRBuilder(done)
    bld.ret(bld.zext(bld.icmp_signed("!=", low, ir.Constant(i8, -128)), i64))


def _add_shift(mod: ir.Module, shift: int) -> None:
    fn = ir.Function(mod, ir.FunctionType(ir.IntType(64), []), name=SYMBOL_SHIFT)
    ir.IRBuilder(fn.append_basic_block("entry")).ret(ir.Constant(ir.IntType(64), shift))


def int8_module(form: bool | str) -> ir.Module:
    """The module of one form of the kernels (``True`` / ``False``: ``vnni`` / ``portable``; ``vnni``
    needs avx512vnni to compile, ``avx2`` AVX2)."""
    form = _form_name(form)
    mod = ir.Module(name="rammer_ukernel_int8")
    if form == "avx2":
        from . import ukernel_int8_avx2 as avx2  # its builders import this module's helpers

        # the portable sums of the same shifted values, for the calls whose weights hold a -128
        exact = (_add_kernel(mod, SYMBOL + "_x", False, True), _add_conv_kernel(mod, SYMBOL_CONV + "_x", False, True),
                 _add_pointwise_kernel(mod, SYMBOL_PW + "_x", False, True))
        for fn in exact:
            fn.linkage = "internal"
        avx2.add_gemm_kernel(mod, SYMBOL, exact[0])
        avx2.add_conv_kernel(mod, SYMBOL_CONV, exact[1])
        avx2.add_pointwise_kernel(mod, SYMBOL_PW, exact[2])
    else:
        _add_kernel(mod, SYMBOL, form == "vnni")
        _add_conv_kernel(mod, SYMBOL_CONV, form == "vnni")
        _add_pointwise_kernel(mod, SYMBOL_PW, form == "vnni")
    _add_pack4(mod, SYMBOL_PACK4)
    _add_shift(mod, SHIFTS[form])
    _add_wscan(mod)
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
    """The convolution kernel (:func:`_add_conv_kernel`) of one form as a ctypes function, as :func:`cfunc`."""
    return CONV_CFUNCTYPE(_engine(form).get_function_address(SYMBOL_CONV))


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
    """The convolution tile (:func:`_add_conv_kernel`): ``toff`` / ``poff`` int64 arrays of tap and
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
    """The pointwise kernel (:func:`_add_pointwise_kernel`) of one form and the interleave
    (:func:`_add_pack4`) as ctypes functions, as :func:`cfunc` (its sums short of ``sum w * b`` by
    ``SHIFTS[form] * rowsum(w)`` before the requantization)."""
    engine = _engine(form)
    return (PW_CFUNCTYPE(engine.get_function_address(SYMBOL_PW)),
            PACK4_CFUNCTYPE(engine.get_function_address(SYMBOL_PACK4)))


@uses(SYMBOL_PW)
@intrinsic
def ukernel_int8_pw(typingctx, k4, W, w_off, ldw, rows, Bp, b_off, T, t_off, M, m_off, P, p_off, O, o_off, ldo,
                    wsafe):
    """The pointwise tile (:func:`_add_pointwise_kernel`): weight rows and the column panel are bytes,
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
    """The interleave (:func:`_add_pack4`) from bytes ``S[s_off:]`` into ``D[d_off:]``."""
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
    whose weights are those bytes (checked once by a task, not at every call; :func:`_add_wscan`)."""
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
