"""The AVX2 form of the 8-bit micro-kernels (:mod:`.ukernel_int8`) for CPUs without VNNI: ``vpmaddubsw``
made exact, and tiles walked in column chunks that fit 16 ymm registers.

``vpmaddubsw(u, s)`` multiplies unsigned bytes by signed bytes and sums adjacent pairs into int16 with
saturation, so on raw uint8 x int8 operands (onnxruntime's AVX2 kernels) a pair can exceed 32767.  Here
the activation is taken as a signed byte ``x = a' - 128`` and the dot step is::

    u = |x|                  (vpabsb: 0..128)
    s = w * sign(x)          (vpsignb: 0 where x = 0)
    acc += vpmaddwd(vpmaddubsw(u, s), 1)

``u * s = x * w`` exactly, and a pair sums to at most 2 * 128 * 127 = 32512 in magnitude, unless
``w = -128`` (its negation wraps).  The weights are the sign-carrying side in every kernel, so each call
first reads its weights once for a -128 (a ``vpminsb`` per 32 bytes, which also brings them into the
cache for the chunk passes); a call that finds one runs the portable dot step of the same sums instead
(exact for every byte).  A caller that has checked its weights once (per task: a call reads them
again for every 6 rows of its output) passes ``wsafe`` = 1 and the call skips that read.

The sums are therefore those of ``x = a' - 128``: ``T - 128 * colsum(B)`` (GEMM, conv) and ``D - 128 *
rowsum(w)`` (pointwise) where the other forms store ``T`` and ``D``.  :func:`.ukernel_int8.int8_shift`
tells the callers this form's shift (128) at run time, so numba kernels compiled under one form stay
right under another.

The tile stays MR x NR (6 x 64) as the callers and the packed layout have it; it is computed in passes
over K of a group of its rows by a chunk of its columns (:class:`Shape`), sized to the 16 ymm registers:
accumulators, the chunk's B vectors, x, |x|, the signed operand and the ones of ``vpmaddwd`` (48
accumulators for the whole tile would spill on every step).
"""

from __future__ import annotations

from llvmlite import ir

from .ukernel_int8_ir import MR, NR, fsplat, requantize, splat

_VEC = 8  # int32 columns per ymm


class Shape:
    """A pass's rows and columns: ``chunk`` columns (``chunk / 8`` ymm per row) by each of ``groups``
    (row ranges of the tile, walked one after the other)."""

    def __init__(self, chunk: int, groups: tuple[tuple[int, int], ...]):
        self.chunk, self.groups, self.cv = chunk, groups, chunk // _VEC

    def flat(self, accs: list) -> list:
        return [v for row in accs for v in row]

    def unflat(self, values: list) -> list:
        return [values[i:i + self.cv] for i in range(0, len(values), self.cv)]


#: GEMM and conv: x and |x| are per row, the B vectors shared by the rows; 2 rows of 4 ymm (32 columns)
#: spend the row's broadcast, xor and abs on 4 vectors (16 columns by 4 rows and 6 by 2 measured 8-12%
#: slower in the kernel, 6 rows spilled).
ROWS_SHAPE = Shape(32, ((0, 2), (2, 4), (4, 6)))
#: Pointwise: x and |x| are per B vector, shared by the weight rows: 4 rows of 2 ymm, then 2.
COLS_SHAPE = Shape(16, ((0, 4), (4, 6)))

i8 = ir.IntType(8)
i16 = ir.IntType(16)
i32 = ir.IntType(32)
i64 = ir.IntType(64)
i8p = i8.as_pointer()
B32 = ir.VectorType(i8, 32)
W16 = ir.VectorType(i16, 16)
D8 = ir.VectorType(i32, 8)


def _intrinsic(mod: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    fn = mod.globals.get(name)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(ret, args), name=name)
    return fn


def _sign_dot(bld: ir.IRBuilder, acc: ir.Value, u: ir.Value, s: ir.Value) -> ir.Value:
    """``acc + vpmaddwd(vpmaddubsw(u, s), 1)``: 8 int32 lanes of 4 byte products each."""
    mod = bld.module
    pairs = bld.call(_intrinsic(mod, "llvm.x86.avx2.pmadd.ub.sw", W16, [B32, B32]), [u, s])
    ones = ir.Constant(W16, [1] * 16)
    return bld.add(acc, bld.call(_intrinsic(mod, "llvm.x86.avx2.pmadd.wd", D8, [W16, W16]), [pairs, ones]))


def _abs(bld: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """|v| per byte; -128 stays 0x80, which is 128 read unsigned."""
    fn = _intrinsic(bld.module, "llvm.abs.v32i8", B32, [B32, ir.IntType(1)])
    return bld.call(fn, [v, ir.Constant(ir.IntType(1), 0)])


def _sign(bld: ir.IRBuilder, v: ir.Value, by: ir.Value) -> ir.Value:
    """``v * sign(by)`` per byte (vpsignb)."""
    return bld.call(_intrinsic(bld.module, "llvm.x86.avx2.psign.b", B32, [B32, B32]), [v, by])


def _bytes_splat(bld: ir.IRBuilder, word: ir.Value) -> ir.Value:
    return bld.bitcast(splat(bld, word, D8), B32)


def _has_min_byte(bld: ir.IRBuilder, fn: ir.Function, p: ir.Value, count: ir.Value) -> ir.Value:
    """i1: whether any of the ``count`` * 32 bytes at ``p`` is -128 (a running ``vpminsb``)."""
    pre = bld.block
    head, body, done = (fn.append_basic_block(n) for n in ("scan_head", "scan_body", "scan_done"))
    bld.branch(head)
    bld.position_at_end(head)
    i = bld.phi(i64)
    m = bld.phi(B32)
    i.add_incoming(ir.Constant(i64, 0), pre)
    m.add_incoming(ir.Constant(B32, [127] * 32), pre)
    bld.cbranch(bld.icmp_signed("<", i, count), body, done)
    bld.position_at_end(body)
    v = bld.load(bld.bitcast(bld.gep(p, [bld.mul(i, ir.Constant(i64, 32))]), B32.as_pointer()), align=1)
    m.add_incoming(bld.call(_intrinsic(bld.module, "llvm.smin.v32i8", B32, [B32, B32]), [m, v]), body)
    i.add_incoming(bld.add(i, ir.Constant(i64, 1)), body)
    bld.branch(head)
    bld.position_at_end(done)
    low = bld.call(_intrinsic(bld.module, "llvm.vector.reduce.smin.v32i8", i8, [B32]), [m])
    return bld.icmp_signed("==", low, ir.Constant(i8, -128))


def _fallback(bld: ir.IRBuilder, fn: ir.Function, has_min, exact: ir.Function) -> None:
    """Branch to a call of ``exact`` (the portable form of the same sums) when the weights hold a -128:
    ``has_min(bld)`` reads them unless the caller passed ``wsafe`` (the last argument) != 0.  The
    builder continues on the AVX2 path."""
    wsafe = fn.args[-1]
    scan, slow, fast = (fn.append_basic_block(n) for n in ("scan", "portable", "avx2"))
    bld.cbranch(bld.icmp_signed("!=", wsafe, ir.Constant(i64, 0)), fast, scan)
    bld.position_at_end(scan)
    bld.cbranch(has_min(bld), slow, fast)
    sb = ir.IRBuilder(slow)
    sb.call(exact, list(fn.args))
    sb.ret_void()
    bld.position_at_end(fast)


def _row_step(bld: ir.IRBuilder, accs: list, bvals: list, words: list, xflip: ir.Value | None) -> list:
    """One group of 4 k: rows' x words (xor ``xflip`` gives x; None: they are x) broadcast, B's signed
    bytes in vectors."""
    new = []
    for r, word in enumerate(words):
        xv = _bytes_splat(bld, word)
        if xflip is not None:
            xv = bld.xor(xv, xflip)  # after the broadcast: vpbroadcastd from memory
        u = _abs(bld, xv)
        new.append([_sign_dot(bld, accs[r][v], u, _sign(bld, bvals[v], xv)) for v in range(len(bvals))])
    return new


def _load_chunk(bld: ir.IRBuilder, bp: ir.Value, cv: int) -> list:
    return [bld.load(bld.bitcast(bld.gep(bp, [ir.Constant(i64, 32 * v)]), B32.as_pointer()), align=1)
            for v in range(cv)]


def _store_chunk(bld: ir.IRBuilder, accs: list, c: ir.Value, ldc: ir.Value, col: ir.Value, r0: int) -> None:
    for r, row in enumerate(accs, r0):
        rowp = bld.gep(c, [bld.add(bld.mul(ir.Constant(i64, r), ldc), col)])
        for v, acc in enumerate(row):
            bld.store(acc, bld.bitcast(bld.gep(rowp, [ir.Constant(i64, v * _VEC)]), D8.as_pointer()), align=4)


def _zero_accs() -> ir.Constant:
    return ir.Constant(D8, [0] * _VEC)


def _loop(bld: ir.IRBuilder, fn: ir.Function, count: ir.Value, carried: list, body) -> list:
    """``for i < count``: the values ``carried`` (their initial values) through ``body(bld, i, values)
    -> new values``; returns their values after the loop, the builder placed after it."""
    pre = bld.block
    head, block, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    bld.branch(head)
    bld.position_at_end(head)
    i = bld.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), pre)
    phis = [bld.phi(v.type) for v in carried]
    for ph, v in zip(phis, carried):
        ph.add_incoming(v, pre)
    bld.cbranch(bld.icmp_signed("<", i, count), block, done)
    bld.position_at_end(block)
    new = body(bld, i, phis)
    end = bld.block
    i.add_incoming(bld.add(i, ir.Constant(i64, 1)), end)
    for ph, v in zip(phis, new):
        ph.add_incoming(v, end)
    bld.branch(head)
    bld.position_at_end(done)
    return phis


def _if_rows(bld: ir.IRBuilder, fn: ir.Function, rows: ir.Value, r0: int, body) -> None:
    """``body(bld)`` when the tile has a row r0 (a group of rows past ``rows`` is not computed: 1 row of
    a GEMV-like call costs one group's pass, not the tile's)."""
    then, after = fn.append_basic_block(f"rows{r0}"), fn.append_basic_block(f"rows{r0}_done")
    bld.cbranch(bld.icmp_signed("<", ir.Constant(i64, r0), rows), then, after)
    bld.position_at_end(then)
    body(bld)
    bld.branch(after)
    bld.position_at_end(after)


def _chunks(bld: ir.IRBuilder, fn: ir.Function, shape: Shape, body) -> None:
    """``body(bld, ch)`` for each chunk ``ch`` of ``shape.chunk`` columns, then ``ret void``."""
    _loop(bld, fn, ir.Constant(i64, NR // shape.chunk), [], lambda b, ch, _: (body(b, ch), [])[1])
    bld.ret_void()


def add_gemm_kernel(mod: ir.Module, name: str, exact: ir.Function) -> None:
    """The GEMM tile of :func:`.ukernel_int8_ir.add_kernel` (same arguments), sums of x = a' - 128."""
    fn = ir.Function(mod, exact.function_type, name=name)
    k4, a, lda, rows, flip_a, b, c, ldc, _ = fn.args
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    _fallback(bld, fn, lambda bld: _has_min_byte(bld, fn, b, bld.mul(k4, ir.Constant(i64, NR * 4 // 32))), exact)
    last = bld.sub(rows, ir.Constant(i64, 1))
    row_ptrs = []
    for r in range(MR):
        rr = bld.select(bld.icmp_signed("<", ir.Constant(i64, r), rows), ir.Constant(i64, r), last)
        row_ptrs.append(bld.bitcast(bld.gep(a, [bld.mul(rr, lda)]), i32.as_pointer()))
    # a' = a ^ 0x80 for int8 A, x = a' ^ 0x80: int8 A is x as it is, uint8 A flips
    xflip = bld.select(bld.icmp_signed("!=", flip_a, ir.Constant(i64, 0)), ir.Constant(B32, [0] * 32),
                       ir.Constant(B32, [-128] * 32))

    sh = ROWS_SHAPE

    def chunk(bld: ir.IRBuilder, ch: ir.Value) -> None:
        bchunk = bld.gep(b, [bld.mul(ch, ir.Constant(i64, sh.chunk * 4))])
        for r0, r1 in sh.groups:
            def step(bld: ir.IRBuilder, g: ir.Value, vals: list, r0: int = r0, r1: int = r1) -> list:
                bvals = _load_chunk(bld, bld.gep(bchunk, [bld.mul(g, ir.Constant(i64, NR * 4))]), sh.cv)
                words = [bld.load(bld.gep(rp, [g]), align=1) for rp in row_ptrs[r0:r1]]
                return sh.flat(_row_step(bld, sh.unflat(vals), bvals, words, xflip))

            def group(bld: ir.IRBuilder, r0: int = r0, r1: int = r1, step=step) -> None:
                accs = sh.unflat(_loop(bld, fn, k4, [_zero_accs()] * ((r1 - r0) * sh.cv), step))
                _store_chunk(bld, accs, c, ldc, bld.mul(ch, ir.Constant(i64, sh.chunk)), r0)
            _if_rows(bld, fn, rows, r0, group)

    _chunks(bld, fn, sh, chunk)


def add_conv_kernel(mod: ir.Module, name: str, exact: ir.Function) -> None:
    """The convolution tile of :func:`.ukernel_int8_ir.add_conv_kernel` (same arguments), sums of x * w with
    A's bytes read as x, int8 (its callers fill the NHWC band with a' ^ 0x80 = a' - 128: no xor per
    row and step); per chunk of columns and group of rows, all taps and channel groups in the registers."""
    fn = ir.Function(mod, exact.function_type, name=name)
    ntaps, toff, cg, a, poff, rows, b, c, ldc, _ = fn.args
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    ngroups = bld.mul(ntaps, cg)
    _fallback(bld, fn, lambda bld: _has_min_byte(bld, fn, b, bld.mul(ngroups, ir.Constant(i64, NR * 4 // 32))),
              exact)
    last = bld.sub(rows, ir.Constant(i64, 1))
    row_base = []
    for r in range(MR):
        rr = bld.select(bld.icmp_signed("<", ir.Constant(i64, r), rows), ir.Constant(i64, r), last)
        row_base.append(bld.gep(a, [bld.load(bld.gep(poff, [rr]))]))

    sh = ROWS_SHAPE

    def chunk(bld: ir.IRBuilder, ch: ir.Value) -> None:
        bchunk = bld.gep(b, [bld.mul(ch, ir.Constant(i64, sh.chunk * 4))])
        for r0, r1 in sh.groups:
            def tap(bld: ir.IRBuilder, t: ir.Value, vals: list, r0: int = r0, r1: int = r1) -> list:
                off = bld.load(bld.gep(toff, [t]))
                rows_t = [bld.bitcast(bld.gep(rb, [off]), i32.as_pointer()) for rb in row_base[r0:r1]]
                tb = bld.gep(bchunk, [bld.mul(bld.mul(t, cg), ir.Constant(i64, NR * 4))])

                def step(bld: ir.IRBuilder, g: ir.Value, vals: list) -> list:
                    bvals = _load_chunk(bld, bld.gep(tb, [bld.mul(g, ir.Constant(i64, NR * 4))]), sh.cv)
                    words = [bld.load(bld.gep(rp, [g]), align=1) for rp in rows_t]
                    return sh.flat(_row_step(bld, sh.unflat(vals), bvals, words, None))
                return _loop(bld, fn, cg, vals, step)

            def group(bld: ir.IRBuilder, r0: int = r0, r1: int = r1, tap=tap) -> None:
                accs = sh.unflat(_loop(bld, fn, ntaps, [_zero_accs()] * ((r1 - r0) * sh.cv), tap))
                _store_chunk(bld, accs, c, ldc, bld.mul(ch, ir.Constant(i64, sh.chunk)), r0)
            _if_rows(bld, fn, rows, r0, group)

    _chunks(bld, fn, sh, chunk)


def add_pointwise_kernel(mod: ir.Module, name: str, exact: ir.Function) -> None:
    """The pointwise tile of :func:`.ukernel_int8_ir.add_pointwise_kernel` (same arguments), sums of
    w * (b - 128), requantized chunk by chunk as it is stored.  Here B is the activation: x = b ^ 0x80
    and |x| once per B vector, shared by the weight rows; the weights carry the sign."""
    fn = ir.Function(mod, exact.function_type, name=name)
    k4, w, ldw, rows, b, terms, mults, params, out, ldo, _ = fn.args
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    last = bld.sub(rows, ir.Constant(i64, 1))
    row_ptrs = []
    for r in range(MR):
        rr = bld.select(bld.icmp_signed("<", ir.Constant(i64, r), rows), ir.Constant(i64, r), last)
        row_ptrs.append(bld.bitcast(bld.gep(w, [bld.mul(rr, ldw)]), i32.as_pointer()))
    _fallback(bld, fn, lambda bld: _rows_have_min_byte(bld, fn, row_ptrs, k4), exact)
    fvec = ir.VectorType(ir.FloatType(), _VEC)
    zy, lo, hi = (fsplat(bld, bld.load(bld.gep(params, [ir.Constant(i64, i)])), fvec) for i in range(3))
    xflip = ir.Constant(B32, [-128] * 32)
    sh = COLS_SHAPE

    def chunk(bld: ir.IRBuilder, ch: ir.Value) -> None:
        bchunk = bld.gep(b, [bld.mul(ch, ir.Constant(i64, sh.chunk * 4))])
        col = bld.mul(ch, ir.Constant(i64, sh.chunk))
        for r0, r1 in sh.groups:
            def step(bld: ir.IRBuilder, g: ir.Value, vals: list, r0: int = r0, r1: int = r1) -> list:
                bvals = _load_chunk(bld, bld.gep(bchunk, [bld.mul(g, ir.Constant(i64, NR * 4))]), sh.cv)
                xs = [bld.xor(v, xflip) for v in bvals]
                us = [_abs(bld, x) for x in xs]
                accs = sh.unflat(vals)
                new = []
                for r in range(r1 - r0):
                    ws = _bytes_splat(bld, bld.load(bld.gep(row_ptrs[r0 + r], [g]), align=1))
                    new += [_sign_dot(bld, accs[r][v], us[v], _sign(bld, ws, xs[v])) for v in range(sh.cv)]
                return new
            def group(bld: ir.IRBuilder, r0: int = r0, r1: int = r1, step=step) -> None:
                accs = sh.unflat(_loop(bld, fn, k4, [_zero_accs()] * ((r1 - r0) * sh.cv), step))
                for r in range(r0, r1):
                    store, after = fn.append_basic_block(f"store{r}"), fn.append_basic_block(f"after{r}")
                    bld.cbranch(bld.icmp_signed("<", ir.Constant(i64, r), rows), store, after)
                    bld.position_at_end(store)
                    rowp = bld.gep(out, [bld.add(bld.mul(ir.Constant(i64, r), ldo), col)])
                    requantize(bld, accs[r - r0], bld.load(bld.gep(terms, [ir.Constant(i64, r)])),
                               bld.load(bld.gep(mults, [ir.Constant(i64, r)])), zy, lo, hi, rowp)
                    bld.branch(after)
                    bld.position_at_end(after)
            _if_rows(bld, fn, rows, r0, group)

    _chunks(bld, fn, sh, chunk)


def _rows_have_min_byte(bld: ir.IRBuilder, fn: ir.Function, row_ptrs: list, k4: ir.Value) -> ir.Value:
    """i1: whether any of the weight rows' 4 * ``k4`` bytes is -128."""
    v4 = ir.VectorType(i8, 4)
    pre = bld.block
    head, body, done = (fn.append_basic_block(n) for n in ("wscan_head", "wscan_body", "wscan_done"))
    bld.branch(head)
    bld.position_at_end(head)
    g = bld.phi(i64)
    m = bld.phi(v4)
    g.add_incoming(ir.Constant(i64, 0), pre)
    m.add_incoming(ir.Constant(v4, [127] * 4), pre)
    bld.cbranch(bld.icmp_signed("<", g, k4), body, done)
    bld.position_at_end(body)
    smin = _intrinsic(bld.module, "llvm.smin.v4i8", v4, [v4, v4])
    cur = m
    for rp in row_ptrs:
        cur = bld.call(smin, [cur, bld.bitcast(bld.load(bld.gep(rp, [g]), align=1), v4)])
    m.add_incoming(cur, body)
    g.add_incoming(bld.add(g, ir.Constant(i64, 1)), body)
    bld.branch(head)
    bld.position_at_end(done)
    low = bld.call(_intrinsic(bld.module, "llvm.vector.reduce.smin.v4i8", i8, [v4]), [m])
    return bld.icmp_signed("==", low, ir.Constant(i8, -128))
