"""The fused elementwise rKernel: a block interpreter over register programs.

A program (see :mod:`.ewops`) describes one fused group over a 4-D
iteration space ``(d0, d1, d2, d3)``; an rTask covers rows ``[r0, r1)`` of the
flattened first three dimensions and columns ``[c0, c1)`` of ``d3``.  Each
block of up to ``BLOCK`` columns is loaded into scratch registers (strided,
broadcast or contiguous), every instruction runs as one tight, vectorizable
loop over the block, and the outputs are stored.  Intermediate values of the
group never leave L1: that is the memory round trip fusion removes.

The same routine runs GEMM and convolution epilogues (bias, residual add,
activation) over the tile the GEMM just wrote.
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import (
    _numba_cache,  # noqa: F401  (drops stale numba caches first)
    machine_code,
)
from .atomics import copy_block
from .ewops import (
    BLOCK,
    DT_F32,
    DT_I32,
    DT_I64,
    HDR_INT,
    HDR_LEN,
    IBLOCK,
    IN_LEN,
    INSTR_LEN,
    IREG,
    OUT_LEN,
)
from .kernels_data import advance_rows, next_row, row_index
from .kernels_ew_direct import direct_chain
from .kernels_ew_int import FIRST_INT, int_instr
from .kernels_ew_ops import ADD, WHERE, binary_loop, unary_loop

f32 = np.float32
_JIT = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
@njit(**_JIT)
def _load(F, B, I, J, dt, off, s, d, di, n):
    """Register = source[off + j*s] for j < n: float32 and bool into the float register F[d:]
    (bool as 0/1), int64 and int32 into the integer register I[di:] (see :mod:`.kernels_ew_int`)."""
    if dt == DT_I64 or dt == DT_I32:
        Di = I[di:di + n]
        if dt == DT_I32:
            for j in range(n):
                Di[j] = np.int64(J[np.uint64(off + j * s)])
        elif s == 1:
            copy_block(I, di, off, n)
        else:
            for j in range(n):
                Di[j] = I[np.uint64(off + j * s)]
        return
    if dt == DT_F32:
        if s == 1:
            # memcpy: a copy loop between two slices of F stays scalar (possible overlap)
            copy_block(F, d, off, n)
            return
        D = F[d:d + n]
        if s == 0:
            v = F[off]
            for j in range(n):
                D[j] = v
        else:
            for j in range(n):
                D[j] = F[np.uint64(off + j * s)]
        return
    D = F[d:d + n]
    for j in range(n):
        D[j] = f32(B[np.uint64(off + j * s)])


@njit(**_JIT)
def _store(F, B, I, J, dt, off, s, a, ai, n):
    """target[off + j*s] = register for j < n: float32 and bool from the float register F[a:]
    (bool as != 0), int64 and int32 from the integer register I[ai:] (int32 keeps the low bits)."""
    if dt == DT_I64:
        if s == 1:
            copy_block(I, off, ai, n)
            return
        for j in range(n):
            I[np.uint64(off + j * s)] = I[np.uint64(ai + j)]
        return
    if dt == DT_I32:
        Ai = I[ai:ai + n]
        for j in range(n):
            J[np.uint64(off + j * s)] = np.int32(Ai[j])
        return
    if dt == DT_F32:
        if s == 1:
            copy_block(F, off, a, n)
            return
        for j in range(n):
            F[np.uint64(off + j * s)] = F[np.uint64(a + j)]
        return
    A = F[a:a + n]
    for j in range(n):
        B[np.uint64(off + j * s)] = 1 if A[j] != f32(0.0) else 0


@njit(inline="always")
def _reg(r, sbase, m0, m1, m2, m3):
    """Where register ``r`` lies in F: its scratch slot, or for the first four registers (inputs)
    the input's own memory where ``m0`` .. ``m3`` give it (-1: not mapped)."""
    if r < 4:
        m = m0 if r == 0 else m1 if r == 1 else m2 if r == 2 else m3
        if m >= 0:
            return m
    return sbase + r * BLOCK


@njit(**_JIT)
def _exec(F, I, X, R, code, ninstr, sbase, ibase, n, m0, m1, m2, m3):
    """Run the program's instructions over the first ``n`` elements of every register (registers
    0-3 read from the inputs' memory where ``m0`` .. ``m3`` map them, see :func:`_reg`)."""
    for k in range(ninstr):
        q = code + k * INSTR_LEN
        op = X[q]
        if op >= FIRST_INT:
            int_instr(op, F, I, X, q, sbase, ibase, n)
            continue
        dst = sbase + X[q + 1] * BLOCK
        a = _reg(X[q + 2], sbase, m0, m1, m2, m3)
        D = F[dst:dst + n]
        A = F[a:a + n]
        if op >= ADD:
            b = _reg(X[q + 3], sbase, m0, m1, m2, m3)
            Bv = F[b:b + n]
            if op == WHERE:
                e = _reg(X[q + 4], sbase, m0, m1, m2, m3)
                E = F[e:e + n]
                for j in range(n):
                    D[j] = Bv[j] if A[j] != f32(0.0) else E[j]
            else:
                binary_loop(op, D, A, Bv, n)
        else:
            imm = X[q + 5]
            p0 = R[imm] if imm >= 0 else f32(0.0)
            p1 = R[imm + 1] if imm >= 0 else f32(0.0)
            unary_loop(op, D, A, n, p0, p1)


@njit(**_JIT)
def _unwritten_inputs(X, code, ninstr, nin, outs, nout):
    """Bits 0-3: the first four inputs whose registers no instruction writes (the register allocator
    may reuse an input's register after its last read: such an input must be copied, or the
    instruction would write the tensor itself) and no output stores (a store of one output may
    overwrite, in place, the input another output is stored from)."""
    bits = 0
    for k in range(min(nin, 4)):
        bits |= 1 << k
    for k in range(ninstr):
        d = X[code + k * INSTR_LEN + 1]
        if d < 4:
            bits &= ~(1 << d)
    for k in range(nout):
        d = X[outs + k * OUT_LEN]
        if d < 4:
            bits &= ~(1 << d)
    return bits


@njit(**_JIT)
def _row_linear(X, q, d0, d1, d2, d3):
    """Whether operand strides ``X[q:q+4]`` place row r's columns at ``r * d3 + c`` (rows back to back)."""
    return (X[q + 3] == 1 and (d2 == 1 or X[q + 2] == d3) and (d1 == 1 or X[q + 1] == d2 * d3)
            and (d0 == 1 or X[q] == d1 * d2 * d3))


@njit(**_JIT)
def _row_periodic(X, q, d0, d1, d2):
    """Whether operand strides ``X[q:q+4]`` give every row the same contiguous run of columns
    (a per-column constant such as a bias or a scaler's offsets broadcast over the rows)."""
    return X[q + 3] == 1 and (d0 == 1 or X[q] == 0) and (d1 == 1 or X[q + 1] == 0) and (d2 == 1 or X[q + 2] == 0)


@njit(inline="always")
def _copy_run(F, dst, src, n):
    """F[dst:dst + n] = F[src:src + n] (not overlapping) inline, in 16-float vector moves: a short
    row's memcpy call cost more than its copy, and a loop within F stays scalar."""
    u = 0
    while u + 16 <= n:
        copy_block(F, dst + u, src + u, 16)
        u += 16
    D = F[dst + u:dst + n]
    S = F[src + u:src + n]
    for v in range(n - u):
        D[v] = S[v]


@njit(**_JIT)
def _transposed_rows(F, X, q, reg, nrows, i0, i1, i2, d1, d2, d3):
    """:func:`_row_pieces`' load of ``nrows`` whole rows of a float input that is a transposed view
    (adjacent rows adjacent in memory, ``X[q + 4] == 1``; columns ``s3`` apart): column by column
    over runs of adjacent rows, so each cache line read gives a run of elements.  Row
    by row, a [128, 4096] plane read by columns touched a new line per element, all in the same few
    cache sets (its stride a multiple of 4 KiB): 3 ns an element."""
    s3 = X[q + 5]
    t = 0
    while t < nrows:
        run = min(d2 - i2, nrows - t)
        base = X[q + 1] + i0 * X[q + 2] + i1 * X[q + 3] + i2
        for c in range(d3):
            at = base + c * s3
            R = F[reg + t * d3 + c:reg + (t + run) * d3]
            for u in range(run):
                R[u * d3] = F[np.uint64(at + u)]
        t += run
        i0, i1, i2 = advance_rows(i0, i1, i2, run, d1, d2)


@njit(**_JIT)
def _row_pieces(F, B, I, J, X, q, reg, ireg, n, e, d1, d2, d3, store):
    """Registers F[reg:reg + n] and elements [e, e + n) of a whole-rows run of an operand laid out
    neither row after row nor one row repeated (a permuted or sliced view: attention's heads, a
    rotary half): loaded (or, with ``store``, stored) one row segment at a time.  ``X[q:]`` is the
    operand's dtype, offset and strides (d0, d1, d2, d3)."""
    r = e // d3
    c = e - r * d3
    i0, i1, i2 = row_index(r, d1, d2)
    dt = X[q]
    s3 = X[q + 5]
    if not store and dt == DT_F32 and s3 != 1 and X[q + 4] == 1 and d2 > 1 and c == 0 and n % d3 == 0:
        _transposed_rows(F, X, q, reg, n // d3, i0, i1, i2, d1, d2, d3)
        return
    j = 0
    while j < n:
        seg = min(d3 - c, n - j)
        off = X[q + 1] + i0 * X[q + 2] + i1 * X[q + 3] + i2 * X[q + 4] + c * s3
        if dt == DT_F32 and s3 == 1:
            if store:
                _copy_run(F, off, reg + j, seg)
            else:
                _copy_run(F, reg + j, off, seg)
        elif store:
            _store(F, B, I, J, dt, off, s3, reg + j, ireg + j, seg)
        else:
            _load(F, B, I, J, dt, off, s3, reg + j, ireg + j, seg)
        j += seg
        c = 0
        i0, i1, i2 = next_row(i0, i1, i2, d1, d2)


@njit(**_JIT)
def _row_fill(F, B, I, J, X, q, reg, ireg, n, e, d1, d2, d3):
    """Registers F[reg:reg + n] = input ``q`` (constant along a row) for elements [e, e + n) of a
    whole-rows run: one value per row segment (a bias per output channel)."""
    r = e // d3
    c = e - r * d3
    i0, i1, i2 = row_index(r, d1, d2)
    j = 0
    f32_src = X[q] == DT_F32
    while j < n:
        seg = min(d3 - c, n - j)
        off = X[q + 1] + i0 * X[q + 2] + i1 * X[q + 3] + i2 * X[q + 4]
        if f32_src:
            # inline rather than _load(..., s=0): a call per 1-4 element segment
            # costs 2.5x on a 2x2 plane's epilogue.  Through a slice indexed from 0: F[u] with a
            # signed u carries a negative-index fix-up per element, which kept the fill scalar.
            v = F[off]
            D = F[reg + j:reg + j + seg]
            for u in range(seg):
                D[u] = v
        else:
            _load(F, B, I, J, X[q], off, 0, reg + j, ireg + j, seg)
        j += seg
        c = 0
        i0, i1, i2 = next_row(i0, i1, i2, d1, d2)


@njit(**_JIT)
def _row_tile(F, B, I, J, X, q, reg, ireg, n, e, d3):
    """Registers F[reg:reg + n] = input ``q`` (the same run of d3 columns in every row) for elements
    [e, e + n) of a whole-rows run: the row's columns copied once per row segment."""
    c = e % d3
    base = X[q + 1]
    f32_src = X[q] == DT_F32
    j = 0
    while j < n:
        seg = min(d3 - c, n - j)
        if f32_src and seg < 16:
            # inline: a call per short row segment costs more than the copy
            D = F[reg + j:reg + j + seg]
            S = F[base + c:base + c + seg]
            for u in range(seg):
                D[u] = S[u]
        elif f32_src:
            copy_block(F, reg + j, base + c, seg)  # memcpy: a loop within F stays scalar
        else:
            _load(F, B, I, J, X[q], base + c, 1, reg + j, ireg + j, seg)
        j += seg
        c = 0


@njit(**_JIT)
def ew_run(F, B, I, J, X, R, prog, r0, r1, c0, c1, sbase):
    """Run program ``X[prog:]`` over rows [r0, r1) and columns [c0, c1).

    ``sbase`` is the float offset of this vEU's scratch registers in ``F``.

    Blocks are normally row pieces.  When the task covers whole short rows
    (a GEMM or convolution epilogue over a small output plane: a 2x2 plane
    has rows of 4; attention's heads of 32-128 columns), a block spans many
    rows instead (*whole-rows mode*): row-linear operands load and store as one
    contiguous run of ``r * d3 + c`` elements (float inputs read in place),
    operands constant along a row are filled row segment by row segment
    (:func:`_row_fill`), operands that repeat one row of columns (a per-column
    bias or scale over [rows, few columns]) are tiled row by row (:func:`_row_tile`),
    and any other operand (a permuted or sliced view) is gathered, or stored, one
    row segment at a time (:func:`_row_pieces`), so the program's dispatch is paid
    per block rather than per row.  Rotary embeddings over [heads, 128, 64] views
    ran 2-4x onnxruntime's time a row at a time, 0.7-1.1x so (ci/micro_ew_views.py).

    A program with integer values runs blocks of IBLOCK elements, its integer registers laid over
    the same scratch slots from ``ibase`` (:mod:`.kernels_ew_int`).
    """
    nin = X[prog]
    nout = X[prog + 1]
    ninstr = X[prog + 2]
    d0 = X[prog + 4]
    d1 = X[prog + 5]
    d2 = X[prog + 6]
    d3 = X[prog + 7]
    blk = IBLOCK if X[prog + HDR_INT] else BLOCK
    ibase = (sbase + 1) // 2
    ins = prog + HDR_LEN
    code = ins + nin * IN_LEN
    outs = code + ninstr * INSTR_LEN
    if not X[prog + HDR_INT] and direct_chain(F, X, R, ins, nin, code, ninstr, outs, nout, d1, d2, r0, r1, c0,
                                              c1):
        return
    rows = c0 == 0 and c1 == d3 and 2 * d3 <= blk and r1 - r0 > 1
    # float programs read their contiguous float inputs where they lie instead of copying them into
    # registers (a pass per input per block): inputs 0-3 whose registers no instruction writes
    mappable = 0 if X[prog + HDR_INT] else _unwritten_inputs(X, code, ninstr, nin, outs, nout)
    # position: whole-rows mode walks elements e of [r0 * d3, r1 * d3); row mode walks (r, c)
    e = r0 * d3
    e1 = r1 * d3
    r = r0
    c = c0
    i0 = i1 = i2 = 0
    while (e < e1) if rows else (r < r1):
        if rows:
            n = min(blk - blk % d3, e1 - e)  # whole rows (a transposed operand loads by columns)
        else:
            if c == c0:
                i0, i1, i2 = row_index(r, d1, d2)
            n = min(blk, c1 - c)
        m0 = m1 = m2 = m3 = -1
        for k in range(nin):
            q = ins + k * IN_LEN
            reg = sbase + k * BLOCK
            ireg = ibase + k * IREG
            s3 = X[q + 5]
            at = -1  # where the block's elements lie one after another in memory, when they do
            if not rows:
                off = X[q + 1] + i0 * X[q + 2] + i1 * X[q + 3] + i2 * X[q + 4] + c * s3
                if s3 == 1:
                    at = off
                else:
                    _load(F, B, I, J, X[q], off, s3, reg, ireg, n)
            elif s3 == 0:
                _row_fill(F, B, I, J, X, q, reg, ireg, n, e, d1, d2, d3)
            elif _row_periodic(X, q + 2, d0, d1, d2):
                _row_tile(F, B, I, J, X, q, reg, ireg, n, e, d3)
            elif _row_linear(X, q + 2, d0, d1, d2, d3):
                at = X[q + 1] + e
            else:
                _row_pieces(F, B, I, J, X, q, reg, ireg, n, e, d1, d2, d3, False)
            if at >= 0:
                if (mappable >> k) & 1 and X[q] == DT_F32:
                    if k == 0:
                        m0 = at
                    elif k == 1:
                        m1 = at
                    elif k == 2:
                        m2 = at
                    else:
                        m3 = at
                else:
                    _load(F, B, I, J, X[q], at, 1, reg, ireg, n)
        _exec(F, I, X, R, code, ninstr, sbase, ibase, n, m0, m1, m2, m3)
        for k in range(nout):
            q = outs + k * OUT_LEN
            reg = sbase + X[q] * BLOCK
            ireg = ibase + X[q] * IREG
            if rows:
                if _row_linear(X, q + 3, d0, d1, d2, d3):
                    _store(F, B, I, J, X[q + 1], X[q + 2] + e, 1, reg, ireg, n)
                else:
                    _row_pieces(F, B, I, J, X, q + 1, reg, ireg, n, e, d1, d2, d3, True)
            else:
                s3 = X[q + 6]
                off = X[q + 2] + i0 * X[q + 3] + i1 * X[q + 4] + i2 * X[q + 5] + c * s3
                _store(F, B, I, J, X[q + 1], off, s3, reg, ireg, n)
        e += n
        c += n
        if c >= c1:
            c = c0
            r += 1


# -- the interpreter as one C-callable function ------------------------------------------
#
# Every kernel with a fused epilogue (GEMM, convolutions, pooling) used to call
# ew_run directly, and LLVM then inlined and re-optimized the whole interpreter
# (one vectorized loop per opcode) into each of them: a fresh install compiled
# it five times over.  Instead it is compiled once, as a cfunc whose address is
# registered as an LLVM symbol, and the kernels call that symbol
# (:func:`ew_epilogue`); the cost is one indirect call per epilogue block.

EPILOGUE_SYMBOL = "rammer_cpu_ew_epilogue"
_EPILOGUE_SIG = types.int64(types.voidptr, types.int64, types.voidptr, types.int64, types.voidptr, types.int64,
                            types.int64, types.int64, types.int64, types.int64, types.int64, types.int64)
_EPILOGUE: list = []


@njit(**_JIT)
def arena_views(arena, nbytes, x, nx, r, nr):
    """The typed views every kernel takes, from the raw pointers of a C entry:
    the arena as float32 ``F``, bool ``B``, int64 ``I`` and int32 ``J``, the side tables ``X`` and ``R``."""
    return (carray(arena, (nbytes // 4,), np.float32), carray(arena, (nbytes,), np.uint8),
            carray(arena, (nbytes // 8,), np.int64), carray(arena, (nbytes // 4,), np.int32),
            carray(x, (nx,), np.int64), carray(r, (nr,), np.float32))


def _epilogue_entry(arena, nbytes, x, nx, r, nr, prog, r0, r1, c0, c1, sbase):
    F, B, I, J, X, R = arena_views(arena, nbytes, x, nx, r, nr)
    ew_run(F, B, I, J, X, R, prog, r0, r1, c0, c1, sbase)
    return 0


def epilogue_micro_kernels() -> set[str]:
    """The micro-kernel symbols the interpreter's entry calls (:mod:`.ukernel_ew`'s)."""
    if not _EPILOGUE_SYMBOLS:
        _EPILOGUE_SYMBOLS.update(machine_code.symbols_called(_epilogue_entry))
    return set(_EPILOGUE_SYMBOLS)


_EPILOGUE_SYMBOLS: set[str] = set()


def ensure_epilogue_symbol() -> int:
    """Compile (or load from numba's cache) the interpreter's entry and register its address
    as :data:`EPILOGUE_SYMBOL`.  Must run before any kernel that calls :func:`ew_epilogue` is
    compiled or loaded from the cache (``entries.entry_address`` does it first)."""
    if not _EPILOGUE:
        # the interpreter's vector kernels first: cached code links against them by name
        machine_code.ensure_symbols(epilogue_micro_kernels())
        fn = cfunc(_EPILOGUE_SIG, nopython=True, nogil=True, cache=True)(_epilogue_entry)
        llvm.add_symbol(EPILOGUE_SYMBOL, fn.address)
        _EPILOGUE.append(fn)
    return _EPILOGUE[0].address


@intrinsic
def ew_epilogue(typingctx, F, X, R, prog, r0, r1, c0, c1, sbase):
    """``ew_run(F, B, I, J, X, R, prog, r0, r1, c0, c1, sbase)`` through :data:`EPILOGUE_SYMBOL`
    (B, I, J are rebuilt from the arena ``F``)."""
    if not (isinstance(F, types.Array) and F.dtype == types.float32 and isinstance(X, types.Array)
            and X.dtype == types.int64 and isinstance(R, types.Array) and R.dtype == types.float32):
        return None
    sig = types.none(F, X, R, prog, r0, r1, c0, c1, sbase)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        vp = ir.IntType(8).as_pointer()
        s = signature.args

        def base_and_size(k, itemsize):
            ary = context.make_array(s[k])(context, builder, args[k])
            n = builder.extract_value(ary.shape, 0)
            return builder.bitcast(ary.data, vp), builder.mul(n, ir.Constant(i64, itemsize)) if itemsize else n

        fp, fbytes = base_and_size(0, 4)
        xp, nx = base_and_size(1, 0)
        rp, nr = base_and_size(2, 0)
        scalars = [context.cast(builder, args[k], s[k], types.int64) for k in range(3, 9)]
        fnty = ir.FunctionType(i64, [vp, i64, vp, i64, vp, i64] + [i64] * 6)
        fn = cgutils.get_or_insert_function(builder.module, fnty, EPILOGUE_SYMBOL)
        builder.call(fn, [fp, fbytes, xp, nx, rp, nr] + scalars)
        return context.get_dummy_value()

    return sig, codegen


@njit(**_JIT)
def k_ew(F, B, I, J, X, R, p, sbase):
    """Task row: [prog, r0, r1, c0, c1]; a negative ``prog`` is ``-1 - t`` for a table at X[t]:
    a count, then that many programs of one 4-D space, each run over the row's rows and columns
    (a group whose operands collapse to more than 4 dims, one program per outer index)."""
    if p[0] >= 0:
        ew_epilogue(F, X, R, p[0], p[1], p[2], p[3], p[4], sbase)
        return
    t = -1 - p[0]
    for k in range(X[t]):
        ew_epilogue(F, X, R, X[t + 1 + k], p[1], p[2], p[3], p[4], sbase)
