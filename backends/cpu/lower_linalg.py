"""MatMul, Gemm and Conv as GEMM rOperators with fused epilogues.

* MatMul/Gemm: one GEMM over (broadcast) batch matrices; operands are any
  strided views (a transposed weight is a BLAS ``'T'``), so no copies.
* Conv: the head and epilogue handling is shared with MatMul/Gemm here; the
  convolution kernels are chosen in :mod:`.lower_conv` (the direct depthwise
  kernel, :func:`_dwconv_op`, stays here).

The elementwise nodes fused after the head (bias, BatchNorm, residual add,
activation) become a program run on every output tile by the same rTask.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rammer.ir import Node

from .ewops import BLOCK
from .kernels_gemm import PACK_FLOATS, packed_ok
from .ops import CpuOp, EmitContext, Row, grid_split, split_range
from .program import EwProgram, epilogue_io
from rammer.lower.views import View, broadcast_view

if TYPE_CHECKING:  # pragma: no cover
    from .lowering import Lowerer

#: Ops whose kernels run a fused elementwise epilogue over their finished output (pooling:
#: NASNet adds each pooled branch to another branch and applies a ReLU, two extra passes).
HEAD_OPS = frozenset({"MatMul", "Gemm", "Conv", "AveragePool", "MaxPool"})
POOL_HEADS = frozenset({"AveragePool", "MaxPool"})


def head_reason(lw: Lowerer, node: Node) -> str | None:
    g = lw.graph
    if node.op_type in POOL_HEADS:
        from . import lower_nn

        return lower_nn.reason(lw, node)
    ins = [g.value_info[i] for i in node.inputs if i]
    if any(t.dtype != "float32" for t in ins) or g.value_info[node.outputs[0]].dtype != "float32":
        return "non-float32 operands"
    if node.op_type == "Conv":
        x, w = ins[0], ins[1]
        if len(x.shape) not in (3, 4):
            return f"{len(x.shape) - 2}-D convolution (the CPU kernels do 1-D and 2-D)"
        if node.inputs[1] not in g.initializers:
            return "convolution weights computed at run time"
    if node.op_type == "MatMul" and min(len(t.shape) for t in ins) < 1:
        return "scalar operand"
    return None


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


def gemm_op(lw: Lowerer, name: str, nodes: tuple[Node, ...], spec: GemmSpec, epilogue: EwProgram | None,
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
        tiles = grid_split(M, N, per, col_align=16)
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
                                  regs])
        return [("k_gemm", [desc, *part]) for part in parts]

    blas = M >= 12 and M * N * K >= 32 * 1024
    regs = epilogue.n_registers() * BLOCK if epilogue is not None else 0
    scratch = regs + (PACK_FLOATS if packed_ok(M, N, K) else 0)
    return CpuOp(name, "gemm", nodes, tuple(sorted(reads)), tuple(sorted(writes)), flops, nbytes, partition, emit,
                 scratch=scratch, blas=blas, extra={"M": M, "N": N, "K": K, "batches": nb})


def _matrix(v: View) -> tuple[int, int]:
    """Row and column strides of the last two dims, with size-1 dims normalized."""
    rows, cols = v.shape[-2], v.shape[-1]
    rs, cs = v.strides[-2], v.strides[-1]
    if cols == 1:
        cs = 1 if rs != 1 else max(rows, 1)
    if rows == 1:
        rs = cols if cs == 1 else 1
    return rs, cs


def _matmul_spec(lw: Lowerer, node: Node, c: View) -> GemmSpec:
    a, b = lw.view(node.inputs[0]), lw.view(node.inputs[1])
    if a.rank == 1:
        a = View(a.buffer, a.dtype, (1, a.shape[0]), (0, a.strides[0]), a.offset)
    if b.rank == 1:
        b = View(b.buffer, b.dtype, (b.shape[0], 1), (b.strides[0], 0), b.offset)
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    a = broadcast_view(a, batch + (M, K))
    b = broadcast_view(b, batch + (K, N))
    c = c.with_shape(batch + (M, N)) if c.is_dense() else c
    a_rs, a_cs = _matrix(a)
    b_rs, b_cs = _matrix(b)
    batches = []
    for idx in itertools.product(*(range(d) for d in batch)):
        batches.append((sum(i * s for i, s in zip(idx, a.strides)), sum(i * s for i, s in zip(idx, b.strides)),
                        sum(i * s for i, s in zip(idx, c.strides))))
    return GemmSpec(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c, N, batches or [(0, 0, 0)])


def _unit_axes(lw: Lowerer, node: Node) -> tuple[int, ...]:
    """Where a MatMul's output gains the unit M or N axis of a 1-D operand (positions in the
    batch + (M, N) shape the GEMM computes)."""
    ra, rb = (len(lw.graph.value_info[i].shape) for i in node.inputs[:2])
    batch = max(ra, rb, 2) - 2
    return ((batch,) if ra == 1 else ()) + ((batch + 1,) if rb == 1 else ())


def _as_matrices(prog: EwProgram, axes: tuple[int, ...]) -> EwProgram:
    """A MatMul epilogue built over the output's shape re-expressed over the batch + (M, N) shape
    of the GEMM's tiles: a 1-D operand's unit axis is inserted at each of ``axes``.  (The matrix
    space takes the program's last two dims as the tile's rows and columns: over A[3,4,5] @
    b[5]'s output [3, 4] it walked 3 x 4 tiles where the GEMM wrote 3 batches of 4 x 1.)"""
    if not axes:
        return prog

    def lift(v: View) -> View:
        shape, strides = list(v.shape), list(v.strides)
        for a in axes:
            shape.insert(a, 1)
            strides.insert(a, 0)
        return View(v.buffer, v.dtype, tuple(shape), tuple(strides), v.offset)

    prog.inputs = [(lift(v), dt) for v, dt in prog.inputs]
    prog.outputs = [(r, lift(v)) for r, v in prog.outputs]
    prog.shape = lift(View(0, "float32", prog.shape, (0,) * len(prog.shape))).shape
    return prog


def _transposed_const(lw: Lowerer, name: str) -> View | None:
    """A Gemm's constant transB weights, transposed once at compile time into a dense constant
    (the kernel then streams rows instead of gathering columns: a 33 MB classifier head ran
    as a strided view at 2.5x numpy's time); None when ``name`` is not a 2-D initializer."""
    init = lw.graph.initializers.get(name)
    if init is None or np.ndim(init) != 2 or np.asarray(init).dtype != np.float32:
        return None
    cache = lw.__dict__.setdefault("_transposed_consts", {})
    found = cache.get(name)
    if found is None:
        found = cache[name] = lw.const_view(np.ascontiguousarray(np.asarray(init).T))
    return found


def _gemm_spec(lw: Lowerer, node: Node, c: View) -> GemmSpec:
    a = lw.view(node.inputs[0])
    b = _transposed_const(lw, node.inputs[1]) if node.attr("transB", 0) else None
    if node.attr("transA", 0):
        a = View(a.buffer, a.dtype, a.shape[::-1], a.strides[::-1], a.offset)
    if b is None:
        b = lw.view(node.inputs[1])
        if node.attr("transB", 0):
            b = View(b.buffer, b.dtype, b.shape[::-1], b.strides[::-1], b.offset)
    M, K = a.shape
    N = b.shape[1]
    a_rs, a_cs = _matrix(a)
    b_rs, b_cs = _matrix(b)
    return GemmSpec(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c, N, [(0, 0, 0)], float(node.attr("alpha", 1.0)))


def lower_head(lw: Lowerer, head: Node, members: list[Node], internal: set[str]) -> None:
    """A GEMM-like head with its fused elementwise members."""
    g = lw.graph
    out = head.outputs[0]
    shape = g.value_info[out].shape
    # Where the GEMM writes its raw tile: its own output, or (when only the
    # epilogue reads it) the first float32 output the epilogue stores.
    target_name = out
    if out in internal:
        stored = [m.outputs[0] for m in members if m.outputs[0] not in internal
                  and g.value_info[m.outputs[0]].dtype == "float32" and g.value_info[m.outputs[0]].shape == shape]
        if stored:
            target_name = stored[0]
        else:
            internal.discard(out)
            lw.views[out] = lw.new_dense("float32", shape)
    target = lw.views[target_name]
    needs_program = bool(members) or (head.op_type in ("Gemm", "Conv") and len(head.inputs) > 2
                                      and bool(head.inputs[2]))
    if head.op_type == "Conv":
        from .lower_conv import lower_conv

        lower_conv(lw, head, members, internal, target, needs_program, target_name=target_name)
        return
    if head.op_type in POOL_HEADS:
        from .lower_nn import lower_pool

        prog = _epilogue(lw, head, members, internal, target, shape) if members else None
        if prog is not None and len(shape) == 3:
            from .lower_conv import _as_4d

            prog = _as_4d(prog, (shape[0], shape[1], 1, shape[2]))
        if prog is not None and not prog.supported(("conv", shape[1])):
            _unfuse(lw, head, members, internal, target_name)
            return
        lower_pool(lw, head, target, prog, (head, *members))
        return
    space = ("matrix",)
    prog = _epilogue(lw, head, members, internal, target, shape) if needs_program else None
    if prog is not None and head.op_type == "MatMul":
        prog = _as_matrices(prog, _unit_axes(lw, head))
    if prog is not None and not prog.supported(space):
        prog = None
    if prog is None and needs_program:
        _unfuse(lw, head, members, internal, target_name)
        return
    spec = _matmul_spec(lw, head, target) if head.op_type == "MatMul" else _gemm_spec(lw, head, target)
    lw.add_op(gemm_op(lw, head.name or head.op_type, (head, *members), spec, prog, space))


def _epilogue(lw: Lowerer, head: Node, members: list[Node], internal: set[str], target: View,
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

        from rammer.lower.ew_translate import ew_translate

        o = node.outputs[0]
        regs[o] = ew_translate(node, lw.graph, prog, operand, constant)
        if o not in internal:
            prog.store(regs[o], lw.views[o])
    return prog


def _unfuse(lw: Lowerer, head: Node, members: list[Node], internal: set[str], target_name: str) -> None:
    """The epilogue does not fit the GEMM's tile space: GEMM alone, members as an ew op."""
    from .lowering import ew_op

    g = lw.graph
    out = head.outputs[0]
    shape = g.value_info[out].shape
    if out in internal or target_name != out:
        internal.discard(out)
        lw.views[out] = lw.new_dense("float32", shape)
    target = lw.views[out]
    bias = head.op_type in ("Gemm", "Conv") and len(head.inputs) > 2 and head.inputs[2]
    prog = _epilogue(lw, head, [], internal, target, shape) if bias else None
    if prog is not None and not prog.outputs:
        prog.store(prog.instrs[-1].dst, target)
    if head.op_type == "Conv":
        from .lower_conv import lower_conv

        lower_conv(lw, head, [], internal, target, bias, prog_override=prog)
    elif head.op_type in POOL_HEADS:
        from .lower_nn import lower_pool

        lower_pool(lw, head, target, None, (head,))
    else:
        spec = _matmul_spec(lw, head, target) if head.op_type == "MatMul" else _gemm_spec(lw, head, target)
        lw.add_op(gemm_op(lw, head.name or head.op_type, (head,), spec, prog, ("matrix",)))
    if members:
        p, stored = lw.build_program(members, internal, g.value_info[members[0].outputs[0]].shape)
        lw.add_op(ew_op(lw, members, p, stored))


# -- shared by the convolution lowerings (lower_conv.py) ------------------------------------


def _window_desc(x: View, out: View, geo: tuple) -> list:
    n, c, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW = geo
    return [x, c, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW, out]


def _resolve(ctx: EmitContext, words: list) -> list[int]:
    return [ctx.locate(w) if isinstance(w, View) else int(w) for w in words]


#: Depthwise convolutions with output planes up to this many pixels run channels innermost (k_dwconv_cl).
DWCONV_CL_MAX_PIXELS = 36


def _dwconv_op(lw: Lowerer, name: str, nodes: tuple[Node, ...], x: View, w: View, out: View,
               prog: EwProgram | None, space: tuple, geo: tuple, mult: int,
               w_arr: np.ndarray | None = None) -> CpuOp:
    n, c = geo[0], geo[1]
    kh, kw, OH, OW = geo[4], geo[5], geo[12], geo[13]
    flops = 2.0 * n * c * mult * OH * OW * kh * kw
    epi_reads, epi_writes, epi_inputs = epilogue_io(prog)
    nbytes = 4.0 * (x.size + out.size * (2 + epi_inputs))
    reads = {x.buffer, w.buffer} | epi_reads
    writes = {out.buffer} | epi_writes

    def partition(k: int) -> list:
        if k <= n:
            return [split_range(n, k, i) + (0, c) for i in range(k)]
        per = min(max(1, k // n), c)
        return [(b, b + 1) + split_range(c, per, i) for b in range(n) for i in range(per)]

    regs = prog.n_registers() * BLOCK if prog else 0
    from .kernels_dwcl import dwcl_scratch
    from .kernels_window import window_scratch

    sh, sw, dh, dw = geo[6], geo[7], geo[10], geo[11]
    if mult == 1 and OH * OW <= DWCONV_CL_MAX_PIXELS and w_arr is not None:
        # small planes: channels innermost (kernels_dwcl), weights tap-major
        weights = lw.const_view(np.ascontiguousarray(np.asarray(w_arr, np.float32).reshape(c, kh * kw).T))
        reads = (reads - {w.buffer}) | {weights.buffer}
        kernel, tail = "k_dwconv_cl", ()
        padded = dwcl_scratch(OH, OW, kh, kw, sh, sw, dh, dw)
    else:
        weights, kernel, tail = w, "k_dwconv", (mult,)
        padded = window_scratch(OH, OW, kh, kw, sh, sw, dh, dw)  # phase planes + accumulator

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        epi = prog.emit(ctx.side, ctx.locate, space) if prog is not None else -1
        desc = ctx.side.add_ints(_resolve(ctx, _window_desc(x, out, geo) + [weights, *tail, epi, regs]))
        return [(kernel, [desc, *p]) for p in parts]

    scratch = regs + padded
    return CpuOp(name, "conv.depthwise", nodes, tuple(sorted(reads - writes)), tuple(sorted(writes)), flops, nbytes,
                 partition, emit, scratch=scratch)

