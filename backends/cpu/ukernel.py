"""A register-blocked SIMD GEMM micro-kernel, generated as LLVM IR for this CPU.

The OpenBLAS that scipy bundles picks its AVX2 ("Haswell") kernels on every
x86 CPU it does not know, so on AVX-512 machines it reaches about half of
the core's peak.  This module writes the inner kernel of a GEMM directly in
LLVM IR with ``<W x float>`` vectors::

    C[MR x NR] (+)= A_packed[MR x k] . B_packed[k x NR]

keeping the MR x NR accumulators in vector registers (loop-carried phi
nodes) and issuing one broadcast and NR/W fused multiply-adds per row per
k step, then compiles it with llvmlite for the host CPU (so LLVM uses the
widest vector unit there is) and registers its address as a symbol the
numba kernels call (see :func:`ukernel`).  The packing and blocking loops
around it are ordinary numba code (:mod:`.kernels_gemm`).

With AVX-512 the tile is 12 x 32 (24 zmm accumulators); elsewhere 6 x 16
(AVX2: 12 ymm accumulators).

A second kernel, the *pixel-row* kernel (:func:`ukernel_rows`), serves
convolutions without any packing of the input: its PX_MR rows are output
pixels read straight from the (padded) input planes through two offset
tables, one per k (channel and tap) and one per row (pixel), and its PX_NR
columns are output channels (packed weights).  It stores the tile
transposed, PX_MR consecutive pixels per output channel, which is the NCHW
layout of the output.  8 x 32 with AVX-512 (16 accumulators), 4 x 24 otherwise (12 of the 16
ymm registers; a group's last one or two panels 4 x 16, :data:`PX_NR_NARROW`).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .machine_code import HOST_FEATURES, MachineCode, arrays_are, call_codegen, uses

SYMBOL = "rammer_cpu_ukernel"
ROWS_SYMBOL = "rammer_cpu_ukernel_rows"
LDB_SYMBOL = "rammer_cpu_ukernel_ldb"
#: Row counts of the strided-B kernel's short variants (``LDB_SYMBOL`` + rows): a last A panel
#: of 4 or 8 real rows (64 channels, or 128, in panels of 12) costs what it holds, not 12 rows.
LDB_SHORT_ROWS = (4, 8)
#: The same short row counts for the packed kernel (``SYMBOL`` + rows): a GEMM of 4 or 8 token rows
#: against a weight packed at compile time (a decoder's or a short sequence's projections) costs
#: 4 or 8 rows of multiply-adds, not MR.
PACKED_SHORT_ROWS = LDB_SHORT_ROWS
#: Epilogue flags of the strided-B and pixel-row kernels (a conv's bias, residual Add and ReLU
#: applied as the tile is stored).
EPI_ACCUMULATE, EPI_BIAS, EPI_RESIDUAL, EPI_RELU = 1, 2, 4, 8
#: With EPI_RELU: the ReLU is a ReLU6 (``Clip(x, 0, 6)``, MobileNet's activation), also capped at 6.
EPI_RELU6 = 16
#: Instead of a ReLU: HardSwish, ``x * clip(x + 3, 0, 6) / 6`` (MobileNetV3, PP-OCR).
EPI_HSWISH = 32
#: Instead of a ReLU: SiLU, ``x * sigmoid(x)`` (YOLOv5/v8, EfficientNet).
EPI_SILU = 64


#: K steps ahead that the kernels streaming a B panel prefetch its rows (into L1): a packed weight
#: panel of KC x NR floats (48-64 KiB at KC 384-512) does not fit L1 beside the A panel, and each
#: k step reads 128 new bytes of it.  16 steps (2 KiB ahead): the linear grid of ci/micro_gemm.py
#: went from 1.04-1.08x to 0.93-0.98x onnxruntime, linear + GELU from 1.27-1.30x to 1.08-1.09x
#: (0 turns it off; 4 and 8 gained less).
PF_PACKED = 16
#: The same for the strided-B kernel (pointwise convolutions reading their input planes in place).
PF_LDB = 16
#: The same for the pixel-row kernel (convolutions: B is the packed weight panel).
PF_ROWS = 0

WIDTH = 16 if "avx512f" in HOST_FEATURES else 8
MR, NR = (12, 32) if WIDTH == 16 else (6, 16)
#: The pixel-row tile.  With AVX2 (16 ymm registers) 4 x 24: 12 accumulators, 3 weight vectors and a
#: broadcast, where 4 x 16 left 8 accumulators, as many as the two FMA pipes' 4-cycle latency needs,
#: and paid a table load and 4 broadcasts per 8 FMAs.  The kernel alone on Zen 3 (k = 2304 taps,
#: through ctypes, CPU time, load 7): 4 x 16 50 GF/s, 4 x 24 60, 4 x 32 45 (spills), 8 x 16 29
#: (spills), 8 x 8 42; the convs are in docs/benchmarks.md (s9-cnn).
PX_MR, PX_NR = (8, 32) if WIDTH == 16 else (4, 24)
#: Width of a group's last panels of output channels when PX_NR would pad them: a group's channels
#: (rounded up to 8) run in PX_NR-wide panels and then up to two of this width (64 = 24 + 24 + 16,
#: 128 = 4 x 24 + 2 x 16), see ``kernels_conv.pixel_row_panels``.  PX_NR itself: one width (AVX-512).
PX_NR_NARROW = PX_NR if WIDTH == 16 else 16
ROWS_NARROW_SYMBOL = ROWS_SYMBOL + "_narrow"


def ldb_symbol(rows: int) -> str:
    """The strided-B kernel's symbol for a panel of ``rows`` rows (MR: the full kernel)."""
    return LDB_SYMBOL if rows == MR else f"{LDB_SYMBOL}{rows}"


def packed_symbol(rows: int) -> str:
    """The packed kernel's symbol for a panel of ``rows`` rows (MR: the full kernel)."""
    return SYMBOL if rows == MR else f"{SYMBOL}{rows}"


def _packed_module() -> ir.Module:
    mod = ir.Module(name="rammer_ukernel")
    _add_packed_kernel(mod)
    for rows in PACKED_SHORT_ROWS:
        _add_packed_kernel(mod, rows=rows)
    return mod


def _ldb_module() -> ir.Module:
    mod = ir.Module(name="rammer_ukernel_ldb")
    _add_packed_kernel(mod, strided_b=True)
    for rows in LDB_SHORT_ROWS:
        _add_packed_kernel(mod, strided_b=True, rows=rows)
    return mod


def _fma(mod: ir.Module, vec: ir.VectorType) -> ir.Function:
    name = f"llvm.fma.v{vec.count}f32"
    found = mod.globals.get(name)
    return found if found is not None else ir.Function(mod, ir.FunctionType(vec, [vec, vec, vec]), name=name)


def _prefetch(mod: ir.Module) -> ir.Function:
    """LLVM's ``llvm.prefetch`` (address, rw, locality, cache type): a hint that never faults, so a
    prefetch past the end of an operand is harmless."""
    found = mod.globals.get("llvm.prefetch.p0i8")
    if found is not None:
        return found
    i32 = ir.IntType(32)
    return ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]),
                       name="llvm.prefetch.p0i8")


def _splat(bld: ir.IRBuilder, value: ir.Value, vec: ir.VectorType) -> ir.Value:
    undef = ir.Constant(vec, ir.Undefined)
    mask = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
    return bld.shuffle_vector(bld.insert_element(undef, value, ir.Constant(ir.IntType(32), 0)), undef, mask)


def _vec_ptr(bld: ir.IRBuilder, base: ir.Value, offset: ir.Value | int, vec: ir.VectorType) -> ir.Value:
    """``base + offset`` (elements; an int or an i64 value) as a pointer to ``vec``."""
    if isinstance(offset, int):
        offset = ir.Constant(ir.IntType(64), offset)
    return bld.bitcast(bld.gep(base, [offset]), vec.as_pointer())


def _masked(mod: ir.Module, vec: ir.VectorType, store: bool) -> ir.Function:
    """LLVM's masked load or store of ``vec`` (masked-off lanes are neither read nor written)."""
    mask = ir.VectorType(ir.IntType(1), vec.count)
    name = f"llvm.masked.{'store' if store else 'load'}.v{vec.count}f32.p0v{vec.count}f32"
    found = mod.globals.get(name)
    if found is not None:
        return found
    args = [vec, vec.as_pointer(), ir.IntType(32), mask] if store else [vec.as_pointer(), ir.IntType(32), mask, vec]
    return ir.Function(mod, ir.FunctionType(ir.VoidType() if store else vec, args), name=name)


def _clamp(bld: ir.IRBuilder, x: ir.Value, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """``x`` limited to [lo, hi] (max, then min) with NaN kept, as the interpreter's CLIP and RELU
    do: ``y = x if x > lo or x is NaN else lo``, then the same against ``hi`` (lo = -inf and
    hi = +inf leave every value as it is)."""
    y = bld.select(bld.fcmp_unordered(">", x, lo), x, lo)
    return bld.select(bld.fcmp_unordered("<", y, hi), y, hi)


def _per_flag_blocks(fn: ir.Function, bld: ir.IRBuilder, flags: ir.Value) -> list:
    """Ends ``bld``'s block with a switch on the EPI_* bits of ``flags`` and returns, for each of the
    40 combinations, a builder in a block of its own with the bits as Python values:
    ``(builder, (accumulate, bias, residual, relu))``, ``relu`` 0 (none), 1 (ReLU), 2 (ReLU6:
    EPI_RELU | EPI_RELU6), 3 (HardSwish: EPI_HSWISH) or 4 (SiLU: EPI_SILU); each block must be
    ended by the caller (see :func:`_activate`).

    A store specialised per block is straight-line code: a vector select on a scalar flag
    becomes a branch per vector on x86 (about 1500 instructions per pixel-row tile store)."""
    i64 = ir.IntType(64)
    acts = (0, EPI_RELU, EPI_RELU | EPI_RELU6, EPI_HSWISH, EPI_SILU)
    valid = [f | act for f in range(8) for act in acts]
    blocks = {f: fn.append_basic_block(f"flags{f}") for f in valid}
    switch = bld.switch(bld.and_(flags, ir.Constant(i64, 127)), blocks[0])
    out = []
    for f, block in blocks.items():
        switch.add_case(ir.Constant(i64, f), block)
        relu = 4 if f & EPI_SILU else 3 if f & EPI_HSWISH else (2 if f & EPI_RELU6 else 1) if f & EPI_RELU else 0
        out.append((ir.IRBuilder(block), (bool(f & EPI_ACCUMULATE), bool(f & EPI_BIAS), bool(f & EPI_RESIDUAL),
                                          relu)))
    return out


def _activate(bld: ir.IRBuilder, val: ir.Value, relu: int) -> ir.Value:
    """``val`` after the activation ``relu`` of :func:`_per_flag_blocks` (0: none, 1: ReLU,
    2: ReLU6, 3: HardSwish, 4: SiLU), NaN kept."""
    if not relu:
        return val
    if relu == 4:
        return _vec_silu(bld, val)
    if relu == 3:
        n = val.type.count
        gate = _activate(bld, bld.fadd(val, ir.Constant(val.type, [3.0] * n)), 2)
        return bld.fdiv(bld.fmul(val, gate), ir.Constant(val.type, [6.0] * n))
    val = _relu_keep_nan(bld, val)
    if relu == 2:
        six = ir.Constant(val.type, [6.0] * val.type.count)
        val = bld.select(bld.fcmp_unordered("<", val, six), val, six)
    return val


def _exp_reduced(bld: ir.IRBuilder, t: ir.Value, madd: Callable[[ir.Value, ir.Value, ir.Value], ir.Value],
                 degree: int) -> tuple[ir.Value, ir.Value]:
    """The core both exponentials share, for ``t`` already clamped to exp's finite range: ``k`` =
    t / ln 2 rounded by adding 1.5 * 2**23 (its low mantissa bits hold n + 2**22, for the caller's
    2**n), and ``p`` = e**r for r = t - n ln 2 (ln 2 in two parts), as Taylor's polynomial of
    ``degree`` in Horner's form through ``madd(a, b, acc)`` = a * b + acc."""
    n_lanes = t.type.count

    def c(v: float) -> ir.Constant:
        return ir.Constant(t.type, [float(np.float32(v))] * n_lanes)

    k = madd(t, c(1.4426950408889634), c(12582912.0))
    nn = bld.fsub(k, c(12582912.0))
    # t - nn*ln2 as t + (-nn)*ln2: negation is exact, so unfused it is the same value
    r = madd(bld.fneg(nn), c(0.693145751953125), t)
    r = madd(bld.fneg(nn), c(1.428606765330187e-06), r)
    p = c(1.0 / math.factorial(degree))
    for j in range(degree - 1, -1, -1):
        p = madd(p, r, c(1.0 / math.factorial(j)))
    return k, p


def _vec_silu(bld: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``x * sigmoid(x)`` per lane as ``x / (1 + e**-x)``, e**-x by :func:`.fastmath.sigmoid_act32`'s
    algorithm (-x clamped to [-87, 88] instead of exp's subnormal, overflow and NaN paths; its
    degree-6 polynomial in FMAs): relative error ~2e-7 where the result is a normal float.  At
    x <= -100 the result is x * 0 (-0, and NaN for -inf, as the reference's -inf * 0); between -100
    and -88 it is within 7e-37 of the exact subnormal.  NaN stays NaN.  With the full exponential, a
    conv tile's SiLU store took 2-3x its multiply-adds on a 16-channel 1x1 conv (EfficientNet's
    first expansion), its temporaries spilling the tile's accumulators."""
    n_lanes = x.type.count
    vf = x.type
    vi = ir.VectorType(ir.IntType(32), n_lanes)
    fma = _fma(bld.module, vf)

    def c(v: float) -> ir.Constant:
        return ir.Constant(vf, [float(np.float32(v))] * n_lanes)

    t = bld.fneg(x)
    t = bld.select(bld.fcmp_ordered(">", t, c(-87.0)), t, c(-87.0))  # (NaN -> -87: the division keeps it)
    t = bld.select(bld.fcmp_ordered("<", t, c(88.0)), t, c(88.0))  # (2**127 at most: no overflow)
    k, p = _exp_reduced(bld, t, lambda a, b, acc: bld.call(fma, [a, b, acc]), degree=6)
    # k's low mantissa bits hold n + 2**22: n + 127 in the exponent field is 2**n
    bits = bld.add(bld.bitcast(k, vi), ir.Constant(vi, [127 - 0x4B400000] * n_lanes))
    e = bld.fmul(p, bld.bitcast(bld.shl(bits, ir.Constant(vi, [23] * n_lanes)), vf))
    y = bld.fdiv(x, bld.fadd(c(1.0), e))
    return bld.select(bld.fcmp_ordered("<=", x, c(-100.0)), bld.fmul(x, c(0.0)), y)


def _vec_exp(bld: ir.IRBuilder, x: ir.Value, fused: bool = False) -> ir.Value:
    """e**x per lane, the algorithm of :func:`.fastmath.exp32` (range reduction, a degree-7
    polynomial, 2**n from the exponent bits; subnormal results scaled once; NaN and +inf kept).
    ``fused``: the polynomial and the range reduction in FMAs (about a quarter fewer instructions;
    each step rounds once, so values may differ from ``exp32``'s in the last bit)."""
    n_lanes = x.type.count
    vf = x.type
    vi = ir.VectorType(ir.IntType(32), n_lanes)

    def c(v: float) -> ir.Constant:
        return ir.Constant(vf, [float(np.float32(v))] * n_lanes)

    def sel(cond, a, b):
        return bld.select(cond, a, b)

    fma = _fma(bld.module, vf) if fused else None

    def madd(a, b, acc):  # a * b + acc: one rounding when fused, two otherwise (exp32's)
        return bld.call(fma, [a, b, acc]) if fma is not None else bld.fadd(bld.fmul(a, b), acc)

    tiny = bld.fcmp_ordered("<", x, c(-86.0))
    xs = sel(tiny, bld.fadd(x, c(44.3614195558365)), x)
    xc = sel(bld.fcmp_ordered(">", xs, c(-86.0)), xs, c(-86.0))
    xc = sel(bld.fcmp_ordered("<", xc, c(88.7228)), xc, c(88.7228))
    t, p = _exp_reduced(bld, xc, madd, degree=7)
    bits = bld.add(bld.bitcast(t, vi), ir.Constant(vi, [126 - 0x400000] * n_lanes))
    scale = bld.bitcast(bld.shl(bits, ir.Constant(vi, [23] * n_lanes)), vf)
    y = bld.fmul(bld.fadd(p, p), scale)
    y = sel(tiny, bld.fmul(y, c(5.421010862427522e-20)), y)
    y = sel(bld.fcmp_ordered(">", x, c(88.7228)), c(float("inf")), y)
    return sel(bld.fcmp_unordered("!=", x, x), x, y)


def _relu_keep_nan(bld: ir.IRBuilder, val: ir.Value) -> ir.Value:
    """x where x > 0 or unordered (NaN stays NaN, as in the reference), else 0."""
    zero = ir.Constant(val.type, [0.0] * val.type.count)
    return bld.select(bld.fcmp_unordered(">", val, zero), val, zero)


def _k_loop(fn: ir.Function, entry: ir.IRBuilder, k: ir.Value, rows: int, width: int, cols: int,
            b: ir.Value, a_row: Callable[[ir.IRBuilder, ir.Value, int], ir.Value],
            ldb: ir.Value | None = None, prefetch: int = 0,
            b_table: ir.Value | None = None) -> tuple[ir.IRBuilder, list]:
    """The register-blocked loop the kernels share: for kk < k, ``acc[r][v] += splat(*a_row(kk, r))
    * b[kk*cols + v*width:...]`` (``ldb``: ``b[kk*ldb + ...]``; ``b_table``, an i64 pointer:
    ``b[b_table[kk] + ...]``), the rows x cols accumulators held in registers as phi nodes.

    ``entry`` is the builder at the end of the entry block (it is terminated here); returns the
    builder positioned in the block after the loop, and the final accumulators."""
    i64 = ir.IntType(64)
    vec = ir.VectorType(ir.FloatType(), width)
    nv = cols // width
    fma = _fma(fn.module, vec)
    head, body, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    zero = ir.Constant(vec, [0.0] * width)
    start = entry.block
    entry.branch(head)

    bld = ir.IRBuilder(head)
    kk = bld.phi(i64, name="kk")
    kk.add_incoming(ir.Constant(i64, 0), start)
    accs = [[bld.phi(vec, name=f"c{r}_{v}") for v in range(nv)] for r in range(rows)]
    for row in accs:
        for ph in row:
            ph.add_incoming(zero, start)
    bld.cbranch(bld.icmp_signed("<", kk, k), body, done)

    bld = ir.IRBuilder(body)
    if b_table is not None:
        bbase = bld.gep(b, [bld.load(bld.gep(b_table, [kk]), align=8)])
    else:
        bbase = bld.gep(b, [bld.mul(kk, ir.Constant(i64, cols) if ldb is None else ldb)])
    if prefetch:
        pf = _prefetch(fn.module)
        i32 = ir.IntType(32)
        ahead = bld.gep(bbase, [ir.Constant(i64, prefetch * cols) if ldb is None else bld.mul(ldb, ir.Constant(i64, prefetch))])
        for line in range(0, cols, 16):
            addr = bld.bitcast(bld.gep(ahead, [ir.Constant(i64, line)]), ir.IntType(8).as_pointer())
            bld.call(pf, [addr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
    bvals = [bld.load(_vec_ptr(bld, bbase, v * width, vec), align=4)
             for v in range(nv)]
    new_accs = []
    for r in range(rows):
        splat = _splat(bld, bld.load(a_row(bld, kk, r), align=4), vec)
        new_accs.append([bld.call(fma, [splat, bvals[v], accs[r][v]]) for v in range(nv)])
    kk.add_incoming(bld.add(kk, ir.Constant(i64, 1)), body)
    bld.branch(head)
    for r in range(rows):
        for v in range(nv):
            accs[r][v].add_incoming(new_accs[r][v], body)
    return ir.IRBuilder(done), accs


def _add_pixel_row_kernel(mod: ir.Module, rows: int, cols: int, width: int, symbol: str = ROWS_SYMBOL) -> None:
    """``(k, a, aoff, rowoff, b, c, ldc, flags, bias, res)``: with ``T[r, j] = sum_k a[aoff[k] +
    rowoff[r]] * b[k*cols + j]`` for r < rows, j < cols, ``C[j*ldc + r] = relu?(T[r, j] (+ C)
    (+ bias[j]) (+ res[j*ldc + r]))`` per the EPI_* ``flags`` (a conv's epilogue at its one store)."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    vec = ir.VectorType(f32, width)
    nv = cols // width
    fp = f32.as_pointer()
    ip = i64.as_pointer()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, fp, ip, ip, fp, fp, i64, i64, fp, fp]),
                     name=symbol)
    k, a, aoff, rowoff, b, c, ldc, acc, bias, res = fn.args
    for arg, name in zip(fn.args, ("k", "a", "aoff", "rowoff", "b", "c", "ldc", "flags", "bias", "res")):
        arg.name = name
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    row_offsets = [bld.load(bld.gep(rowoff, [ir.Constant(i64, r)]), align=8) for r in range(rows)]
    tile = bld.alloca(ir.ArrayType(f32, rows * cols))  # the row-major tile, transposed on the way out

    def a_row(bld: ir.IRBuilder, kk: ir.Value, r: int) -> ir.Value:  # a + aoff[kk] + rowoff[r]
        return bld.gep(bld.gep(a, [bld.load(bld.gep(aoff, [kk]), align=8)]), [row_offsets[r]])

    bld, accs = _k_loop(fn, bld, k, rows, width, cols, b, a_row, prefetch=PF_ROWS)

    # The tile goes to the stack row-major, and a separate function transposes
    # it: built inline from the accumulators, the transpose made LLVM spill
    # them inside the k loop; read back element by element, every load missed
    # store forwarding (about 10 cycles each, 256 of them per call).
    tp = bld.bitcast(tile, fp)
    for r in range(rows):
        for v in range(nv):
            ptr = _vec_ptr(bld, tp, r * cols + v * width, vec)
            bld.store(accs[r][v], ptr, align=4)
    bld.call(_add_transpose_store(mod, rows, cols, width, symbol), [tp, c, ldc, acc, bias, res])
    bld.ret_void()


def _transpose_columns(bld: ir.IRBuilder, tile: list, rows: int, width: int) -> list:
    """The columns of a tile held as row vectors (``tile[r][v]``: row r, columns v*width ...),
    each as a ``<rows x float>``: log2(rows) stages of two-source shuffles, each interleaving
    runs of consecutive rows of the same columns from two vectors (on AVX-512 one vpermt2ps
    each), then one extract per column.  ``rows`` is a power of two no wider than ``width``."""
    i32 = ir.IntType(32)
    # every vector with its lanes' (row, column) labels
    vecs = [(vector, [(r, v * width + e) for e in range(width)])
            for r in range(rows) for v, vector in enumerate(tile[r])]
    run = 1
    while run < rows:
        by_key = {}
        for value, labels in vecs:
            by_key[(labels[0][0] // run, tuple(sorted({c for _, c in labels})))] = (value, labels)
        nxt = []
        for (group, cols_), (x, xl) in sorted(by_key.items()):
            if group % 2:
                continue
            y, yl = by_key[(group + 1, cols_)]
            # runs of `run` lanes alternate from x and y: the first half of the runs, then the second
            nruns = width // run
            for half in (0, 1):
                mask, labels = [], []
                for k in range(half * nruns // 2, (half + 1) * nruns // 2):
                    for src, lab, base in ((x, xl, 0), (y, yl, width)):
                        for e in range(k * run, (k + 1) * run):
                            mask.append(base + e)
                            labels.append(lab[e])
                nxt.append((bld.shuffle_vector(x, y, ir.Constant(ir.VectorType(i32, width), mask)), labels))
        vecs, run = nxt, run * 2
    columns = {}
    for value, labels in vecs:
        for start in range(0, width, rows):
            mask = ir.Constant(ir.VectorType(i32, rows), list(range(start, start + rows)))
            columns[labels[start][1]] = bld.shuffle_vector(value, ir.Constant(value.type, ir.Undefined), mask)
    return [columns[j] for j in sorted(columns)]


#: Bits of the pixel-row kernel's ``flags`` above the EPI_* ones: an edge tile's live columns (output
#: channels) at EDGE_COLS_SHIFT and live rows (pixels) at EDGE_ROWS_SHIFT, 8 bits each; 0 (a whole
#: tile) stores every one.  An edge tile is stored by the kernel itself, straight into the output:
#: through a scratch tile and numba's row loops, the edges of a group of 8 channels (every tile of
#: RegNet's grouped convs) cost more than their multiply-adds.
EDGE_COLS_SHIFT, EDGE_ROWS_SHIFT = 8, 16


@njit(inline="always")
def edge_flags(flags: int, cols: int, rows: int) -> int:
    """``flags`` for an edge tile of ``cols`` live columns and ``rows`` live rows (see EDGE_COLS_SHIFT)."""
    return flags | (cols << EDGE_COLS_SHIFT) | (rows << EDGE_ROWS_SHIFT)


def _add_transpose_store(mod: ir.Module, rows: int, cols: int, width: int, symbol: str = ROWS_SYMBOL) -> ir.Function:
    """``(tile, c, ldc, flags, bias, res)``: ``c[j*ldc + r] = relu?(tile[r*cols + j] (+ c) (+ bias[j])
    (+ res[j*ldc + r]))``, for each of the EPI_* ``flags`` a straight-line block of its own
    (:func:`_per_flag_blocks`).  The bias (per column
    j, a row vector of the tile) is added before the transpose, and so is the ReLU when nothing
    is added after it; the transpose is :func:`_transpose_columns`.  With edge bits in ``flags``
    (:data:`EDGE_COLS_SHIFT`) a second set of blocks stores only the live columns, each through a
    masked store of its live rows, and reads the bias, C and the residual only there."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    i32 = ir.IntType(32)
    fp = f32.as_pointer()
    vec = ir.VectorType(f32, width)
    pvec = ir.VectorType(f32, rows)
    nv = cols // width
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [fp, fp, i64, i64, fp, fp]), name=symbol + "_store")
    fn.attributes.add("noinline")
    tp, c, ldc, flags, bias, res = fn.args
    entry = ir.IRBuilder(fn.append_basic_block("entry"))
    whole, edge = fn.append_basic_block("whole"), fn.append_basic_block("edge")
    entry.cbranch(entry.icmp_unsigned("<", flags, ir.Constant(i64, 1 << EDGE_COLS_SHIFT)), whole, edge)
    eb = ir.IRBuilder(edge)
    live_cols = eb.and_(eb.lshr(flags, ir.Constant(i64, EDGE_COLS_SHIFT)), ir.Constant(i64, 255))
    live_rows = eb.trunc(eb.and_(eb.lshr(flags, ir.Constant(i64, EDGE_ROWS_SHIFT)), ir.Constant(i64, 255)), i32)
    row_mask = eb.icmp_signed("<", ir.Constant(ir.VectorType(i32, rows), list(range(rows))),
                              _splat(eb, live_rows, ir.VectorType(i32, rows)))
    col_masks = [eb.icmp_signed("<", ir.Constant(ir.VectorType(i32, width), [v * width + e for e in range(width)]),
                                _splat(eb, eb.trunc(live_cols, i32), ir.VectorType(i32, width))) for v in range(nv)]
    mload_c, mstore_c = _masked(mod, pvec, False), _masked(mod, pvec, True)
    mload_b = _masked(mod, vec, False)
    align = ir.Constant(i32, 4)
    zero_p = ir.Constant(pvec, [0.0] * rows)
    for is_edge, start in ((False, ir.IRBuilder(whole)), (True, eb)):
        for bld, (acc_on, bias_on, res_on, relu_on) in _per_flag_blocks(fn, start, flags):
            relu_first = relu_on and not (acc_on or res_on)
            tile = []
            for r in range(rows):
                row = []
                for v in range(nv):
                    val = bld.load(_vec_ptr(bld, tp, r * cols + v * width, vec), align=4)
                    if bias_on:
                        bptr = _vec_ptr(bld, bias, v * width, vec)
                        bv = (bld.call(mload_b, [bptr, align, col_masks[v], ir.Constant(vec, [0.0] * width)])
                              if is_edge else bld.load(bptr, align=4))
                        val = bld.fadd(val, bv)
                    row.append(_activate(bld, val, relu_on) if relu_first else val)
                tile.append(row)
            for j, col in enumerate(_transpose_columns(bld, tile, rows, width)):
                at = bld.mul(ir.Constant(i64, j), ldc)
                ptr = _vec_ptr(bld, c, at, pvec)
                if is_edge:
                    # (the live columns are the first ones: past the last, the rest are skipped)
                    nxt = fn.append_basic_block(f"col{j}")
                    store = fn.append_basic_block(f"store{j}")
                    bld.cbranch(bld.icmp_signed("<", ir.Constant(i64, j), live_cols), store, nxt)
                    bld.position_at_end(store)
                    if acc_on:
                        col = bld.fadd(col, bld.call(mload_c, [ptr, align, row_mask, zero_p]))
                    if res_on:
                        col = bld.fadd(col, bld.call(mload_c, [_vec_ptr(bld, res, at, pvec), align, row_mask, zero_p]))
                    if relu_on and not relu_first:
                        col = _activate(bld, col, relu_on)
                    bld.call(mstore_c, [col, ptr, align, row_mask])
                    bld.branch(nxt)
                    bld.position_at_end(nxt)
                    continue
                if acc_on:
                    col = bld.fadd(col, bld.load(ptr, align=4))
                if res_on:
                    col = bld.fadd(col, bld.load(_vec_ptr(bld, res, at, pvec), align=4))
                if relu_on and not relu_first:
                    col = _activate(bld, col, relu_on)
                bld.store(col, ptr, align=4)
            bld.ret_void()
    return fn


def _fused_store(fn: ir.Function, bld: ir.IRBuilder, accs: list, c: ir.Value, ldc: ir.Value, flags: ir.Value,
                 bias: ir.Value, res: ir.Value, ldr: ir.Value, rows: int, cols: int, width: int) -> None:
    """Store the tile as ``relu?(tile (+ C) (+ bias[r]) (+ res[r*ldr + j]))`` per ``flags``, one
    straight-line block per combination (:func:`_per_flag_blocks`).

    A convolution's bias, residual Add and ReLU applied while the tile is in registers, instead
    of a pass over the output before (bias, residual) and after (ReLU) the GEMM."""
    i64 = ir.IntType(64)
    vec = ir.VectorType(ir.FloatType(), width)
    for bld, (acc_on, bias_on, res_on, relu_on) in _per_flag_blocks(fn, bld, flags):
        for r in range(rows):
            rowp = bld.gep(c, [bld.mul(ir.Constant(i64, r), ldc)])
            resp = bld.gep(res, [bld.mul(ir.Constant(i64, r), ldr)])
            b = _splat(bld, bld.load(bld.gep(bias, [ir.Constant(i64, r)]), align=4), vec) if bias_on else None
            for v in range(cols // width):
                ptr = _vec_ptr(bld, rowp, v * width, vec)
                val = accs[r][v]
                if acc_on:
                    val = bld.fadd(val, bld.load(ptr, align=4))
                if bias_on:
                    val = bld.fadd(val, b)
                if res_on:
                    val = bld.fadd(val, bld.load(_vec_ptr(bld, resp, v * width, vec), align=4))
                bld.store(_activate(bld, val, relu_on), ptr, align=4)
        bld.ret_void()


def _add_packed_kernel(mod: ir.Module, strided_b: bool = False, rows: int = MR) -> None:
    """``(k, a, b, c, ldc, acc)``, or with ``strided_b`` ``(k, a, b, ldb, c, ldc, acc)``: B's k-th
    row at ``b + k*ldb`` instead of packed NR wide (a pointwise convolution reads its input
    planes in place).  ``rows`` < MR: the first ``rows`` rows of an MR-row A panel, computed and
    stored (the symbol ends with the row count)."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    fp = f32.as_pointer()
    names = (("k", "a", "b", "ldb", "c", "ldc", "acc", "bias", "res", "ldr") if strided_b
             else ("k", "a", "b", "c", "ldc", "acc"))
    types_ = [{"k": i64, "ldb": i64, "ldc": i64, "acc": i64, "ldr": i64}.get(n, fp) for n in names]
    name = ldb_symbol(rows) if strided_b else packed_symbol(rows)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), types_), name=name)
    for arg, name in zip(fn.args, names):
        arg.name = name
    args = dict(zip(names, fn.args))
    k, a, b, c, ldc, acc = (args[n] for n in ("k", "a", "b", "c", "ldc", "acc"))
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    bld, accs = _k_loop(fn, bld, k, rows, WIDTH, NR, b,
                        lambda bld, kk, r: bld.gep(a, [bld.add(bld.mul(kk, ir.Constant(i64, MR)), ir.Constant(i64, r))]),
                        args.get("ldb"), prefetch=PF_LDB if strided_b else PF_PACKED)
    add = fn.append_basic_block("add")
    put = fn.append_basic_block("put")
    if strided_b:
        # ``acc`` holds epilogue flags (EPI_*): anything beyond accumulating goes to its own block
        epi = fn.append_basic_block("epilogue")
        plain = fn.append_basic_block("plain")
        bld.cbranch(bld.icmp_unsigned(">", acc, ir.Constant(i64, EPI_ACCUMULATE)), epi, plain)
        _fused_store(fn, ir.IRBuilder(epi), accs, c, ldc, acc, args["bias"], args["res"], args["ldr"], rows, NR,
                     WIDTH)
        bld = ir.IRBuilder(plain)
    bld.cbranch(bld.icmp_signed("!=", acc, ir.Constant(i64, 0)), add, put)
    store_tile(add, put, accs, c, ldc)


def store_tile(add: ir.Block, put: ir.Block, accs: list, c: ir.Value, ldc: ir.Value) -> None:
    """Fills the blocks ``add`` (``C += tile``) and ``put`` (``C = tile``), each ending the function:
    the accumulator vectors ``accs[r][v]`` go to row ``r`` of C at ``c + r*ldc``, ``WIDTH`` floats a vector."""
    i64 = ir.IntType(64)
    vec = ir.VectorType(ir.FloatType(), WIDTH)
    for block, accumulate in ((add, True), (put, False)):
        bld = ir.IRBuilder(block)
        for r, row in enumerate(accs):
            rowp = bld.gep(c, [bld.mul(ir.Constant(i64, r), ldc)])
            for v, val in enumerate(row):
                ptr = _vec_ptr(bld, rowp, v * WIDTH, vec)
                if accumulate:
                    val = bld.fadd(bld.load(ptr, align=4), val)
                bld.store(val, ptr, align=4)
        bld.ret_void()


def pixel_row_module(rows: int, cols: int, width: int, narrow: int | None = None) -> ir.Module:
    """A module with the pixel-row kernel at the given shape (tests run the AVX2 shape here too) and,
    with ``narrow``, its variant ``narrow`` columns wide as :data:`ROWS_NARROW_SYMBOL`."""
    mod = ir.Module(name="rammer_ukernel_rows")
    _add_pixel_row_kernel(mod, rows, cols, width)
    if narrow is not None:
        _add_pixel_row_kernel(mod, rows, narrow, width, ROWS_NARROW_SYMBOL)
    return mod


PACKED = MachineCode(f"ukernel packed pf{PF_PACKED}", _packed_module, (SYMBOL, *(packed_symbol(r) for r in PACKED_SHORT_ROWS)))
LDB = MachineCode(f"ukernel ldb pf{PF_LDB}", _ldb_module, (LDB_SYMBOL, *(ldb_symbol(r) for r in LDB_SHORT_ROWS)))
ROWS = MachineCode(f"ukernel rows {PX_MR}x{PX_NR}/{PX_NR_NARROW} pf{PF_ROWS}",
                   lambda: pixel_row_module(PX_MR, PX_NR, WIDTH, PX_NR_NARROW),
                   (ROWS_SYMBOL, ROWS_NARROW_SYMBOL))

#: ctypes type of the pixel-row kernel: (k, a, aoff, rowoff, b, c, ldc, flags, bias, res).
ROWS_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, *[ctypes.c_void_p] * 5, ctypes.c_int64, ctypes.c_int64,
                                  ctypes.c_void_p, ctypes.c_void_p)
#: The strided-B kernel's ctypes type: (k, a, b, ldb, c, ldc, flags, bias, res, ldr).
_LDB_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                  ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_int64)
_PACKED_CFUNCTYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int64, ctypes.c_int64)


def __getattr__(name: str) -> object:
    """The kernels as ctypes functions, for tests, built on first access: ``CFUNC`` (packed),
    ``SHORT_CFUNCS`` (packed, by row count), ``LDB_CFUNC`` and ``LDB_SHORT_CFUNCS`` (by row count)."""
    if name == "CFUNC":
        value = _PACKED_CFUNCTYPE(PACKED.address(SYMBOL))
    elif name == "SHORT_CFUNCS":
        value = {rows: _PACKED_CFUNCTYPE(PACKED.address(packed_symbol(rows))) for rows in PACKED_SHORT_ROWS}
    elif name == "LDB_CFUNC":
        value = _LDB_CFUNCTYPE(LDB.address(LDB_SYMBOL))
    elif name == "LDB_SHORT_CFUNCS":
        value = {rows: _LDB_CFUNCTYPE(LDB.address(ldb_symbol(rows))) for rows in LDB_SHORT_ROWS}
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


@uses(SYMBOL)
@intrinsic
def ukernel(typingctx, k, A, a_off, Bp, b_off, C, c_off, ldc, acc):
    """C[c_off + r*ldc + j] (+)= sum_k A[a_off + k*MR + r] * Bp[b_off + k*NR + j] for the MR x NR tile."""
    if not arrays_are(types.float32, A, Bp, C):
        return None
    return types.none(k, A, a_off, Bp, b_off, C, c_off, ldc, acc), call_codegen(SYMBOL, "ifffii")


def _packed_short_intrinsic(rows: int):
    """The numba intrinsic calling the packed kernel's ``rows``-row variant."""
    symbol = packed_symbol(rows)

    def typer(typingctx, k, A, a_off, Bp, b_off, C, c_off, ldc, acc):
        if not arrays_are(types.float32, A, Bp, C):
            return None
        return types.none(k, A, a_off, Bp, b_off, C, c_off, ldc, acc), call_codegen(symbol, "ifffii")
    typer.__name__ = f"ukernel{rows}"
    typer.__doc__ = f":func:`ukernel` on the first {rows} rows of the MR-row A panel only (C gets {rows} rows)."
    return uses(symbol)(intrinsic(typer))


ukernel4 = _packed_short_intrinsic(4)
ukernel8 = _packed_short_intrinsic(8)


@uses(ROWS_SYMBOL)
@intrinsic
def ukernel_rows(typingctx, k, A, a_off, T, t_off, T2, r_off, Bp, b_off, C, c_off, ldc, flags, Bias, bias_off, Res,
                 res_off):
    """The pixel-row tile: for r < PX_MR and j < PX_NR, with
    ``t = sum_k A[a_off + T[t_off + k] + T2[r_off + r]] * Bp[b_off + k*PX_NR + j]``,
    ``C[c_off + j*ldc + r] = relu?(t (+ C) (+ Bias[bias_off + j]) (+ Res[res_off + j*ldc + r]))``
    per the EPI_* ``flags``."""
    if not (arrays_are(types.float32, A, Bp, C, Bias, Res) and arrays_are(types.int64, T, T2)):
        return None
    sig = types.none(k, A, a_off, T, t_off, T2, r_off, Bp, b_off, C, c_off, ldc, flags, Bias, bias_off, Res, res_off)
    return sig, call_codegen(ROWS_SYMBOL, "ifqqffiiff")


@uses(ROWS_NARROW_SYMBOL)
@intrinsic
def ukernel_rows_narrow(typingctx, k, A, a_off, T, t_off, T2, r_off, Bp, b_off, C, c_off, ldc, flags, Bias, bias_off,
                        Res, res_off):
    """:func:`ukernel_rows` on a panel PX_NR_NARROW output channels wide (weights packed that wide)."""
    if not (arrays_are(types.float32, A, Bp, C, Bias, Res) and arrays_are(types.int64, T, T2)):
        return None
    sig = types.none(k, A, a_off, T, t_off, T2, r_off, Bp, b_off, C, c_off, ldc, flags, Bias, bias_off, Res, res_off)
    return sig, call_codegen(ROWS_NARROW_SYMBOL, "ifqqffiiff")


def _ldb_intrinsic(rows: int, doc: str):
    """The numba intrinsic calling the strided-B kernel variant for ``rows`` rows."""
    def typer(typingctx, k, A, a_off, B, b_off, ldb, C, c_off, ldc, flags, Bias, bias_off, Res, res_off, ldr):
        if not arrays_are(types.float32, A, B, C, Bias, Res):
            return None
        sig = types.none(k, A, a_off, B, b_off, ldb, C, c_off, ldc, flags, Bias, bias_off, Res, res_off, ldr)
        return sig, call_codegen(ldb_symbol(rows), "iffifiiffi")
    typer.__name__ = "ukernel_ldb" if rows == MR else f"ukernel_ldb{rows}"
    typer.__doc__ = doc
    return uses(ldb_symbol(rows))(intrinsic(typer))


#: ``ukernel_ldb(k, A, a_off, B, b_off, ldb, C, c_off, ldc, flags, Bias, bias_off, Res, res_off, ldr)``
ukernel_ldb = _ldb_intrinsic(MR, """:func:`ukernel` with B's k-th row at ``B[b_off + k*ldb]`` (unpacked), stored as
    ``relu?(tile (+ C) (+ Bias[bias_off + r]) (+ Res[res_off + r*ldr + j]))`` per the EPI_* ``flags``.""")
ukernel_ldb4 = _ldb_intrinsic(4, ":func:`ukernel_ldb` on the first 4 rows of the MR-row A panel only.")
ukernel_ldb8 = _ldb_intrinsic(8, ":func:`ukernel_ldb` on the first 8 rows of the MR-row A panel only.")
