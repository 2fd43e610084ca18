"""Lowering one graph node to a GPU rKernel: the kernel-IR template, and per rTask the device
function's ``rtask_id`` and arguments (pointer arguments are :class:`Ref`: a tensor of the node
plus an element offset, resolved to arena offsets once memory is planned).

:func:`lower_node` either returns a :class:`Lowered` or raises :class:`NoGpuKernel` saying why
(an op with no rKernel, an attribute value no rKernel implements, a tensor of a dtype the op
cannot run on).  Data movement (Slice, Split, Concat, Transpose, constant Pad, Reshape, Gather of
constant indices in strided order...) is derived from rammer's own reference implementation run
on index arrays, turned into strided views and then checked against that index map element by
element, so a view this module gets wrong is refused, never run.  ``mult`` picks among tilings:
elements per rTask = threads x mult.  Integer and bool tensors are exact float32 values in the
arena (:mod:`.lower_ints`); only ops that move, select or gather values may touch them (data
movement, Gather, Where, Cast: :mod:`.lower_index`, :mod:`.lower_ints`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Union

import numpy as np

from rammer.codegen import kernel_ir as ir
from rammer.errors import OpExecutionError, RammerError, ShapeError
from rammer.ir import Graph, Node
from rammer.ops.registry import OpContext, get_op

from . import kernels as gk
from . import kernels_conv as kc
from . import kernels_index as kx
from . import kernels_model as km
from . import kernels_nn as kn
from . import kernels_reduce as kr
from .fuse import FUSED_DOMAIN, FUSED_OP, lower_fused
from .lower_index import lower_cumsum, lower_gather, lower_gather_elements, lower_layernorm
from .lower_ints import ARENA_DTYPES, lower_cast, output_refusal
from .lower_quant import QUANT_OPS, lower_quant
from .lower_reduce import REDUCE_OPS, lower_reduce, lower_resize

__all__ = ["Ref", "Lowered", "NoGpuKernel", "lower_node", "GPU_OPS", "TILINGS", "BLOCK_THREADS", "CONV_IMPLICIT_GEMM"]

#: Threads of a persistent block: kernels with barriers use exactly this many.
BLOCK_THREADS = 256
#: Elements per rTask, in units of the kernel's threads, for the chunked kernels.
TILINGS = (1, 4)
#: The ``mult`` that picks a Conv's implicit-GEMM form (1: direct).
CONV_IMPLICIT_GEMM = 2
_BIG = 1 << 30

UNARY = frozenset(km.UNARY_OPS)
BINARY = frozenset(km.BINARY_OPS)
COPY = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Split",
                  "Concat", "Pad", "Expand", "Dropout"})
#: Ops whose values pass through unchanged (moved, selected, gathered, cast without change): they may
#: read and write the integer and bool tensors the arena carries as exact float32 values.
INDEX_OPS = frozenset({"Gather", "GatherElements", "Cast", "Where"})
GPU_OPS = UNARY | BINARY | COPY | INDEX_OPS | frozenset({"MatMul", "Gemm", "Conv", "MaxPool", "AveragePool",
                                                         "GlobalAveragePool", "GlobalMaxPool", "Softmax", "LogSoftmax",
                                                         "ConvTranspose", "CumSum", "LRN", "ConstantOfShape",
                                                         "Resize", "LayerNormalization", *REDUCE_OPS,
                                                         *QUANT_OPS})


class NoGpuKernel(RammerError):
    """No GPU rKernel implements this node (the message names node, op and why)."""


@dataclass(frozen=True)
class Ref:
    """A pointer argument: input (``io="in"``) or output ``slot`` of the node, plus ``offset`` floats."""

    io: str
    slot: int
    offset: int = 0


Arg = Union[Ref, int, float]


@dataclass(frozen=True)
class Lowered:
    kernel: ir.Kernel
    #: One per rTask: (the device function's rtask_id, arguments per kernel parameter).
    calls: tuple[tuple[int, tuple[Arg, ...]], ...]
    flops: float
    bytes: float

    @property
    def shared_bytes(self) -> int:
        return sum(s.size * 4 for s in self.kernel.shared)


def _fail(node: Node, why: str) -> NoGpuKernel:
    return NoGpuKernel(f"{node.label}: no GPU rKernel for {node.op_type}: {why}")


def _shape(graph: Graph, name: str) -> tuple[int, ...]:
    return tuple(int(d) for d in graph.value_info[name].shape)


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _pad6(values: list[int], fill: int) -> list[int]:
    if len(values) > km.MAX_RANK:
        raise ValueError("rank")
    return [fill] * (km.MAX_RANK - len(values)) + list(values)


def _chunks(total: int, chunk: int) -> int:
    return max(1, math.ceil(total / chunk))


#: The lowerings of the last graph lowered: a compile lowers each node three times (the
#: unsupported-node check, the scheduler's candidates, the program), and a copy's view is
#: derived by running the reference op on index arrays.  Keyed by node identity; holding the
#: graph keeps the ids valid.
_MEMO: dict[str, Any] = {"graph": None, "lowered": {}}


def lower_node(node: Node, graph: Graph, mult: int = 1) -> Lowered:
    """The GPU rKernel of ``node`` at tiling ``mult``; :class:`NoGpuKernel` when there is none."""
    if _MEMO["graph"] is not graph:
        _MEMO["graph"], _MEMO["lowered"] = graph, {}
    key = (id(node), mult)
    hit = _MEMO["lowered"].get(key)
    if hit is None:
        try:
            hit = (node, _lower_node(node, graph, mult))
        except NoGpuKernel as exc:
            hit = (node, exc)
        _MEMO["lowered"][key] = hit
    if hit[0] is not node:  # cannot happen while the graph (which holds its nodes) is alive
        raise RuntimeError("lowering memo out of date")
    if isinstance(hit[1], NoGpuKernel):
        raise hit[1]
    return hit[1]


def _lower_node(node: Node, graph: Graph, mult: int = 1) -> Lowered:
    op = node.op_type
    if node.domain == FUSED_DOMAIN and op == FUSED_OP:
        return lower_fused(node, graph, mult, Lowered, Ref)
    if node.domain not in ("", "ai.onnx") or op not in GPU_OPS:
        raise _fail(node, "the GPU backends have no rKernel for this op")
    why = output_refusal(node, graph)
    if why:
        raise _fail(node, why)
    free = _value_slots(node)
    for name in [*node.inputs, *node.outputs]:
        if not name or name in graph.initializers:
            continue
        dtype = graph.value_info[name].dtype
        if dtype == "float32" or (name in free and dtype in ARENA_DTYPES):
            continue
        if op in COPY and name in node.inputs[1:]:
            raise _fail(node, f"its input '{name}' is computed at run time; it must be a constant")
        raise _fail(node, f"tensor '{name}' is {dtype}; the GPU rKernels are float32 (integer and bool tensors "
                          f"only move through copies, Gather, Where and Cast)")
    try:
        if op in UNARY:
            return _unary(node, graph, mult)
        if op in BINARY:
            return _binary(node, graph, mult)
        if op in COPY:
            return _copy(node, graph, mult)
        if op in ("MatMul", "Gemm"):
            return _gemm(node, graph)
        if op == "Conv":
            return _conv(node, graph, mult)
        if op == "ConvTranspose":
            return _conv_transpose(node, graph)
        if op in ("MaxPool", "AveragePool"):
            return _pool(node, graph)
        if op in ("GlobalAveragePool", "GlobalMaxPool"):
            return _global_pool(node, graph)
        if op in REDUCE_OPS:
            return lower_reduce(node, graph, Lowered, Ref)
        if op == "Resize":
            return lower_resize(node, graph, Lowered, Ref)
        if op == "Gather":
            return _gather(node, graph, mult)
        if op == "GatherElements":
            return lower_gather_elements(node, graph, mult, Lowered, Ref)
        if op == "CumSum":
            return lower_cumsum(node, graph, Lowered, Ref)
        if op in QUANT_OPS:
            return lower_quant(node, graph, mult, Lowered, Ref)
        if op == "LRN":
            return _lrn(node, graph)
        if op == "ConstantOfShape":
            return _constant_of_shape(node, graph, mult)
        if op == "Cast":
            return lower_cast(node, graph, mult, Lowered, Ref)
        if op == "Where":
            return _where(node, graph, mult)
        if op == "LayerNormalization":
            return lower_layernorm(node, graph, BLOCK_THREADS, Lowered, Ref)
        return _softmax(node, graph)
    except NoGpuKernel:
        raise
    except ValueError as exc:
        raise _fail(node, str(exc) if str(exc) != "rank" else f"more than {km.MAX_RANK} dimensions") from None


def _value_slots(node: Node) -> set[str]:
    """The tensors of ``node`` that may be integer or bool (exact float32 values in the arena): those
    whose values the op only moves, selects or gathers.  Everything else must be float32."""
    op = node.op_type
    if op in COPY:
        data = node.inputs if op == "Concat" else node.inputs[:1]
    elif op in INDEX_OPS:
        data = node.inputs[:3]  # Gather's data and indices, Cast's input, Where's condition and values
    elif op == "ConstantOfShape":
        data = node.inputs  # the (constant) shape is not read; an integer fill is an exact float32 value
    elif op in QUANT_OPS:
        data = node.inputs  # quantized values, scales, zero points (lower_quant checks the dtypes)
    elif op == "CumSum":
        data = node.inputs[:2]  # integer sums run in 64-bit registers (kernels_index.cumsum_strided)
    else:
        return set()
    return {n for n in (*data, *node.outputs) if n}


def _gather(node: Node, graph: Graph, mult: int) -> Lowered:
    """Constant indices forming a strided view (a scalar, a range) are a copy, like Slice; other
    indices are read from the arena by the gather kernel."""
    if node.inputs[1] in graph.initializers:
        try:
            return _copy(node, graph, mult)
        except (ValueError, ShapeError, OpExecutionError):
            pass  # not a strided view, or out of range (lower_gather refuses it, saying so)
    return lower_gather(node, graph, mult, Lowered, Ref)


def _unary(node: Node, graph: Graph, mult: int) -> Lowered:
    n = int(np.prod(_shape(graph, node.outputs[0])))
    chunk = 256 * mult
    args = (Ref("in", 0), Ref("out", 0), n, chunk)  # one tuple shared by the rTasks (resolved once)
    calls = tuple(zip(range(_chunks(n, chunk)), repeat(args)))
    return Lowered(km.unary_chunked(f"un_{node.op_type.lower()}", node.op_type), calls, 4.0 * chunk, 8.0 * chunk)


def _bcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    st = _strides(shape)
    return _pad6([0 if d == 1 else s for d, s in zip(shape, st)], 0)


def _binary(node: Node, graph: Graph, mult: int) -> Lowered:
    out = _shape(graph, node.outputs[0])
    n = int(np.prod(out))
    dims = _pad6(list(out), 1)
    sa = _bcast_strides(_shape(graph, node.inputs[0]), out)
    sb = _bcast_strides(_shape(graph, node.inputs[1]), out)
    chunk = 256 * mult
    args = (Ref("in", 0), Ref("in", 1), Ref("out", 0), n, chunk, *dims[1:], *sa, *sb)
    calls = tuple(zip(range(_chunks(n, chunk)), repeat(args)))
    return Lowered(km.binary_nd(f"bin_{node.op_type.lower()}", node.op_type), calls, 1.0 * chunk, 12.0 * chunk)


def _where(node: Node, graph: Graph, mult: int) -> Lowered:
    """Where with a condition computed at run time (a constant one runs fused: the elementwise
    pass turns it into 0/1 floats); the condition is a bool as 0.0/1.0 in the arena."""
    out = _shape(graph, node.outputs[0])
    n = int(np.prod(out))
    strides = [s for name in node.inputs[:3] for s in _bcast_strides(_shape(graph, name), out)]
    chunk = 256 * mult
    args = (Ref("in", 0), Ref("in", 1), Ref("in", 2), Ref("out", 0), n, chunk, *_pad6(list(out), 1)[1:], *strides)
    calls = tuple(zip(range(_chunks(n, chunk)), repeat(args)))
    return Lowered(kx.where_nd("where_nd"), calls, 1.0 * chunk, 16.0 * chunk)


# -- data movement -------------------------------------------------------------------------------

def _reference(node: Node, graph: Graph, arrays: dict[int, np.ndarray]) -> list[np.ndarray]:
    values = [arrays.get(i, graph.initializers.get(n)) if n else None for i, n in enumerate(node.inputs)]
    infos = [graph.value_info.get(n) if n else None for n in node.inputs]
    ctx = OpContext(node, graph.opset.get(node.domain, 1), infos, values)
    out = get_op(node).compute(ctx, *values)
    return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else [out])]


@dataclass(frozen=True)
class _View:
    """One copy: over extents ``dims``, source coordinate k + st, valid below se, source index
    ``src_base + ss . s`` and destination ``dst_base + ds . k``."""

    in_slot: int
    out_slot: int
    dims: tuple[int, ...]
    ss: tuple[int, ...]
    ds: tuple[int, ...]
    st: tuple[int, ...]
    se: tuple[int, ...]
    src_base: int
    dst_base: int


def _separable(dims: tuple[int, ...], base: np.ndarray, terms: list[np.ndarray], combine: Any) -> np.ndarray:
    """The array over ``dims`` whose element at ``k`` is ``combine`` of ``base`` and ``terms[d][k_d]``
    over every axis ``d``, built one axis at a time by broadcasting: a copy's index map is checked
    element by element, and an ``np.indices`` grid per axis cost seconds on batched models."""
    out = base
    for term in terms:
        out = combine(out[..., None], term)
    return out.reshape(dims)


def _strided(base: int, strides: list[int] | tuple[int, ...], dims: tuple[int, ...]) -> np.ndarray:
    """``base + strides . k`` for every coordinate ``k`` of ``dims``."""
    return _separable(dims, np.array(base, np.int64),
                      [np.arange(d, dtype=np.int64) * s for d, s in zip(dims, strides)], np.add)


def _affine(index: np.ndarray) -> tuple[int, list[int]]:
    """``index`` (an n-d array of flat positions) as base + strides . coords; ValueError if not."""
    if index.size == 0:
        return 0, [0] * index.ndim
    base = int(index.flat[0])
    strides = []
    for d in range(index.ndim):
        unit = [0] * index.ndim
        if index.shape[d] > 1:
            unit[d] = 1
            strides.append(int(index[tuple(unit)]) - base)
        else:
            strides.append(0)
    if not np.array_equal(_strided(base, strides, tuple(index.shape)), index):
        raise ValueError("its data movement is not a strided view")
    return base, strides


def _gather_view(src: np.ndarray, valid: np.ndarray, in_shape: tuple[int, ...], in_slot: int,
                 out_slot: int) -> _View:
    """The view producing ``out[k] = valid ? x[src[k]] : pad``, checked element by element."""
    dims = tuple(src.shape)
    if valid.all():
        base, ss = _affine(src)  # checks every element against the view
        return _View(in_slot, out_slot, dims, tuple(ss), tuple(_strides(dims)), (0,) * len(dims),
                     (_BIG,) * len(dims), base, 0)
    if len(in_shape) != len(dims) or not valid.any():
        raise ValueError("its padding is not a box around the input")
    p = np.unravel_index(int(np.argmax(valid)), dims)
    s = np.unravel_index(int(src[p]), in_shape)
    view = _View(in_slot, out_slot, dims, tuple(_strides(in_shape)), tuple(_strides(dims)),
                 tuple(int(a) - int(b) for a, b in zip(s, p)), tuple(in_shape), 0, 0)
    # Check the view against the reference's index map: source coordinate k + st, valid in [0, se).
    coords = [np.arange(d, dtype=np.int64) + st for d, st in zip(dims, view.st)]
    ok = _separable(dims, np.array(True), [(a >= 0) & (a < se) for a, se in zip(coords, view.se)], np.logical_and)
    idx = _separable(dims, np.array(view.src_base, np.int64), [a * ssd for a, ssd in zip(coords, view.ss)], np.add)
    if not (np.array_equal(ok, valid) and np.array_equal(idx[ok], src[ok])):
        raise ValueError("its data movement is not a strided, box-padded view (e.g. edge or reflect padding)")
    return view


def _views(node: Node, graph: Graph) -> list[_View]:
    op = node.op_type
    if op == "Concat":
        ins = [(i, n) for i, n in enumerate(node.inputs) if n]
        arrays, offs, off = {}, [], 0
        for i, n in ins:
            size = int(np.prod(_shape(graph, n)))
            arrays[i] = (np.arange(size, dtype=np.float64) + off).reshape(_shape(graph, n))
            offs.append(off)
            off += size
        out = _reference(node, graph, arrays)[0]
        pos = np.empty(out.size, np.int64)
        pos[out.ravel().astype(np.int64)] = np.arange(out.size)
        views = []
        for (i, n), o in zip(ins, offs):
            shape = _shape(graph, n)
            dst = pos[o:o + int(np.prod(shape))].reshape(shape)
            base, ds = _affine(dst)
            views.append(_View(i, 0, shape, tuple(_strides(shape)), tuple(ds), (0,) * len(shape),
                               (_BIG,) * len(shape), 0, base))
        return views
    in_shape = _shape(graph, node.inputs[0])
    arrays = {0: (np.arange(int(np.prod(in_shape)), dtype=np.float64) + 1).reshape(in_shape)}
    if op == "Pad":
        if node.attrs.get("mode", "constant") not in ("constant", b"constant"):
            raise ValueError(f"pad mode {node.attrs.get('mode')!r} (only constant padding)")
        if len(node.inputs) > 2 and node.inputs[2]:
            arrays[2] = np.zeros((), np.float64)
    outs = _reference(node, graph, arrays)
    views = []
    for k, (name, out) in enumerate(zip(node.outputs, outs)):
        if name and not (op == "Dropout" and k > 0):  # Dropout's mask: unread (_copy refuses otherwise)
            valid = out != 0
            views.append(_gather_view(out.astype(np.int64) - 1, valid, in_shape, 0, k))
    return views


def _pad_value(node: Node, graph: Graph) -> float:
    if node.op_type != "Pad":
        return 0.0
    if graph.opset.get("", 1) < 11:
        return float(node.attrs.get("value", 0.0))
    if len(node.inputs) > 2 and node.inputs[2]:
        value = graph.initializers.get(node.inputs[2])
        if value is None:
            raise ValueError("its constant_value is computed at run time")
        return float(np.asarray(value).ravel()[0]) if value.size else 0.0
    return 0.0


def _copy(node: Node, graph: Graph, mult: int) -> Lowered:
    if node.op_type == "Dropout" and len(node.outputs) > 1 and node.outputs[1] and (
            graph.consumers.get(node.outputs[1]) or node.outputs[1] in {t.name for t in graph.outputs}):
        raise ValueError("its mask output is read (inference Dropout is a copy; its mask is not written)")
    for i, n in enumerate(node.inputs):
        if n and i > 0 and node.op_type != "Concat" and n not in graph.initializers:
            raise ValueError(f"its input '{n}' is computed at run time; it must be a constant")
    pv = _pad_value(node, graph)
    chunk = 256 * mult
    calls = []
    for view in _views(node, graph):
        total = int(np.prod(view.dims))
        args = (Ref("in", view.in_slot, view.src_base), Ref("out", view.out_slot, view.dst_base), total, chunk,
                *_pad6(list(view.dims), 1)[1:], *_pad6(list(view.ss), 0), *_pad6(list(view.ds), 0),
                *_pad6(list(view.st), 0), *_pad6(list(view.se), _BIG), pv)
        calls += zip(range(_chunks(total, chunk)), repeat(args))
    if not calls:  # nothing to move (an empty tensor): one rTask that does nothing
        calls = [(0, (Ref("in", 0), Ref("out", 0), 0, chunk, *[1] * 5, *[0] * 18, *[_BIG] * 6, pv))]
    return Lowered(km.copy_nd("copy_nd"), tuple(calls), 0.0, 8.0 * chunk)


# -- contractions, conv, pooling, softmax ------------------------------------------------------

def _gemm(node: Node, graph: Graph) -> Lowered:
    a, b = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
    has_c, c_strides, alpha, beta = 0, (0, 0), 1.0, 1.0
    if node.op_type == "Gemm":
        ta, tb = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
        m, k = (a[1], a[0]) if ta else a
        n = b[0] if tb else b[1]
        sam, sak = (1, m) if ta else (k, 1)
        sbk, sbn = (1, k) if tb else (n, 1)
        alpha, beta = float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0))
        sab = sbb = 0
        nb = 1
        if len(node.inputs) > 2 and node.inputs[2]:
            cs = _shape(graph, node.inputs[2])
            st = _bcast_strides(cs, (m, n))
            has_c, c_strides = 1, (st[-2], st[-1])
    else:
        if len(a) < 1 or len(b) < 1:
            raise ValueError("MatMul of a scalar")
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        m, k, n = a2[-2], a2[-1], b2[-1]
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        nb = int(np.prod(batch)) if batch else 1

        def batch_stride(bs: tuple[int, ...], size: int) -> int | None:
            if int(np.prod(bs)) == 1 if bs else True:
                return 0
            if (1,) * (len(batch) - len(bs)) + bs == batch:
                return size
            return None  # broadcast along some batch axes only: one call group per batch (below)

        sab, sbb = batch_stride(a2[:-2], m * k), batch_stride(b2[:-2], k * n)
        sam, sak, sbk, sbn = k, 1, n, 1
        if sab is None or sbb is None:
            return _gemm_per_batch(a2, b2, batch, m, n, k)
    t = 16
    tiles = math.ceil(m / t) * math.ceil(n / t) if m and n else 0
    cref = Ref("in", 2) if has_c else Ref("in", 0)
    args = (Ref("in", 0), Ref("in", 1), cref, Ref("out", 0), m, n, k, sab, sam, sak, sbb, sbk, sbn,
            *c_strides, has_c, alpha, beta)
    calls = tuple(zip(range(max(1, nb * tiles)), repeat(args)))
    return Lowered(km.gemm_strided("gemm16", t), calls, 2.0 * t * t * k, 4.0 * 2 * t * k + 4.0 * t * t)


def _gemm_per_batch(a2: tuple[int, ...], b2: tuple[int, ...], batch: tuple[int, ...], m: int, n: int,
                    k: int) -> Lowered:
    """A MatMul whose batch axes broadcast partially (``[2, 1, m, k] x [1, 3, k, n]``): per output
    batch, the operands' element offsets (a broadcast axis adds nothing), and the tiles of one
    2-d product there."""
    t = 16
    tiles = math.ceil(m / t) * math.ceil(n / t) if m and n else 0

    def offsets(shape: tuple[int, ...], size: int) -> np.ndarray:
        shape = (1,) * (len(batch) - len(shape)) + shape
        st = _strides(shape) if shape else []
        idx = np.zeros(batch, np.int64)
        for d, (extent, stride) in enumerate(zip(shape, st)):
            if extent != 1:
                idx += (np.arange(extent) * stride * size).reshape([-1 if j == d else 1 for j in range(len(batch))])
        return idx.ravel()

    a_off, b_off = offsets(a2[:-2], m * k), offsets(b2[:-2], k * n)
    calls = []
    for bi in range(int(np.prod(batch))):
        args = (Ref("in", 0, int(a_off[bi])), Ref("in", 1, int(b_off[bi])), Ref("in", 0), Ref("out", 0, bi * m * n),
                m, n, k, 0, k, 1, 0, n, 1, 0, 0, 0, 1.0, 1.0)
        calls += zip(range(tiles), repeat(args))
    if not calls:
        calls = [(0, (Ref("in", 0), Ref("in", 1), Ref("in", 0), Ref("out", 0), m, n, k, 0, k, 1, 0, n, 1, 0, 0, 0,
                      1.0, 1.0))]
    return Lowered(km.gemm_strided("gemm16", t), tuple(calls), 2.0 * t * t * k, 4.0 * 2 * t * k + 4.0 * t * t)


def _spatial(node: Node, graph: Graph, kernel: tuple[int, ...], dil: tuple[int, ...]) -> tuple[list[int], tuple]:
    """Begin pads (ONNX pads or auto_pad) and strides of a 1-d or 2-d conv/pool."""
    x = _shape(graph, node.inputs[0])
    nsp = len(x) - 2
    if nsp not in (1, 2):
        raise ValueError(f"{nsp}-d {node.op_type} (only 1-d and 2-d)")
    strides = tuple(node.attrs.get("strides", [1] * nsp))
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i in range(nsp):
            total = max(0, (math.ceil(x[2 + i] / strides[i]) - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - x[2 + i])
            pads.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
    elif auto == "VALID":
        pads = [0] * nsp
    else:
        pads = list(node.attrs.get("pads", [0] * (2 * nsp)))[:nsp]
    return pads, strides


def _end_pads(node: Node, graph: Graph, kernel: tuple[int, ...], begins: list[int], strides: tuple) -> list[int]:
    """End pads of a pool: ONNX ``pads``' second half, or what auto_pad adds after the begin pads."""
    x = _shape(graph, node.inputs[0])
    nsp = len(x) - 2
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return [max(0, (math.ceil(x[2 + i] / strides[i]) - 1) * strides[i] + kernel[i] - x[2 + i]) - begins[i]
                for i in range(nsp)]
    if auto == "VALID":
        return [0] * nsp
    return list(node.attrs.get("pads", [0] * (2 * nsp)))[nsp:]


def _as2d(values, fill: int) -> list[int]:
    values = list(values)
    return [fill] + values if len(values) == 1 else values


def _conv(node: Node, graph: Graph, form: int = 1) -> Lowered:
    """``form`` 1: direct (one output per thread); :data:`CONV_IMPLICIT_GEMM`: implicit GEMM tiles."""
    x, w, y = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1]), _shape(graph, node.outputs[0])
    nsp = len(x) - 2
    kernel = tuple(w[2:])
    dil = tuple(node.attrs.get("dilations", [1] * max(nsp, 1)))
    pads, strides = _spatial(node, graph, kernel, dil)
    group = int(node.attrs.get("group", 1))
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    h, wd = _as2d(x[2:], 1)
    oh, ow = _as2d(y[2:], 1)
    kh, kw = _as2d(kernel, 1)
    sh, sw = _as2d(strides, 1)
    ph, pw = _as2d(pads, 0)
    dh, dw = _as2d(dil, 1)
    total = int(np.prod(y))
    args = (Ref("in", 0), Ref("in", 1), Ref("in", 2) if has_bias else Ref("in", 1), Ref("out", 0), int(has_bias),
            total, x[0], x[1], h, wd, y[1], oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, group)
    macs = x[1] // max(group, 1) * kh * kw
    if form == CONV_IMPLICIT_GEMM:
        t = 16
        tiles = -(-(y[1] // group) // t) * -(-(oh * ow) // t)
        calls = tuple(zip(range(max(1, x[0] * group * tiles)), repeat(args)))
        # Per tile: 2 t^2 MACs per K step, reading one t x t weight tile and gathering one input tile.
        return Lowered(kc.conv2d_implicit_gemm("conv_igemm", t), calls, 2.0 * t * t * macs, 8.0 * t * macs)
    threads = 128
    calls = tuple(zip(range(_chunks(total, threads)), repeat(args)))
    return Lowered(kn.conv2d_direct("conv_direct", threads), calls, 2.0 * threads * macs, 8.0 * threads * macs)


def _conv_transpose(node: Node, graph: Graph) -> Lowered:
    """ConvTranspose, 1-d or 2-d, with explicit pads (output_padding only sizes the output, which
    the graph already gives); ``output_shape`` and SAME auto-padding are refused by name."""
    x, w, y = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1]), _shape(graph, node.outputs[0])
    nsp = len(x) - 2
    if nsp not in (1, 2):
        raise ValueError(f"{nsp}-d ConvTranspose (only 1-d and 2-d)")
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto not in ("NOTSET", "VALID") or node.attrs.get("output_shape") is not None:
        raise ValueError("output_shape or SAME auto_pad (give explicit pads)")
    pads = [0] * nsp if auto == "VALID" else list(node.attrs.get("pads", [0] * (2 * nsp)))[:nsp]
    group = int(node.attrs.get("group", 1))
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    h, wd = _as2d(x[2:], 1)
    oh, ow = _as2d(y[2:], 1)
    kh, kw = _as2d(w[2:], 1)
    sh, sw = _as2d(node.attrs.get("strides", [1] * nsp), 1)
    ph, pw = _as2d(pads, 0)
    dh, dw = _as2d(node.attrs.get("dilations", [1] * nsp), 1)
    total = int(np.prod(y))
    args = (Ref("in", 0), Ref("in", 1), Ref("in", 2) if has_bias else Ref("in", 1), Ref("out", 0), int(has_bias),
            total, x[0], x[1], h, wd, y[1], oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, group)
    threads = 128
    macs = x[1] // max(group, 1) * kh * kw
    calls = tuple(zip(range(_chunks(total, threads)), repeat(args)))
    return Lowered(kc.conv_transpose2d_direct("conv_transpose", threads), calls, 2.0 * threads * macs,
                   8.0 * threads * macs)


def _pool(node: Node, graph: Graph) -> Lowered:
    if len([o for o in node.outputs if o]) > 1:
        raise ValueError("the Indices output of MaxPool")
    kernel = tuple(node.attrs["kernel_shape"])
    if any(d != 1 for d in node.attrs.get("dilations", [1] * len(kernel))):
        raise ValueError("dilated pooling")
    pads, strides = _spatial(node, graph, kernel, (1,) * len(kernel))
    x, y = _shape(graph, node.inputs[0]), _shape(graph, node.outputs[0])
    h, wd = _as2d(x[2:], 1)
    oh, ow = _as2d(y[2:], 1)
    kh, kw = _as2d(kernel, 1)
    sh, sw = _as2d(strides, 1)
    ph, pw = _as2d(pads, 0)
    total = int(np.prod(y))
    args = (Ref("in", 0), Ref("out", 0), total, x[0] * x[1], h, wd, oh, ow, kh, kw, sh, sw, ph, pw)
    kind = "max" if node.op_type == "MaxPool" else "avg"
    if kind == "avg" and int(node.attrs.get("count_include_pad", 0)):
        # The divisor counts the window's positions inside the padded input (past the end pads
        # only with ceil_mode): the end pads are parameters too.
        kind = "avg_pad"
        ends = _end_pads(node, graph, kernel, pads, strides)
        args = (*args, *_as2d(ends, 0))
    calls = tuple(zip(range(_chunks(total, 128)), repeat(args)))
    return Lowered(kn.pool2d(f"pool_{kind}", kind, 128), calls, 128.0 * kh * kw, 4.0 * 128 * kh * kw)


def _global_pool(node: Node, graph: Graph) -> Lowered:
    x = _shape(graph, node.inputs[0])
    rows, n = x[0] * x[1], int(np.prod(x[2:]))
    kind = "mean" if node.op_type == "GlobalAveragePool" else "max"
    args = (Ref("in", 0), Ref("out", 0), n)  # one tuple shared by the rTasks (resolved once)
    calls = tuple(zip(range(max(rows, 1)), repeat(args)))
    return Lowered(kn.reduce_rows(f"rows_{kind}", kind, BLOCK_THREADS), calls, float(n), 4.0 * n)


def _softmax(node: Node, graph: Graph) -> Lowered:
    """Softmax and LogSoftmax on any axis: ``x`` seen as ``[outer, n, inner]``.  Over the last axis
    (``inner == 1``) one block per row; over an inner axis one thread per ``(outer, inner)`` pair,
    reading with stride ``inner`` (no transpose).  Before opset 13 the op normalises over every axis
    from ``axis`` on (a row of the 2-d coercion)."""
    x = _shape(graph, node.inputs[0])
    log = node.op_type == "LogSoftmax"
    new_style = graph.opset.get("", 13) >= 13
    axis = int(node.attrs.get("axis", -1 if new_style else 1))
    rank = max(len(x), 1)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} of a rank-{len(x)} tensor")
    axis %= rank
    outer = int(np.prod(x[:axis])) if x else 1
    if new_style:
        n, inner = (x[axis] if x else 1), int(np.prod(x[axis + 1:]))
    else:
        n, inner = int(np.prod(x[axis:])), 1
    kind = "logsoftmax" if log else "softmax"
    if inner == 1:
        args = (Ref("in", 0), Ref("out", 0), n)  # one tuple shared by the rTasks (resolved once)
        calls = tuple(zip(range(max(outer, 1)), repeat(args)))
        return Lowered(gk.softmax_rows(f"{kind}_rows", BLOCK_THREADS, log), calls, 4.0 * n, 12.0 * n)
    total = outer * inner
    threads = 128
    args = (Ref("in", 0), Ref("out", 0), total, n, inner)
    calls = tuple(zip(range(_chunks(total, threads)), repeat(args)))
    return Lowered(kr.softmax_strided(f"{kind}_strided", log, threads), calls, 4.0 * threads * n, 12.0 * threads * n)


def _lrn(node: Node, graph: Graph) -> Lowered:
    x = _shape(graph, node.inputs[0])
    size = int(node.attrs["size"])
    total = int(np.prod(x))
    before = (size - 1) // 2
    args = (Ref("in", 0), Ref("out", 0), total, x[1], int(np.prod(x[2:])), before, size - 1 - before,
            float(node.attrs.get("alpha", 1e-4)) / size, float(node.attrs.get("beta", 0.75)),
            float(node.attrs.get("bias", 1.0)))
    calls = tuple(zip(range(_chunks(total, 128)), repeat(args)))
    return Lowered(kn.lrn("lrn", 128), calls, 3.0 * 128 * size, 4.0 * 128 * size)


def _constant_of_shape(node: Node, graph: Graph, mult: int) -> Lowered:
    """A fill of the static output shape with the op's value (exact in float32: checked here)."""
    value = np.asarray(_reference(node, graph, {})[0]).ravel()
    fill_value = float(value[0]) if value.size else 0.0
    if value.size and np.float32(fill_value) != value[0]:
        raise ValueError(f"its value {value[0]!r} is not exact in float32 (the arena's type)")
    n = int(np.prod(_shape(graph, node.outputs[0])))
    chunk = 256 * mult
    args = (Ref("out", 0), n, chunk, fill_value)  # one tuple shared by the rTasks (resolved once)
    calls = tuple(zip(range(_chunks(n, chunk)), repeat(args)))
    return Lowered(kx.fill("fill", 256), calls, 0.0, 4.0 * chunk)


def describe(low: Lowered) -> dict[str, Any]:
    return {"kernel": low.kernel.name, "rtasks": len(low.calls), "threads": low.kernel.threads,
            "shared_bytes": low.shared_bytes}
