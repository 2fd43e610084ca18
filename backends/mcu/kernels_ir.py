"""The int8 kernels of the mcu backend as kernel IR (``rammer.codegen.kernel_ir`` + ``cunit``),
rendered by the core's C99 dialect.

Same loops and integer arithmetic as the numpy specification (:mod:`.kernels`) and TFLite Micro's
reference kernels; the requantization helpers (``q_out``, ``q_mbqm``) and the bit-serial kernels are
still hand-written C in :mod:`.csource`.  A layer's geometry is a ``const int32_t g[16]`` read by the
indices of ``G`` (the ``G_*`` macros of the C text).
"""

from __future__ import annotations

from rammer.codegen import cunit as cu
from rammer.codegen import kernel_ir as ir

__all__ = ["int8_kernels", "G"]

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


def conv_s8_col() -> cu.Function:
    """CMSIS-NN's portable scheme: per output pixel the window as int16 (q - zp; padding is real 0)
    in a scratch column, then one dot product per output channel, unrolled by 4."""
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
           ir.While(_b("<=", add(v("i"), c(4)), v("n")), (
               ir.Assign("acc", add(v("acc"), add(add(add(mac(0), mac(1)), mac(2)), mac(3)))), inc("i", 4))),
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


def int8_kernels(names) -> list[cu.Function]:
    """The IR functions of the int8 kernels ``names`` uses (each once, in a fixed order)."""
    return [BUILDERS[n]() for n in BUILDERS if n in set(names)]
