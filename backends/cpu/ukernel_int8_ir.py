"""The LLVM IR of the 8-bit micro-kernels of :mod:`.ukernel_int8` in its ``vnni`` and ``portable`` forms
(the GEMM, convolution and pointwise tiles), the 4-plane interleave, the weights' -128 scan and the IR
helpers the AVX2 form (:mod:`.ukernel_int8_avx2`) shares; :mod:`.ukernel_int8` assembles the module of
a form and holds the contract (what each kernel sums, the callers' shift) and the calls.
"""

from __future__ import annotations

from llvmlite import ir

#: Rows and columns of the tile: 6 x 64 keeps 24 zmm accumulators, 4 B vectors and a broadcast
#: in AVX-512's 32 registers.  The packed layout depends on NR only, the same on every CPU.
MR, NR = 6, 64
LANES = 16  # int32 lanes per vector (4 columns' worth of bytes each is one int32 lane of 4 k)


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


def add_kernel(mod: ir.Module, name: str, vnni: bool, xdomain: bool = False) -> ir.Function:
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


def add_conv_kernel(mod: ir.Module, name: str, vnni: bool, xdomain: bool = False) -> ir.Function:
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


def add_pointwise_kernel(mod: ir.Module, name: str, vnni: bool, xdomain: bool = False) -> ir.Function:
    """``(k4, w, ldw, rows, b, terms, mults, params, out, ldo)``: the MR x NR tile of a GEMM whose rows
    are signed weights and whose columns are unsigned bytes, requantized as it is stored::

        D[r, j] = sum_{g < k4} sum_{t < 4} int8(w[r*ldw + 4g + t]) * uint8(b[(g*NR + j)*4 + t])
        out[r*ldo + j] = saturate(rint(float32(D[r, j] + terms[r]) * mults[r]) + params[0])

    saturated to [params[1], params[2]] and stored as the low byte, for r < ``rows`` (rows past it
    read the last row's weights and store nothing) and all NR columns.  ``b`` is a panel in
    :func:`pack_b`'s layout but of unsigned bytes (:func:`add_pack4` builds it from NCHW planes).
    The dot step takes the unsigned operand from the panel and the signed one broadcast from the weight
    row, the reverse of :func:`add_kernel`: symmetric int8 weights need no shift, so the only
    zero-point term is a per-row constant (``-zx * rowsum(w)``, with the bias, in ``terms``) and no
    column sums are needed.  The requantization is the float32 formula of ``kernels_quant`` step for
    step (int32 wrap, one rounding per operation), so the bytes are the same.  ``xdomain``: the portable
    sums of w * (b - 128) (as :func:`add_kernel`)."""
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


def add_pack4(mod: ir.Module, name: str) -> None:
    """``(src, plane, k4, dst, flip)``: NR columns of 4 * k4 rows of bytes, row k at ``src + k * plane``,
    as a column panel of :func:`add_pointwise_kernel` (``dst[(g*NR + j)*4 + t] = src[(4g + t)*plane + j]
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


def add_wscan(mod: ir.Module, name: str) -> None:
    """``(p, n) -> i64``: 1 when no byte of ``p[:n]`` is -128: a running ``vpminsb`` over 32 bytes at a
    time, then the tail byte by byte (numba's loop over the bytes ran at 6 GB/s, as long as a 1-row
    GEMM call over the same panel)."""
    i8, i64 = ir.IntType(8), ir.IntType(64)
    v32 = ir.VectorType(i8, 32)
    fn = ir.Function(mod, ir.FunctionType(i64, [i8.as_pointer(), i64]), name=name)
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


def add_shift(mod: ir.Module, name: str, shift: int) -> None:
    fn = ir.Function(mod, ir.FunctionType(ir.IntType(64), []), name=name)
    ir.IRBuilder(fn.append_basic_block("entry")).ret(ir.Constant(ir.IntType(64), shift))
