"""Every kernel of the mcu backend as kernel IR (``rammer.codegen.kernel_ir`` + ``cunit``), rendered by
the core's C99 dialect: the requantization helpers, the int8 path (the TFLite Micro reference loop
nest, CMSIS-NN's portable column scheme, depthwise, pooling, add, clamp) and the bit-serial direct and
memoised kernels with their per-bit-count leaves.

Same loops and integer arithmetic as the numpy specification (:mod:`.kernels`).  A layer's geometry
is a ``const int32_t g[16]`` read at the indices of ``G``.  :mod:`.csource` holds the two lines of C
the IR does not model (the byte order of a memcpy'd word, a doubling helper).
"""

from __future__ import annotations

from rammer.codegen import cunit as cu
from rammer.codegen import kernel_ir as ir

__all__ = ["int8_kernels", "requant_helpers", "bitserial_direct", "bitserial_memo", "G"]

#: Index of each geometry field in a layer's ``g`` array.
G = {f: i for i, f in enumerate("ih iw ic oh ow oc kh kw sh sw pt pl in_zp out_zp act_min act_max".split())}

v, c = ir.v, ir.c


def _b(op, a, b):
    return ir.BinOp(op, a, b)


def add(a, b):
    return _b("+", a, b)


def sub(a, b):
    return _b("-", a, b)


def mul(a, b):
    return _b("*", a, b)


def lt(a, b):
    return _b("<", a, b)


def ge(a, b):
    return _b(">=", a, b)


def any_of(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = _b("||", out, x)
    return out


def geo(name: str) -> ir.Load:
    return ir.Load("g", c(G[name]))


def for_(var, stop, *body, start=None, step=1):
    return ir.For(var, start if start is not None else c(0), stop, c(step), tuple(body))


def inc(name, by=1):
    return ir.Assign(name, add(v(name), c(by) if isinstance(by, int) else by))


def _geometry(*names):
    """Every geometry field a kernel reads, as a local (read once)."""
    return tuple(ir.Decl("int", n, geo(n)) for n in names)


P = ir.Param


def _conv_params(col: bool = False):
    ps = [P("g", "int32", True, True), P("in", "int8", True, True), P("w", "int8", True, True),
          P("bias", "int32", True, True), P("mult", "int32", True, True), P("shift", "int32", True, True)]
    if col:
        ps.append(P("col", "int16", True))
    ps.append(P("out", "int8", True))
    return tuple(ps)


def _q_out(acc, k):
    return ir.Cast("int8", cu.CallFn("q_out", (acc, ir.Load("mult", k), ir.Load("shift", k), v("out_zp"),
                                               v("act_min"), v("act_max"))))


def _iy():
    return ir.Decl("int", "iy", add(sub(mul(v("oy"), v("sh")), v("pt")), v("ky")))


def _ix():
    return ir.Decl("int", "ix", add(sub(mul(v("ox"), v("sw")), v("pl")), v("kx")))


_ALL = ("ih", "iw", "ic", "oh", "ow", "oc", "kh", "kw", "sh", "sw", "pt", "pl", "out_zp", "act_min", "act_max")


def conv_s8() -> cu.Function:
    """TFLite Micro's reference loop nest: per output, the taps inside the input, one MAC each."""
    tap = (_ix(), ir.If(any_of(lt(v("ix"), c(0)), ge(v("ix"), v("iw"))), (cu.Continue(),)),
           ir.Decl("int", "ib", mul(add(mul(v("iy"), v("iw")), v("ix")), v("ic"))),
           ir.Decl("int", "wb", mul(add(mul(add(mul(v("k"), v("kh")), v("ky")), v("kw")), v("kx")), v("ic"))),
           for_("ci", v("ic"), ir.Assign("acc", add(v("acc"), mul(
               add(ir.Cast("int32", ir.Load("in", add(v("ib"), v("ci")))), v("in_off")),
               ir.Cast("int32", ir.Load("w", add(v("wb"), v("ci")))))))))
    body = (*_geometry(*_ALL), ir.Decl("int32", "in_off", ir.UnOp("-", geo("in_zp"))), ir.Decl("int", "o", c(0)),
            for_("oy", v("oh"), for_("ox", v("ow"), for_("k", v("oc"),
                 ir.Decl("int32", "acc", ir.Load("bias", v("k"))),
                 for_("ky", v("kh"), _iy(), ir.If(any_of(lt(v("iy"), c(0)), ge(v("iy"), v("ih"))), (cu.Continue(),)),
                      for_("kx", v("kw"), *tap)),
                 ir.Store("out", v("o"), _q_out(v("acc"), v("k"))), inc("o")))))
    return cu.Function("k_conv_s8", _conv_params(), body, static=True)


def _sum(xs: list) -> ir.Expr:
    e = xs[0]
    for x in xs[1:]:
        e = add(e, x)
    return e


def conv_s8_col(unroll: int = 4) -> cu.Function:
    """CMSIS-NN's portable scheme: per output pixel the window as int16 (q - zp; padding is real 0)
    in a scratch column, then one dot product per output channel, unrolled by ``unroll`` (4 by
    default; 8 and 16 for the benchmark's sensitivity check)."""
    fill = for_("kx", v("kw"), _ix(),
                ir.If(any_of(lt(v("iy"), c(0)), ge(v("iy"), v("ih")), lt(v("ix"), c(0)), ge(v("ix"), v("iw"))),
                      (for_("ci", v("ic"), ir.Store("col", add(v("cp"), v("ci")), c(0))),),
                      (ir.Decl("int", "ib", mul(add(mul(v("iy"), v("iw")), v("ix")), v("ic"))),
                       for_("ci", v("ic"), ir.Store("col", add(v("cp"), v("ci")), ir.Cast(
                           "int16", add(ir.Load("in", add(v("ib"), v("ci"))), v("in_off"))))))),
                inc("cp", v("ic")))

    def mac(j):
        i = add(v("i"), c(j)) if j else v("i")
        return mul(ir.Load("col", i), ir.Load("w", add(v("wb"), i)))

    dot = (ir.Decl("int", "wb", mul(v("k"), v("n"))), ir.Decl("int32", "acc", ir.Load("bias", v("k"))),
           ir.Decl("int", "i", c(0)),
           ir.While(_b("<=", add(v("i"), c(unroll)), v("n")), (
               ir.Assign("acc", add(v("acc"), _sum([mac(j) for j in range(unroll)]))), inc("i", unroll))),
           ir.While(lt(v("i"), v("n")), (ir.Assign("acc", add(v("acc"), mac(0))), inc("i"))),
           ir.Store("out", v("o"), _q_out(v("acc"), v("k"))), inc("o"))
    body = (*_geometry(*_ALL), ir.Decl("int32", "in_off", ir.UnOp("-", geo("in_zp"))),
            ir.Decl("int", "n", mul(mul(v("kh"), v("kw")), v("ic"))), ir.Decl("int", "o", c(0)),
            for_("oy", v("oh"), for_("ox", v("ow"), ir.Decl("int", "cp", c(0)),
                                     for_("ky", v("kh"), _iy(), fill),
                                     for_("k", v("oc"), *dot))))
    return cu.Function("k_conv_s8_col", _conv_params(col=True), body, static=True)


def dwconv_s8() -> cu.Function:
    tap = (_ix(), ir.If(any_of(lt(v("ix"), c(0)), ge(v("ix"), v("iw"))), (cu.Continue(),)),
           ir.Assign("acc", add(v("acc"), mul(
               add(ir.Cast("int32", ir.Load("in", add(mul(add(mul(v("iy"), v("iw")), v("ix")), v("ic")), v("ch")))),
                   v("in_off")),
               ir.Cast("int32", ir.Load("w", add(mul(add(mul(v("ky"), v("kw")), v("kx")), v("ic")), v("ch"))))))))
    body = (*_geometry(*_ALL), ir.Decl("int32", "in_off", ir.UnOp("-", geo("in_zp"))), ir.Decl("int", "o", c(0)),
            for_("oy", v("oh"), for_("ox", v("ow"), for_("ch", v("oc"),
                 ir.Decl("int32", "acc", ir.Load("bias", v("ch"))),
                 for_("ky", v("kh"), _iy(), ir.If(any_of(lt(v("iy"), c(0)), ge(v("iy"), v("ih"))), (cu.Continue(),)),
                      for_("kx", v("kw"), *tap)),
                 ir.Store("out", v("o"), _q_out(v("acc"), v("ch"))), inc("o")))))
    return cu.Function("k_dwconv_s8", _conv_params(), body, static=True)


def _clamp(name):
    return (ir.If(lt(v(name), v("act_min")), (ir.Assign(name, v("act_min")),)),
            ir.If(_b(">", v(name), v("act_max")), (ir.Assign(name, v("act_max")),)))


def maxpool_s8() -> cu.Function:
    tap = (_ix(), ir.If(any_of(lt(v("ix"), c(0)), ge(v("ix"), v("iw"))), (cu.Continue(),)),
           ir.Decl("int32", "x", ir.Load("in", add(mul(add(mul(v("iy"), v("iw")), v("ix")), v("ic")), v("ch")))),
           ir.If(_b(">", v("x"), v("m")), (ir.Assign("m", v("x")),)))
    body = (*_geometry(*(f for f in _ALL if f != "out_zp")), ir.Decl("int", "o", c(0)),
            for_("oy", v("oh"), for_("ox", v("ow"), for_("ch", v("oc"),
                 ir.Decl("int32", "m", c(-128)),
                 for_("ky", v("kh"), _iy(), ir.If(any_of(lt(v("iy"), c(0)), ge(v("iy"), v("ih"))), (cu.Continue(),)),
                      for_("kx", v("kw"), *tap)),
                 *_clamp("m"), ir.Store("out", v("o"), ir.Cast("int8", v("m"))), inc("o")))))
    return cu.Function("k_maxpool_s8", (P("g", "int32", True, True), P("in", "int8", True, True),
                                        P("out", "int8", True)), body, static=True)


def avgpool_s8() -> cu.Function:
    """Unpadded average pooling, TFLite's rounding (half away from zero)."""
    idx = add(mul(add(mul(add(mul(v("oy"), v("sh")), v("ky")), v("iw")), add(mul(v("ox"), v("sw")), v("kx"))),
                  v("ic")), v("ch"))
    half = _b("/", v("count"), c(2))
    body = (*_geometry("iw", "ic", "oh", "ow", "oc", "kh", "kw", "sh", "sw", "act_min", "act_max"),
            ir.Decl("int32", "count", mul(v("kh"), v("kw"))), ir.Decl("int", "o", c(0)),
            for_("oy", v("oh"), for_("ox", v("ow"), for_("ch", v("oc"),
                 ir.Decl("int32", "s", c(0)),
                 for_("ky", v("kh"), for_("kx", v("kw"), ir.Assign("s", add(v("s"), ir.Cast("int32", ir.Load("in", idx)))))),
                 ir.Decl("int32", "a", ir.Select(_b(">", v("s"), c(0)), _b("/", add(v("s"), half), v("count")),
                                                 _b("/", sub(v("s"), half), v("count")))),
                 *_clamp("a"), ir.Store("out", v("o"), ir.Cast("int8", v("a"))), inc("o")))))
    return cu.Function("k_avgpool_s8", (P("g", "int32", True, True), P("in", "int8", True, True),
                                        P("out", "int8", True)), body, static=True)


def add_s8() -> cu.Function:
    """TFLite's int8 Add: inputs << 20, each rescaled, the sum rescaled to the output."""
    def scaled(buf, zp, i):
        return cu.CallFn("q_mbqm", (mul(sub(ir.Cast("int32", ir.Load(buf, v("i"))), v(zp)), c(1 << 20)),
                                    ir.Load("p", c(i)), ir.Load("p", c(i + 1))))
    body = (for_("i", v("n"),
                 ir.Decl("int32", "sa", scaled("a", "zp_a", 0)), ir.Decl("int32", "sb", scaled("b", "zp_b", 2)),
                 ir.Decl("int32", "y", add(cu.CallFn("q_mbqm", (add(v("sa"), v("sb")), ir.Load("p", c(4)),
                                                                ir.Load("p", c(5)))), v("zp_out"))),
                 ir.If(lt(v("y"), v("lo")), (ir.Assign("y", v("lo")),)),
                 ir.If(_b(">", v("y"), v("hi")), (ir.Assign("y", v("hi")),)),
                 ir.Store("out", v("i"), ir.Cast("int8", v("y")))),)
    return cu.Function("k_add_s8", (P("n", "int"), P("a", "int8", True, True), P("b", "int8", True, True),
                                    P("p", "int32", True, True), P("zp_a", "int32"), P("zp_b", "int32"),
                                    P("zp_out", "int32"), P("lo", "int32"), P("hi", "int32"),
                                    P("out", "int8", True)), body, static=True)


def clamp_s8() -> cu.Function:
    body = (for_("i", v("n"), ir.Decl("int32", "x", ir.Load("in", v("i"))),
                 ir.Store("out", v("i"), ir.Cast("int8", ir.Select(lt(v("x"), v("lo")), v("lo"), ir.Select(
                     _b(">", v("x"), v("hi")), v("hi"), v("x")))))),)
    return cu.Function("k_clamp_s8", (P("n", "int"), P("in", "int8", True, True), P("lo", "int32"),
                                      P("hi", "int32"), P("out", "int8", True)), body, static=True)


#: Builders by kernel name.
BUILDERS = {"k_conv_s8": conv_s8, "k_conv_s8_col": conv_s8_col, "k_dwconv_s8": dwconv_s8,
            "k_maxpool_s8": maxpool_s8, "k_avgpool_s8": avgpool_s8, "k_add_s8": add_s8, "k_clamp_s8": clamp_s8}


def int8_kernels(names, col_unroll: int = 4) -> list[cu.Function]:
    """The IR functions of the int8 kernels ``names`` uses (each once, in a fixed order)."""
    return [conv_s8_col(col_unroll) if n == "k_conv_s8_col" else BUILDERS[n]() for n in BUILDERS if n in set(names)]


# ---- bit-serial weight pool: the direct kernel -------------------------------------------------

def _u32(x: int) -> ir.Expr:
    """An unsigned 32-bit constant (a decimal literal above INT_MAX would be a 64-bit one)."""
    return ir.Cast("uint32", c(x)) if x > 0x7FFFFFFF else c(x)


def _horner(rows: list[str], i: ir.Expr) -> ir.Expr:
    """sum_s row_s[i] << s, most significant first; doubling through ``mcu_dbl`` (GCC then
    uses one add with a shifted operand)."""
    e = ir.Cast("int32", ir.Load(rows[-1], i))
    for r in reversed(rows[:-1]):
        e = add(cu.CallFn("mcu_dbl", (e,)), ir.Load(r, i))
    return e


def _pattern_rows(tag: str, at: ir.Expr, nb: int, pool: int) -> list:
    """The nb table rows (pointers) of the 8 activations at ``word``: nibble planes of the two
    32-bit words (bits 4..7 of all 8 bytes in one word, sign bits flipped: u = q + 128; bits 0..3 in
    another), then per bit one shift, mask and multiply that gathers the 8 bits into the top byte."""
    lo = 8 - nb
    w0, w1 = f"{tag}0", f"{tag}1"
    out = [ir.Decl("uint32", w0, cu.CallFn("mcu_le32_at", (at,))),
           ir.Decl("uint32", w1, cu.CallFn("mcu_le32_at", (add(at, c(4)),))),
           ir.Decl("uint32", f"{tag}h", _b("^", _b("|", _b("&", _b(">>", v(w0), c(4)), _u32(0x0F0F0F0F)),
                                                   _b("&", v(w1), _u32(0xF0F0F0F0))), _u32(0x88888888)))]
    if lo < 4:
        out.append(ir.Decl("uint32", f"{tag}l", _b("|", _b("&", v(w0), _u32(0x0F0F0F0F)),
                                                   _b("<<", _b("&", v(w1), _u32(0x0F0F0F0F)), c(4)))))
    for s in range(nb):
        bit = lo + s
        src, sh = (f"{tag}h", bit - 4) if bit >= 4 else (f"{tag}l", bit)
        gathered = _b(">>", mul(_b("&", _b(">>", v(src), c(sh)), _u32(0x11111111)), _u32(0x01020408)), c(24))
        out.append(cu.PointerDecl("int16", f"{tag}r{s}", add(v("table"), mul(ir.Cast("int", gathered), c(pool))),
                                  const=True))
    return out


def bs_run(nb: int, pair: bool, pool: int, unroll: int = 16) -> cu.Function:
    """``bs_run{nb}[p]``: the bit-serial sums of a run of ``n`` consecutive 8-channel blocks (one kernel
    row of taps inside the input: contiguous activations and, block-major, contiguous index rows)
    added to ``acc[k]``; the channel loop unrolled by ``unroll``; ``pair``: two blocks per channel
    step (one accumulator load/store per two blocks)."""
    step = 2 if pair else 1
    ra = [f"ar{s}" for s in range(nb)]
    rb = [f"br{s}" for s in range(nb)]
    body = _pattern_rows("a", v("ip"), nb, pool)
    if pair:
        body += _pattern_rows("b", add(v("ip"), c(8)), nb, pool)

    def term(kk: ir.Expr) -> ir.Expr:
        e = _horner(ra, ir.Cast("int", ir.Load("ix", kk)))
        if pair:
            e = add(e, _horner(rb, ir.Cast("int", ir.Load("ix", add(v("oc"), kk)))))
        return e

    def upd(kk):
        return ir.Store("acc", kk, add(ir.Load("acc", kk), term(kk)))

    body += [ir.Decl("int", "k", c(0)),
             ir.While(_b("<=", add(v("k"), c(unroll)), v("oc")),
                      tuple(upd(add(v("k"), c(u)) if u else v("k")) for u in range(unroll)) + (inc("k", unroll),)),
             ir.While(lt(v("k"), v("oc")), (upd(v("k")), inc("k"))),
             ir.Assign("n", sub(v("n"), c(step))), ir.Assign("ip", add(v("ip"), c(8 * step))),
             ir.Assign("ix", add(v("ix"), mul(c(step), v("oc")) if pair else v("oc")))]
    loop_body = tuple(body)
    return cu.Function(f"bs_run{nb}{'p' if pair else ''}", (
        P("table", "int16", True, True), P("ip", "int8", True, True), P("ix", "uint8", True, True), P("n", "int"),
        P("acc", "int32", True), P("oc", "int")), (ir.While(_b(">=", v("n"), c(step)), loop_body),),
        static=True, noinline=True)


def bs_memo_run(nb: int, pool: int) -> cu.Function:
    """``bs_memo{nb}``: the memoised variant of :func:`bs_run` (for layers with more output channels
    than pool vectors): per block, the bit-serial sum of every pool vector once, then one lookup per
    output channel."""
    rows = [f"ar{s}" for s in range(nb)]
    body = (*_pattern_rows("a", v("ip"), nb, pool),
            for_("i", c(pool), ir.Store("sums", v("i"), _horner(rows, v("i")))),
            for_("k", v("oc"), ir.Store("acc", v("k"), add(ir.Load("acc", v("k")),
                                                           ir.Load("sums", ir.Cast("int", ir.Load("ix", v("k"))))))),
            ir.Assign("n", sub(v("n"), c(1))), ir.Assign("ip", add(v("ip"), c(8))),
            ir.Assign("ix", add(v("ix"), v("oc"))))
    return cu.Function(f"bs_memo{nb}", (
        P("table", "int16", True, True), P("ip", "int8", True, True), P("ix", "uint8", True, True), P("n", "int"),
        P("sums", "int32", True), P("acc", "int32", True), P("oc", "int")), (ir.While(_b(">=", v("n"), c(1)), body),),
        static=True, noinline=True)


PAIR_BITS = (2, 3)
PAIR_UNROLL = 8


def _dispatch(nb: int, memo: bool = False) -> ir.Stmt:
    """The run of kernel row ``ky`` at ``nb`` bits (pairs of blocks, then an odd last one)."""
    ip, ix = add(v("in"), v("ib")), add(v("idx"), v("xb"))
    if memo:
        return ir.Invoke(f"bs_memo{nb}", (v("table"), ip, ix, v("n"), v("sums"), v("acc"), v("oc")))
    args = (v("table"), ip, ix, v("n"), v("acc"), v("oc"))
    if nb not in PAIR_BITS:
        return ir.Invoke(f"bs_run{nb}", args)
    last = sub(v("n"), c(1))
    return ir.Block((ir.Invoke(f"bs_run{nb}p", args),
                     ir.If(_b("!=", _b("&", v("n"), c(1)), c(0)), (ir.Invoke(f"bs_run{nb}", (
                         v("table"), add(ip, mul(c(8), last)), add(ix, mul(last, v("oc"))), c(1), v("acc"),
                         v("oc"))),))))


def conv_bs(memo: bool = False) -> cu.Function:
    """acc[k] = sum over the taps inside the input and their 8-channel blocks of
    sum_s T[pattern_s][idx[block][k]] << (lo + s); out = requantized acc + bias + the correction
    for the dropped low bits.  Per output, each kernel row of taps inside the input is one run."""
    chain = cu.Switch(v("nb"), tuple((nb, (_dispatch(nb, memo),)) for nb in range(2, 9)),
                      (ir.Comment("act_bits outside 2..8: model_run refused it"),))
    row = (ir.Decl("int", "iy", add(sub(mul(v("oy"), v("sh")), v("pt")), v("ky"))),
           ir.If(any_of(lt(v("iy"), c(0)), ge(v("iy"), v("ih"))), (cu.Continue(),)),
           ir.Decl("int", "n", mul(sub(v("kx1"), v("kx0")), v("nj"))),
           ir.Decl("int", "ib", mul(add(add(mul(v("iy"), v("iw")), v("x0")), v("kx0")), v("ic"))),
           ir.Decl("int", "xb", mul(mul(add(mul(v("ky"), v("kw")), v("kx0")), v("nj")), v("oc"))),
           chain)
    lo_mask = sub(_b("<<", c(1), v("lo")), c(1))
    requant = (ir.Decl("int32", "a", add(add(mul(ir.Load("acc", v("k")), _b("<<", c(1), v("lo"))), ir.Load("bias", v("k"))),
                                         _b(">>", mul(ir.Load("wsum", v("k")), lo_mask), c(1)))),
               ir.Store("out", v("o"), _q_out(v("a"), v("k"))), inc("o"))
    body = (*_geometry("ih", "iw", "ic", "oh", "ow", "oc", "kh", "kw", "sh", "sw", "pt", "pl", "out_zp", "act_min",
                       "act_max"),
            ir.Decl("int", "lo", sub(c(8), v("nb"))), ir.Decl("int", "nj", _b("/", v("ic"), c(8))),
            ir.Decl("int", "o", c(0)),
            for_("oy", v("oh"), for_("ox", v("ow"),
                 ir.Decl("int", "x0", sub(mul(v("ox"), v("sw")), v("pl"))),
                 ir.Decl("int", "kx0", ir.Select(lt(v("x0"), c(0)), ir.UnOp("-", v("x0")), c(0))),
                 ir.Decl("int", "kx1", ir.Select(lt(sub(v("iw"), v("x0")), v("kw")), sub(v("iw"), v("x0")), v("kw"))),
                 for_("k", v("oc"), ir.Store("acc", v("k"), c(0))),
                 ir.If(lt(v("kx0"), v("kx1")), (for_("ky", v("kh"), *row),)),
                 for_("k", v("oc"), *requant))))
    return cu.Function("k_conv_bs_memo" if memo else "k_conv_bs", (
        P("g", "int32", True, True), P("in", "int8", True, True), P("idx", "uint8", True, True),
        P("bias", "int32", True, True), P("wsum", "int32", True, True), P("mult", "int32", True, True),
        P("shift", "int32", True, True), P("table", "int16", True, True), P("nb", "int"),
        *((P("sums", "int32", True),) if memo else ()), P("acc", "int32", True),
        P("out", "int8", True)), body, static=True)


def bitserial_direct(pool: int) -> list[cu.Function]:
    """The direct bit-serial kernel and its leaves (one per bit count, pairs up to 4 bits)."""
    return ([bs_run(nb, False, pool) for nb in range(2, 9)] + [bs_run(nb, True, pool, PAIR_UNROLL) for nb in PAIR_BITS]
            + [conv_bs()])


def bitserial_memo(pool: int) -> list[cu.Function]:
    """The memoised bit-serial kernel and its leaves."""
    return [bs_memo_run(nb, pool) for nb in range(2, 9)] + [conv_bs(memo=True)]


# ---- fixed-point requantization (TFLite / gemmlowp) ----------------------------------------------

def _l(x) -> ir.Expr:
    return ir.Cast("long", x if not isinstance(x, int) else c(x))


def requant_helpers(need_out: bool) -> list[cu.Function]:
    """q_srdhm (SaturatingRoundingDoublingHighMul), q_rdbpot (RoundingDivideByPOT), q_mbqm
    (MultiplyByQuantizedMultiplier, with a saturating left shift where TFLite's would overflow) and,
    with ``need_out``, q_out (requantize, add the zero point, clamp)."""
    i32min, i32max = v("INT32_MIN"), v("INT32_MAX")
    srdhm = cu.Function("q_srdhm", (P("a", "int32"), P("b", "int32")), (
        ir.If(_b("&&", _b("==", v("a"), i32min), _b("==", v("b"), i32min)), (cu.Return(i32max),)),
        ir.Decl("long", "ab", mul(_l(v("a")), _l(v("b")))),
        ir.Decl("long", "s", add(v("ab"), ir.Select(ge(v("ab"), c(0)), _b("<<", _l(1), c(30)),
                                                     sub(c(1), _b("<<", _l(1), c(30)))))),
        ir.Comment("s / 2^31 truncated toward zero: floor, plus one for a negative s with a remainder"),
        ir.Decl("int32", "q", ir.Cast("int32", _b(">>", v("s"), c(31)))),
        ir.If(_b("&&", lt(v("s"), c(0)), _b("!=", _b("&", v("s"), c(0x7FFFFFFF)), c(0))), (inc("q"),)),
        cu.Return(v("q"))), returns="int32", static=True)
    rdbpot = cu.Function("q_rdbpot", (P("x", "int32"), P("e", "int32")), (
        ir.Decl("int32", "mask", ir.Cast("int32", sub(_b("<<", ir.Cast("uint32", c(1)), v("e")),
                                                      ir.Cast("uint32", c(1))))),
        ir.Decl("int32", "remainder", _b("&", v("x"), v("mask"))),
        ir.Decl("int32", "threshold", add(_b(">>", v("mask"), c(1)), ir.Select(lt(v("x"), c(0)), c(1), c(0)))),
        cu.Return(add(_b(">>", v("x"), v("e")), ir.Select(_b(">", v("remainder"), v("threshold")), c(1), c(0))))),
        returns="int32", static=True)
    mbqm = cu.Function("q_mbqm", (P("x", "int32"), P("mult", "int32"), P("shift", "int32")), (
        ir.If(_b(">", v("shift"), c(0)), (
            ir.Comment("multiplier >= 1: saturating left shift first (TFLite: int32 x << shift)"),
            ir.Decl("long", "w", mul(_l(v("x")), _b("<<", _l(1), v("shift")))),
            ir.Assign("x", ir.Select(_b(">", v("w"), i32max), i32max,
                                     ir.Select(lt(v("w"), i32min), i32min, ir.Cast("int32", v("w"))))),
            cu.Return(cu.CallFn("q_srdhm", (v("x"), v("mult")))))),
        cu.Return(cu.CallFn("q_rdbpot", (cu.CallFn("q_srdhm", (v("x"), v("mult"))), ir.UnOp("-", v("shift")))))),
        returns="int32", static=True)
    out = [srdhm, rdbpot, mbqm]
    if need_out:
        out.append(cu.Function("q_out", (P("acc", "int32"), P("mult", "int32"), P("shift", "int32"), P("zp", "int32"),
                                         P("lo", "int32"), P("hi", "int32")), (
            ir.Decl("int32", "y", add(cu.CallFn("q_mbqm", (v("acc"), v("mult"), v("shift"))), v("zp"))),
            ir.If(lt(v("y"), v("lo")), (ir.Assign("y", v("lo")),)),
            ir.If(_b(">", v("y"), v("hi")), (ir.Assign("y", v("hi")),)),
            cu.Return(ir.Cast("int8", v("y")))), returns="int8", static=True))
    return out
