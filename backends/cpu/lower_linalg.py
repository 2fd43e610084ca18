"""Heads of fusion groups: MatMul, Gemm, Conv and pooling with their fused epilogues.

* MatMul/Gemm: one GEMM over (broadcast) batch matrices; operands are any
  strided views (a transposed weight is a BLAS ``'T'``), so no copies.
* Conv and pooling: the head and epilogue handling is shared with MatMul/Gemm
  here; their kernels are chosen in :mod:`.lower_conv` and :mod:`.lower_nn`.
  The GEMM op and the epilogue program are built in :mod:`.lower_common`.

The elementwise nodes fused after the head (bias, BatchNorm, residual add,
activation) become a program run on every output tile by the same rTask.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from rammer.ir import Node
from rammer.lower.views import View, broadcast_view

from . import lower_nn
from .kernels_gemm import prepack_b, prepacked_ok
from .lower_common import GemmSpec, epilogue_program, ew_op, gemm_op
from .lower_context import LowerContext
from .lower_conv import _as_4d, lower_conv
from .lower_nn import lower_pool
from .program import EwProgram

#: Ops whose kernels run a fused elementwise epilogue over their finished output (pooling:
#: NASNet adds each pooled branch to another branch and applies a ReLU, two extra passes).
HEAD_OPS = frozenset({"MatMul", "Gemm", "Conv", "AveragePool", "MaxPool"})
POOL_HEADS = frozenset({"AveragePool", "MaxPool"})
#: Pack constant GEMM weights at compile time (:func:`_prepacked_weight`); off: pack B per call
#: (the comparison ``ci/micro_gemm.py --before`` makes).
PREPACK_WEIGHTS = True


def head_reason(lw: LowerContext, node: Node) -> str | None:
    g = lw.graph
    if node.op_type in POOL_HEADS:
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
        if not np.isfinite(g.initializers[node.inputs[1]]).all():
            # The kernels skip the taps that fall on padding (and Winograd mixes taps), so a NaN or
            # an infinite weight would not make the NaN that 0 * inf gives there: a silent wrong answer.
            return f"weights '{node.inputs[1]}' hold NaN or infinite values"
    if node.op_type == "MatMul" and min(len(t.shape) for t in ins) < 1:
        return "scalar operand"
    return None


def _matrix(v: View) -> tuple[int, int]:
    """Row and column strides of the last two dims, with size-1 dims normalized."""
    rows, cols = v.shape[-2], v.shape[-1]
    rs, cs = v.strides[-2], v.strides[-1]
    if cols == 1:
        cs = 1 if rs != 1 else max(rows, 1)
    if rows == 1:
        rs = cols if cs == 1 else 1
    return rs, cs


def _matmul_spec(lw: LowerContext, node: Node, c: View, packed_b: View | None = None) -> GemmSpec:
    a = lw.view(node.inputs[0])
    b = packed_b if packed_b is not None else lw.view(node.inputs[1])
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
    return GemmSpec(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c, N, batches or [(0, 0, 0)],
                    b_prepacked=packed_b is not None)


def _rows_stride(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The one element stride of the rows of ``shape[:-1]`` flattened (C order), or None when
    those dims do not collapse into one evenly strided run (0 when there is a single row)."""
    dims = [(d, s) for d, s in zip(shape[:-1], strides[:-1]) if d != 1]
    for (_, s_outer), (d_inner, s_inner) in zip(dims, dims[1:]):
        if s_outer != s_inner * d_inner:
            return None
    return dims[-1][1] if dims else 0


def _fold_batches(spec: GemmSpec, prog: EwProgram | None) -> tuple[GemmSpec, EwProgram | None]:
    """Batch matrices that share one B and whose A and C rows (and the epilogue operands' rows)
    run evenly strided across the batches, as one GEMM of ``batches * M`` rows.  A (L, 1, E)
    activation times a 2-D weight (torch's MultiheadAttention input projection, sequence first)
    was 128 GEMVs of one row each, 4x slower than the 128-row GEMM."""
    nb = len(spec.batches)
    if nb < 2 or any(db != 0 for _, db, _ in spec.batches):
        return spec, prog
    lead = len(spec.a.shape) - 2
    if lead < 1 or len(spec.c.shape) != lead + 2 or math.prod(spec.a.shape[:lead]) != nb:
        return spec, prog
    a_rs = _rows_stride(spec.a.shape[:lead + 1] + (spec.K,), spec.a.strides[:lead + 1] + (spec.a_cs,))
    c_rs = _rows_stride(spec.c.shape[:lead + 1] + (spec.N,), spec.c.strides[:lead + 1] + (1,))
    if a_rs is None or c_rs is None or spec.c.strides[-1] != 1 or a_rs == 0 or c_rs == 0:
        return spec, prog
    rows = nb * spec.M
    if prog is not None:
        if len(prog.shape) != lead + 2:
            return spec, prog

        def flat(v: View) -> View | None:
            rs = _rows_stride(v.shape, v.strides)
            if rs is None:
                return None
            return View(v.buffer, v.dtype, (rows, v.shape[-1]), (rs, v.strides[-1]), v.offset)

        ins = [(flat(v), dt) for v, dt in prog.inputs]
        outs = [(r, flat(v)) for r, v in prog.outputs]
        if any(v is None for v, _ in ins) or any(v is None for _, v in outs):
            return spec, prog
        prog = replace(prog, shape=(rows, prog.shape[-1]), inputs=ins, outputs=outs, _input_index={})
    a = View(spec.a.buffer, spec.a.dtype, (rows, spec.K), (a_rs, spec.a_cs), spec.a.offset)
    c = View(spec.c.buffer, spec.c.dtype, (rows, spec.N), (c_rs, 1), spec.c.offset)
    return replace(spec, M=rows, a=a, a_rs=a_rs, c=c, c_rs=c_rs, batches=[(0, 0, 0)]), prog


def _unit_axes(lw: LowerContext, node: Node) -> tuple[int, ...]:
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


def _transposed_const(lw: LowerContext, name: str) -> View | None:
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


def _prepacked_weight(lw: LowerContext, node: Node) -> View | None:
    """A MatMul's or Gemm's constant 2-D float32 weight packed once at compile time in the GEMM
    micro-kernel's panel layout (:func:`.kernels_gemm.prepack_b`), viewed as the K x N matrix it
    holds (the view's strides only serve the batch offsets: 0 for a weight shared by all); None
    when B is not such a weight or the GEMM has too few rows for the micro-kernel.  The GEMMs of
    transformers (token rows x a constant weight) packed B on every call: at 8 rows x 768 x 3072
    that packing was most of the time.  The unpacked weight is then not placed in the arena at all
    unless another node reads it."""
    init = lw.graph.initializers.get(node.inputs[1]) if PREPACK_WEIGHTS else None
    if init is None:
        return None
    w = np.asarray(init)
    if w.dtype != np.float32 or w.ndim != 2:
        return None
    trans = node.op_type == "Gemm" and bool(node.attr("transB", 0))
    k, n = (w.shape[1], w.shape[0]) if trans else w.shape
    a_shape = lw.graph.value_info[node.inputs[0]].shape
    if len(a_shape) < 2:
        return None
    if node.op_type == "Gemm":
        rows = a_shape[1] if node.attr("transA", 0) else a_shape[0]
    else:
        rows = math.prod(a_shape[:-1])  # the batch folds into the rows when it can (_fold_batches)
    if not prepacked_ok(int(rows), n, k):
        return None
    cache = lw.__dict__.setdefault("_prepacked_weights", {})
    key = (node.inputs[1], trans)
    found = cache.get(key)
    if found is None:
        packed = lw.const_view(prepack_b(w.T if trans else w))
        found = cache[key] = View(packed.buffer, "float32", (k, n), (n, 1), packed.offset)
    return found


def _gemm_spec(lw: LowerContext, node: Node, c: View, packed_b: View | None = None) -> GemmSpec:
    a = lw.view(node.inputs[0])
    if packed_b is not None:
        if node.attr("transA", 0):
            a = View(a.buffer, a.dtype, a.shape[::-1], a.strides[::-1], a.offset)
        a_rs, a_cs = _matrix(a)
        return GemmSpec(a.shape[0], packed_b.shape[1], a.shape[1], a, a_rs, a_cs, packed_b, packed_b.shape[1], 1, c,
                        packed_b.shape[1], [(0, 0, 0)], float(node.attr("alpha", 1.0)), b_prepacked=True)
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


def lower_head(lw: LowerContext, head: Node, members: list[Node], internal: set[str]) -> None:
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
        lower_conv(lw, head, members, internal, target, needs_program, target_name=target_name)
        return
    if head.op_type in POOL_HEADS:
        prog = epilogue_program(lw, head, members, internal, target, shape) if members else None
        if prog is not None and len(shape) == 3:
            prog = _as_4d(prog, (shape[0], shape[1], 1, shape[2]))
        if prog is not None and not prog.supported(("conv", shape[1])):
            _unfuse(lw, head, members, internal, target_name)
            return
        lower_pool(lw, head, target, prog, (head, *members))
        return
    space = ("matrix",)
    prog = epilogue_program(lw, head, members, internal, target, shape) if needs_program else None
    if prog is not None and head.op_type == "MatMul":
        prog = _as_matrices(prog, _unit_axes(lw, head))
    if prog is not None and not prog.supported(space):
        prog = None
    if prog is None and needs_program:
        _unfuse(lw, head, members, internal, target_name)
        return
    spec, prog = _head_spec(lw, head, target, prog)
    lw.add_op(gemm_op(lw, head.name or head.op_type, (head, *members), spec, prog, space))


def _head_spec(lw: LowerContext, head: Node, target: View,
               prog: EwProgram | None) -> tuple[GemmSpec, EwProgram | None]:
    """The GEMM of a MatMul/Gemm head into ``target`` (its weight packed at compile time when it
    can be), with batches folded into rows where they share B."""
    packed_b = _prepacked_weight(lw, head)
    if head.op_type != "MatMul":
        return _gemm_spec(lw, head, target, packed_b), prog
    spec, prog = _fold_batches(_matmul_spec(lw, head, target, packed_b), prog)
    if spec.b_prepacked and not prepacked_ok(spec.M, spec.N, spec.K):
        # the batch did not fold into the rows: too few rows per matrix for the packed weight
        b = lw.view(head.inputs[1])
        b_rs, b_cs = _matrix(b)
        spec = replace(spec, b=b, b_rs=b_rs, b_cs=b_cs, b_prepacked=False)
    return spec, prog


def _unfuse(lw: LowerContext, head: Node, members: list[Node], internal: set[str], target_name: str) -> None:
    """The epilogue does not fit the GEMM's tile space: GEMM alone, members as an ew op."""
    g = lw.graph
    out = head.outputs[0]
    shape = g.value_info[out].shape
    if out in internal or target_name != out:
        internal.discard(out)
        lw.views[out] = lw.new_dense("float32", shape)
    target = lw.views[out]
    bias = head.op_type in ("Gemm", "Conv") and len(head.inputs) > 2 and head.inputs[2]
    prog = epilogue_program(lw, head, [], internal, target, shape) if bias else None
    if prog is not None and not prog.outputs:
        prog.store(prog.instrs[-1].dst, target)
    if head.op_type == "Conv":
        lower_conv(lw, head, [], internal, target, bias, prog_override=prog)
    elif head.op_type in POOL_HEADS:
        lower_pool(lw, head, target, None, (head,))
    else:
        spec, prog = _head_spec(lw, head, target, prog)
        lw.add_op(gemm_op(lw, head.name or head.op_type, (head,), spec, prog, ("matrix",)))
    if members:
        p, stored = lw.build_program(members, internal, g.value_info[members[0].outputs[0]].shape)
        lw.add_op(ew_op(lw, members, p, stored))


