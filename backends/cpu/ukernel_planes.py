"""The plane micro-kernel: a few output channels of a convolution by a run of output pixels, its
input read in place from the padded (stride-phase) input planes through a table of one offset per k.

    C[r*ldc + j] = act(sum_k a[k*PLANES_ROWS + r] * b[btab[k] + j] (+ bias[r]) (+ res[r*ldr + j]))

for r < PLANES_ROWS output channels and j < NR consecutive output pixels of one output row: with the
input planes padded and split by stride phase, a k = (channel, kernel row, kernel column) reads NR
consecutive floats of one plane, so there is neither a gather (the direct form's im2col panel) nor a
transposed store (the pixel-row form's): the tile's rows are NCHW output rows.

It serves convolutions with few output channels per group (RegNet's and ResNeXt's groups of 4-8
channels): the pixel-row form computes a group's channels in panels of at least 16 (AVX2), so 8
channels did half the work for nothing, and the direct form gathered K floats per pixel for 8
channels' multiply-adds.  4 rows x 2 vectors (AVX2: 8 ymm accumulators, 4 broadcasts of weights,
2 loads of input and one table load per k step).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .machine_code import MachineCode, arrays_are, call_codegen, uses
from .ukernel import NR, WIDTH, _fused_store, _k_loop

PLANES_SYMBOL = "rammer_cpu_ukernel_planes"
#: Output channels of a plane tile (and of the weights' packed panels).
PLANES_ROWS = 4


def _add_planes_kernel(mod: ir.Module, rows: int = PLANES_ROWS) -> None:
    """``(k, a, b, btab, c, ldc, flags, bias, res, ldr)``, stored per the EPI_* ``flags``."""
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    fp = f32.as_pointer()
    names = ("k", "a", "b", "btab", "c", "ldc", "flags", "bias", "res", "ldr")
    kinds = {"k": i64, "ldc": i64, "flags": i64, "ldr": i64, "btab": i64.as_pointer()}
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [kinds.get(n, fp) for n in names]), name=PLANES_SYMBOL)
    for arg, name in zip(fn.args, names):
        arg.name = name
    k, a, b, btab, c, ldc, flags, bias, res, ldr = fn.args
    bld = ir.IRBuilder(fn.append_basic_block("entry"))

    def a_row(bld: ir.IRBuilder, kk: ir.Value, r: int) -> ir.Value:  # a + kk * rows + r
        return bld.gep(a, [bld.add(bld.mul(kk, ir.Constant(i64, rows)), ir.Constant(i64, r))])

    bld, accs = _k_loop(fn, bld, k, rows, WIDTH, NR, b, a_row, b_table=btab)
    _fused_store(fn, bld, accs, c, ldc, flags, bias, res, ldr, rows, NR, WIDTH)


def planes_module() -> ir.Module:
    mod = ir.Module(name="rammer_ukernel_planes")
    _add_planes_kernel(mod)
    return mod


PLANES = MachineCode(f"ukernel planes {PLANES_ROWS}x{NR}", planes_module, (PLANES_SYMBOL,))


@uses(PLANES_SYMBOL)
@intrinsic
def ukernel_planes(typingctx, k, A, a_off, B, b_off, T, t_off, C, c_off, ldc, flags, Bias, bias_off, Res, res_off,
                   ldr):
    """The plane tile: for r < PLANES_ROWS and j < NR, with
    ``t = sum_k A[a_off + k*PLANES_ROWS + r] * B[b_off + T[t_off + k] + j]``,
    ``C[c_off + r*ldc + j] = act(t (+ C) (+ Bias[bias_off + r]) (+ Res[res_off + r*ldr + j]))`` per the
    EPI_* ``flags``."""
    if not (arrays_are(types.float32, A, B, C, Bias, Res) and arrays_are(types.int64, T)):
        return None
    sig = types.none(k, A, a_off, B, b_off, T, t_off, C, c_off, ldc, flags, Bias, bias_off, Res, res_off, ldr)
    return sig, call_codegen(PLANES_SYMBOL, "iffqfiiffi")
