"""rOperator builders that several cpu lowerings share: the GEMM with its fused elementwise
epilogue (MatMul, Gemm, batched MatMuls, RNN cells), the elementwise epilogue program after a
GEMM-like head, the standalone fused elementwise op, and the depthwise window op with its
descriptor words (:mod:`.lower_conv`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from rammer.errors import CompileError
from rammer.ir import Node
from rammer.lower.ew_translate import ew_translate
from rammer.lower.views import View, collapse

from .ewops import BLOCK
from .kernels_gemm import B_PACKED_A_IN_PLACE, KC_PRE, PACK_FLOATS, packed_ok
from .kernels_window import dwconv_scratch
from .lower_context import LowerContext
from .ops import CpuOp, EmitContext, Row, grid_split, split_range
from .program import EwProgram, epilogue_io
from .ukernel import MR, NR, WIDTH
from .ukernel_dwcb import scratch_floats as dwcb_scratch


@dataclass
class GemmSpec:
    """C[b] = alpha * A[b] @ B[b] for every batch matrix b (element strides)."""

    M: int
    N: int
    K: int
    a: View
    a_rs: int
    a_cs: int
    b: View
    b_rs: int
    b_cs: int
    c: View
    c_rs: int
    #: Per batch matrix: element deltas from the views' offsets.
    batches: list[tuple[int, int, int]]
    alpha: float = 1.0
    #: B is a constant packed at compile time (:func:`.kernels_gemm.prepack_b`; ``b`` views the
    #: panels and ``b_rs``/``b_cs`` are unused): tiles start at multiples of NR columns.
    b_prepacked: bool = False


def gemm_op(lw: LowerContext, name: str, nodes: tuple[Node, ...], spec: GemmSpec, epilogue: EwProgram | None,
            space: tuple, extra_reads: tuple[int, ...] = ()) -> CpuOp:
    nb = len(spec.batches)
    M, N, K = spec.M, spec.N, spec.K
    reads = {spec.a.buffer, spec.b.buffer, *extra_reads}
    writes = {spec.c.buffer}
    if epilogue is not None:
        reads |= {v.buffer for v, _ in epilogue.inputs}
        writes |= {v.buffer for _, v in epilogue.outputs}
        reads -= writes
    flops = 2.0 * M * N * K * nb
    nbytes = 4.0 * nb * (M * K + K * N + M * N * (1 + (len(epilogue.inputs) if epilogue else 0)))

    def partition(n: int) -> list:
        if n <= nb:
            return [(b0, b1, 0, M, 0, N) for b0, b1 in (split_range(nb, n, i) for i in range(n))]
        per = max(1, n // nb)
        tiles = prepacked_tiles(M, N, per) if spec.b_prepacked else grid_split(M, N, per, col_align=16)
        if len(tiles) == 1 and n > nb:
            return []
        return [(b, b + 1, m0, m1, c0, c1) for b in range(nb) for m0, m1, c0, c1 in tiles]

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        table = []
        a0, b0, c0 = ctx.locate(spec.a), ctx.locate(spec.b), ctx.locate(spec.c)
        for da, db, dc in spec.batches:
            table += [a0 + da, b0 + db, c0 + dc]
        toff = ctx.side.add_ints(table)
        epi = epilogue.emit(ctx.side, ctx.locate, space) if epilogue is not None else -1
        alpha = ctx.side.add_floats([spec.alpha])
        desc = ctx.side.add_ints([M, N, K, spec.a_rs, spec.a_cs, spec.b_rs, spec.b_cs, spec.c_rs, epi, alpha, toff,
                                  regs, b_packing])
        kernel = "k_gemm_lda" if b_packing == B_PACKED_A_IN_PLACE else "k_gemm"
        return [(kernel, [desc, *part]) for part in parts]

    b_packing = int(spec.b_prepacked)
    if spec.b_prepacked and a_in_place(M, N, K, spec.a_cs, spec.alpha):
        b_packing = B_PACKED_A_IN_PLACE
    blas = M >= 12 and M * N * K >= 32 * 1024
    regs = epilogue.n_registers() * BLOCK if epilogue is not None else 0
    scratch = regs + (PACK_FLOATS if spec.b_prepacked or packed_ok(M, N, K) else 0)
    return CpuOp(name, "gemm", nodes, tuple(sorted(reads)), tuple(sorted(writes)), flops, nbytes, partition, emit,
                 scratch=scratch, blas=blas, extra={"M": M, "N": N, "K": K, "batches": nb})


#: A GEMM against a weight packed at compile time reads A's rows in place, unpacked, when the weight
#: has at most this many columns (0: never) and a K block of it (:data:`.kernels_gemm.KC_PRE` rows)
#: holds at most A_IN_PLACE_MAX_PANEL_FLOATS (it is re-read from L2 for every MR rows of A).  Packing A
#: costs about a nanosecond a float whatever N is; the multiply-adds it serves are 2N flops a float.
#: Measured (ci/micro_gemm.py --family narrow,linear, CPU time): 1.1-2x faster for N of 19-384 and for
#: N = 640 at K = 160, the same at 640 x 320; slower with K blocks of 1 MiB and more: t5-encoder's
#: 512 x 512 GEMMs 3% (corpus_ab), N = 768 at K >= 768 7-18%.
A_IN_PLACE_MAX_N = 512
A_IN_PLACE_MAX_PANEL_FLOATS = 192 * 1024


def a_in_place(M: int, N: int, K: int, a_cs: int, alpha: float) -> bool:
    """Whether a GEMM on a compile-time-packed B reads A in place (:data:`A_IN_PLACE_MAX_N`): A's
    columns adjacent, no scaling, a narrow B whose K block stays in L2, whole micro-kernel tiles."""
    return (a_cs == 1 and alpha == 1.0 and M >= MR and N <= A_IN_PLACE_MAX_N
            and min(K, KC_PRE) * N <= A_IN_PLACE_MAX_PANEL_FLOATS)


def prepacked_tiles(m: int, n: int, parts: int) -> list[tuple[int, int, int, int]]:
    """``parts`` tiles of an m x n GEMM against a weight packed in NR-column panels: split over the
    columns (whole panels) while there are at least two panels per tile, so each rTask streams its
    own share of the weight once and A (a few token rows, small) is read by all; else over the rows,
    in whole MR-row panels where there are enough."""
    panels = -(-n // NR)
    if panels >= 2 * parts:
        cuts = [split_range(panels, parts, i) for i in range(parts)]
        return [(0, m, p0 * NR, min(n, p1 * NR)) for p0, p1 in cuts]
    row_panels = -(-m // MR)
    if row_panels >= parts:
        cuts = [split_range(row_panels, parts, i) for i in range(parts)]
        return [(r0 * MR, min(m, r1 * MR), 0, n) for r0, r1 in cuts]
    return [split_range(m, min(parts, max(m, 1)), i) + (0, n) for i in range(min(parts, max(m, 1)))]


def epilogue_program(lw: LowerContext, head: Node, members: list[Node], internal: set[str], target: View,
                     shape: tuple[int, ...], bias_in_kernel: bool = False,
                     kernel_members: tuple[Node, ...] = ()) -> EwProgram:
    """The fused elementwise program after a GEMM-like head.  ``bias_in_kernel``: the head's
    kernel adds the bias itself; ``kernel_members``: leading members the kernel applies too
    (a residual Add, a ReLU), so their outputs are the raw tile."""
    out = head.outputs[0]
    prog = EwProgram(tuple(shape))
    raw = prog.load(target)
    value = raw
    if head.op_type == "Gemm" and len(head.inputs) > 2 and head.inputs[2]:
        bias = prog.load(lw.view(head.inputs[2]))
        beta = float(head.attr("beta", 1.0))
        if beta != 1.0:
            bias = prog.op("AFFINE", bias, imms=(beta, 0.0))
        value = prog.op("ADD", raw, bias)
    elif head.op_type == "Conv" and len(head.inputs) > 2 and head.inputs[2] and not bias_in_kernel:
        bias_view = lw.view(head.inputs[2])
        rank = len(shape)
        bias_view = View(bias_view.buffer, bias_view.dtype, (bias_view.shape[0],) + (1,) * (rank - 2),
                         (bias_view.strides[0],) + (0,) * (rank - 2), bias_view.offset)
        value = prog.op("ADD", raw, prog.load(bias_view))
    regs = {out: value}
    if out not in internal and value != raw:
        prog.store(value, lw.views[out])
    for node in kernel_members:
        done = node.outputs[0]
        regs[done] = raw
        if done not in internal and lw.views[done] != target:
            prog.store(raw, lw.views[done])
    for node in members:
        if node in kernel_members:
            continue
        def operand(i: int, node: Node = node) -> int:
            name = node.inputs[i]
            return regs[name] if name in regs else prog.load(lw.view(name))

        def constant(array: np.ndarray) -> int:
            return prog.load(lw.const_view(array))

        o = node.outputs[0]
        regs[o] = ew_translate(node, lw.graph, prog, operand, constant)
        if o not in internal:
            prog.store(regs[o], lw.views[o])
    return prog


#: Most 4-D programs one elementwise group is split into (see :func:`rank4_programs`).
MAX_EW_PROGRAMS = 4096


def rank4_programs(prog: EwProgram, name: str = "") -> list[EwProgram]:
    """``prog`` as programs over the kernel's 4-D space: itself when its operands collapse to 4
    dims, else one per index of the dims left over (a broadcast like [2,3,4,2,3,4] + [2,1,1,2,1,4]
    collapses to 5).  The kernel walks the innermost dim and the three largest others, so the
    programs are as few as they can be."""
    if prog.canonical() is not None:
        return [prog]
    views = [v for v, _ in prog.inputs] + [v for _, v in prog.outputs]
    shape, strides = collapse(prog.shape, [v.strides for v in views])
    inner = len(shape) - 1
    keep = sorted(sorted(range(inner), key=lambda i: -shape[i])[:3]) + [inner]
    loop = [i for i in range(len(shape)) if i not in keep]
    count = math.prod(shape[i] for i in loop)
    if count > MAX_EW_PROGRAMS:
        raise CompileError(f"elementwise group '{name}' over {prog.shape}: its operands' strides collapse to "
                           f"{len(shape)} dims, {count} programs of the 4-D kernel (at most {MAX_EW_PROGRAMS}); "
                           f"make the operands contiguous (e.g. fewer broadcast dims) or use the reference backend")
    sub_shape = tuple(shape[i] for i in keep)
    out = []
    for idx in itertools.product(*(range(shape[i]) for i in loop)):
        def sub(v: View, st: tuple[int, ...]) -> View:
            return View(v.buffer, v.dtype, sub_shape, tuple(st[i] for i in keep),
                        v.offset + sum(j * st[i] for j, i in zip(idx, loop)))
        n_in = len(prog.inputs)
        out.append(replace(prog, shape=sub_shape,
                           inputs=[(sub(v, st), dt) for (v, dt), st in zip(prog.inputs, strides)],
                           outputs=[(r, sub(v, st)) for (r, v), st in zip(prog.outputs, strides[n_in:])],
                           _input_index={}))
    return out


def ew_op(lw: LowerContext, members: list[Node], prog: EwProgram, stored: list[str]) -> CpuOp:
    """A standalone fused elementwise op over the program's 4-D space (or over several programs
    of one 4-D space, :func:`rank4_programs`, each task running all of them on its rows)."""
    name = members[-1].name or members[-1].op_type
    progs = rank4_programs(prog, name)
    space = progs[0].canonical()
    (d0, d1, d2, d3), _ = space
    rows = d0 * d1 * d2
    n_regs = prog.n_registers()
    epi_reads, epi_writes, n_inputs = epilogue_io(prog)
    reads, writes = tuple(sorted(epi_reads)), tuple(sorted(epi_writes))
    elems = rows * d3 * len(progs)
    nbytes = elems * 4.0 * (n_inputs + len(prog.outputs))
    flops = elems * max(len(prog.instrs), 1) * 2.0

    def partition(n: int) -> list:
        # Columns are cut in multiples of 64 elements so rTasks share no cache line.
        return grid_split(rows, d3, n, col_align=64) if elems >= 4096 or n == 1 else []

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        offs = [p.emit(ctx.side, ctx.locate) for p in progs]
        off = offs[0] if len(offs) == 1 else -1 - ctx.side.add_ints([len(offs)] + offs)
        return [("k_ew", [off, r0, r1, c0, c1]) for r0, r1, c0, c1 in parts]

    return CpuOp(name, "ew", tuple(members), reads, writes, flops, nbytes, partition, emit,
                 scratch=n_regs * BLOCK, extra={"program": prog})

# -- the depthwise window op (lower_conv.py) --------------------------------------------------


def window_desc(x: View, out: View, geo: tuple) -> list:
    n, c, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW = geo
    return [x, c, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, out]


def resolve_words(ctx: EmitContext, words: list) -> list[int]:
    return [ctx.locate(w) if isinstance(w, View) else int(w) for w in words]


#: Depthwise convolutions with output planes up to this many pixels run WIDTH channels at a time
#: with channels in the lanes (ukernel_dwcb), from the plane kernel k_dwconv; 0 turns it off.  On
#: larger planes 3x3 windows keep the plane sweeps: at 14 x 14 the two transposes cost about as
#: much as the 9 taps, and MobileNetV2's 14 x 14 layers took 1.1x the sweeps' time
#: (ci/profile_corpus.py; docs/benchmarks.md).
DWCONV_CBLOCK_MAX_PIXELS = 64
#: Windows of at least this many taps (5x5, 7x7) take the channel blocks on planes of any size
#: that the scratch bound allows (the plane sweeps' edge vectors grow with the window).
DWCONV_CBLOCK_MIN_TAPS_ANY_PLANE = 25
#: The scratch the channel blocks may take (the padded input and the output of one block).
DWCONV_CBLOCK_MAX_SCRATCH_BYTES = 1 << 20


def dwconv_channel_blocks(c: int, mult: int, geo: tuple, w_arr: np.ndarray | None) -> bool:
    """Whether k_dwconv runs a depthwise conv's channels in blocks of WIDTH (:mod:`.ukernel_dwcb`):
    small planes (up to 8x8, where a plane's rows fill few lanes) or windows of 5x5 and more;
    constant weights, channel multiplier 1, no dilation, at least one block of channels."""
    kh, kw, sh, sw, dh, dw, OH, OW = geo[4], geo[5], geo[6], geo[7], geo[10], geo[11], geo[12], geo[13]
    if mult != 1 or dh != 1 or dw != 1 or c < WIDTH or w_arr is None or DWCONV_CBLOCK_MAX_PIXELS <= 0:
        return False
    if OH * OW > DWCONV_CBLOCK_MAX_PIXELS and kh * kw < DWCONV_CBLOCK_MIN_TAPS_ANY_PLANE:
        return False
    return 4 * dwcb_scratch(OH, OW, kh, kw, sh, sw) <= DWCONV_CBLOCK_MAX_SCRATCH_BYTES


def dwconv_op(lw: LowerContext, name: str, nodes: tuple[Node, ...], x: View, w: View, out: View,
              prog: EwProgram | None, space: tuple, geo: tuple, mult: int,
              w_arr: np.ndarray | None = None, bias: View | None = None,
              act: tuple[float, float] | None = None, hswish: bool = False, silu: bool = False) -> CpuOp:
    """A depthwise convolution (k_dwconv: plane by plane, or in blocks of WIDTH channels where
    :func:`dwconv_channel_blocks` says).  ``bias`` (one float per output channel), ``act`` (the bounds
    of a ReLU or Clip) and ``hswish`` or ``silu`` (a HardSwish or a SiLU after them) are applied by
    the kernel as it stores."""
    n, c = geo[0], geo[1]
    kh, kw, OH, OW = geo[4], geo[5], geo[12], geo[13]
    flops = 2.0 * n * c * mult * OH * OW * kh * kw
    epi_reads, epi_writes, epi_inputs = epilogue_io(prog)
    nbytes = 4.0 * (x.size + out.size * (2 + epi_inputs))
    reads = {x.buffer, w.buffer} | epi_reads | ({bias.buffer} if bias is not None else set())
    writes = {out.buffer} | epi_writes

    def partition(k: int) -> list:
        if k <= n:
            return [split_range(n, k, i) + (0, c) for i in range(k)]
        per = min(max(1, k // n), c)
        return [(b, b + 1) + split_range(c, per, i) for b in range(n) for i in range(per)]

    regs = prog.n_registers() * BLOCK if prog else 0

    sh, sw, dh, dw = geo[6], geo[7], geo[10], geo[11]
    padded = dwconv_scratch(OH, OW, kh, kw, sh, sw, dh, dw)
    cblock_w: View | int = -1
    if dwconv_channel_blocks(c, mult, geo, w_arr):
        # the same weights tap-major, [kh*kw][C]: a tap's weights for WIDTH channels are one vector
        cblock_w = lw.const_view(np.ascontiguousarray(np.asarray(w_arr, np.float32).reshape(c, kh * kw).T))
        reads = reads | {cblock_w.buffer}
        padded = max(padded, dwcb_scratch(OH, OW, kh, kw, sh, sw))

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        epi = prog.emit(ctx.side, ctx.locate, space) if prog is not None else -1
        plane_act = 1 if hswish else 2 if silu else 0
        fused = [-1 if bias is None else bias, -1 if act is None else ctx.side.add_floats(list(act)), plane_act,
                 cblock_w]
        desc = ctx.side.add_ints(resolve_words(ctx, window_desc(x, out, geo) + [w, mult, epi, regs] + fused))
        return [("k_dwconv", [desc, *p]) for p in parts]

    scratch = regs + padded
    return CpuOp(name, "conv.depthwise", nodes, tuple(sorted(reads - writes)), tuple(sorted(writes)), flops, nbytes,
                 partition, emit, scratch=scratch)
