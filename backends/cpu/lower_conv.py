"""Convolutions (other than depthwise) as rOperators.

The default is the implicit GEMM of :mod:`.kernels_conv` (``k_convp``): the
weights are packed at compile time into the micro-kernel's A-panel layout
and stored as a constant buffer of the arena, and each rTask gathers its
input windows straight into packed B panels in scratch, so no column matrix
is ever written.  (It replaced im2col + GEMM: 1.5-2.3x less work on the
zoo's convolutions, see docs/benchmarks.md.)

The epilogue (bias, BatchNorm, residual add, activation) is the one built by
:mod:`.lower_linalg` for every GEMM-like head, walked over the ``("conv", G)``
space: rows are (image, group, channel of the group), columns output pixels.
"""

from __future__ import annotations

import math

import numpy as np

from rammer.ir import Node
from rammer.lower.ew_translate import clip_bounds
from rammer.lower.views import View
from rammer.ops.conv import window_geometry
from rammer.ops.registry import OpContext

from .ewops import BLOCK
from .kernels_conv import (
    FORM_DIRECT,
    FORM_PIXEL_ROWS,
    FORM_PLANES,
    FORM_TRANSPOSED,
    FORM_WINOGRAD,
    PACK_PIXEL_ROWS,
    STRIDED_PLAIN_ROWS,
    WEIGHTS_IN_L2,
    pack_pixel_row_weights,
    pack_weights,
    panel_columns,
    pixel_row_panel_start,
    pixel_row_panels,
)
from .kernels_winograd import scratch_floats as winograd_scratch
from .lower_common import dwconv_op, epilogue_program, resolve_words, window_desc
from .lower_context import LowerContext
from .ops import CpuOp, EmitContext, Row, split_range
from .program import EwProgram, epilogue_io
from .ukernel import MR, NR, PX_MR, PX_NR, WIDTH
from .ukernel_planes import PLANES_ROWS
from .ukernel_winograd import transform_weights as winograd_weights

#: Depth of a K block (channels x taps) of the implicit GEMM: K is cut into
#: near-equal blocks of at most this many rows.
IMPLICIT_KC = 256
#: Pixels per B panel: KC x NC floats (256 KiB at the defaults) stay in the 1 MiB L2
#: next to the C tile, while the 12-row A panel (12 KiB) stays in L1.
IMPLICIT_NC = 256
#: K block depth of the transposed form (small planes: its col panels are only MR pixels wide).
IMPLICIT_KC_TRANSPOSED = 1024
#: A pixel range is not cut below this many pixels per rTask (the B gather repeats per rTask otherwise).
IMPLICIT_MIN_PIXELS = 64
#: 1x1 stride-1 convs up to this depth read their input planes in place instead of gathering
#: packed panels: 32 -> 32 channels at 32x32 24.0 -> 19.6 us, 192 -> 32 106 -> 78 us; the big
#: ResNeXt ones measured the same either way (paired runs), so the deepest keep the packed
#: panels.  None: never (for comparisons).
INPLACE_B_MAX_K: int | None = 2048
#: ... but not when the packed panels pay for themselves: a B panel packed once serves every MR-row
#: panel of output channels, while reading in place steps through K input planes at the plane's
#: stride (past a page from 1,024 pixels: a TLB miss per k step).  Measured (ci/micro_conv.py, 1
#: vEU, CPU time): 1024 -> 256 channels at 64x64 61.9 -> 26.9 ms, 256 -> 64 at 56x56 2.82 -> 2.07,
#: 512 -> 128 at 28x28 1.47 -> 1.24; in place stays ahead with few output channels (192 -> 32 at
#: 28x28, 96 -> 24 at 56x56) or a shallow K (16 -> 96 at 112x112).  False: the depth rule alone.
PACK_LARGE_POINTWISE = True
#: A planar depthwise conv followed by a SiLU (``x * Sigmoid(x)``, EfficientNet's) applies it to each
#: finished plane itself instead of through the elementwise interpreter.  False: for comparisons.
DEPTHWISE_SILU_IN_KERNEL = True
POINTWISE_IN_PLACE_MAX_DEPTH = 32
POINTWISE_PACKED_FROM_CHANNELS = 128
POINTWISE_PACKED_FROM_PIXELS = 1024
POINTWISE_IN_PLACE_FEW_CHANNELS = 32


def pointwise_in_place(K: int, mg: int, ohw: int) -> bool:
    """Whether a stride-1 1x1 conv in the direct form (depth ``K``, ``mg`` output channels per group,
    ``ohw`` pixels) reads its input planes in place rather than gathering packed B panels."""
    if INPLACE_B_MAX_K is None or K > INPLACE_B_MAX_K:
        return False
    if not PACK_LARGE_POINTWISE or K <= POINTWISE_IN_PLACE_MAX_DEPTH:
        return True
    if mg >= POINTWISE_PACKED_FROM_CHANNELS:
        return False
    return ohw < POINTWISE_PACKED_FROM_PIXELS or mg < POINTWISE_IN_PLACE_FEW_CHANNELS
#: An unpadded 1x1 conv in the pixel-row form whose channel panels run outermost (its weights
#: beyond L2) packs its tiles' pixel rows when they take at most this many floats of scratch
#: (see ``kernels_conv._pack_pixel_rows``; 768 KiB, what a 16x16 plane's 32 tiles take for
#: K blocks of up to 768 rows).  None: never (for comparisons).
PACK_PIXEL_ROWS_MAX: int | None = 192 * 1024
#: A strided conv in the pixel-row form copies its padded input rows as they are and reads each pixel
#: row at the stride (``kernels_conv.STRIDED_PLAIN_ROWS``) instead of splitting them into stride-phase
#: planes: a 3x3 stride-2 tile's 9 taps of a channel then read 3 rows of 2 cache lines each, shared
#: between neighbouring taps, where the phase planes spread them over 4 planes (6 rows).  See
#: docs/benchmarks.md (s8-cnn) for the grid.  Strides of 3 or more (patchify stems: a tile's 8
#: pixels on 8 lines) keep the phase planes, unmeasured.  False: the phase planes (for comparisons).
STRIDED_PIXEL_ROWS_PLAIN = True


def _geometry(lw: LowerContext, node: Node) -> tuple:
    g = lw.graph
    x = g.value_info[node.inputs[0]]
    w = g.value_info[node.inputs[1]]
    ctx = OpContext(node, lw.opset, [x, w], [None, None])
    spatial = x.shape[2:]
    kernel = node.attr("kernel_shape") or w.shape[2:]
    geo = window_geometry(ctx, spatial, kernel)
    strides, dilations = effective_steps(geo.out, geo.kernel, geo.strides, geo.dilations)
    if len(spatial) == 1:
        if _column_1d(x.shape[1] // int(node.attr("group", 1)), spatial[0] + geo.pad_begin[0] + geo.pad_end[0]):
            return (spatial + (1,), geo.kernel + (1,), strides + (1,), geo.pad_begin + (0,), dilations + (1,),
                    geo.out + (1,))
        return ((1,) + spatial, (1,) + geo.kernel, (1,) + strides, (0,) + geo.pad_begin, (1,) + dilations,
                (1,) + geo.out)
    return spatial, geo.kernel, strides, geo.pad_begin, dilations, geo.out


def _column_1d(cg: int, padded_length: int) -> bool:
    """Whether a 1-D convolution runs as a one-pixel-wide column ([N, C, L, 1]) rather than a
    one-row plane ([N, C, 1, L]).  Both views have the same memory layout; a row's phase planes
    hold the whole padded length of every input channel of a group and cannot be cut (one output
    row), so a speech front end (384-512 channels over 3,000 frames: 4.6-6 MB) needed more than a
    vEU's scratch.  As a column, its tasks are cut along the time axis like any tall plane's
    (:func:`_phase_rows_cap`).  Short ones keep the row form their kernels were tuned on."""
    return cg * padded_length > PHASE_PLANES_MAX_FLOATS


def effective_steps(out: tuple, kernel: tuple, strides: tuple, dilations: tuple) -> tuple[tuple, tuple]:
    """The strides and dilations a window op's kernels need: 1 along an axis with one output
    pixel (no step is taken) or a kernel of 1 tap.  The phase planes are split ``stride`` ways
    per axis, so a stride of 2**33 over a single output pixel asked for terabytes of scratch."""
    return (tuple(1 if o <= 1 else int(s) for o, s in zip(out, strides)),
            tuple(1 if k <= 1 else int(d) for k, d in zip(kernel, dilations)))


def lower_conv(lw: LowerContext, node: Node, members: list[Node], internal: set[str], target: View,
                needs_program: bool, prog_override: EwProgram | None = None, target_name: str = "") -> None:
    g = lw.graph
    x_info = g.value_info[node.inputs[0]]
    n, c = x_info.shape[:2]
    (H, W), (kh, kw), (sh, sw), (ph, pw), (dh, dw), (OH, OW) = _geometry(lw, node)
    w_arr = g.initializers[node.inputs[1]]
    m = w_arr.shape[0]
    groups = int(node.attr("group", 1))
    cg = c // groups
    out_shape4 = (n, m, OH, OW)
    target4 = View(target.buffer, target.dtype, out_shape4, (m * OH * OW, OH * OW, OW, 1), target.offset)
    # The direct depthwise kernel for true depthwise convolutions; a single
    # input channel with many outputs (a speech model's first layer) is a GEMM.
    depthwise = groups == c and cg == 1 and (c > 1 or m == 1)
    space = ("conv", m if depthwise else groups)
    prog = prog_override
    # The implicit-GEMM kernel adds the bias and applies a ReLU that only reads its output itself;
    # the planar depthwise kernel adds the bias and applies a ReLU or Clip (ReLU6) the same way.
    in_kernel = prog_override is None
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    bias = lw.view(node.inputs[2]) if in_kernel and has_bias else None
    if depthwise and bias is not None and (bias.dtype != "float32" or tuple(bias.strides) != (1,)):
        bias = None  # the sweep reads one float per output channel, contiguous
    act: tuple[float, float] | None = None
    hswish = silu = False
    if depthwise:
        act, taken = _activation_member(lw, node, members, internal) if in_kernel else (None, ())
        if in_kernel and not taken and node.outputs[0] in internal:
            taken = _hardswish_members(lw, members, 0, node.outputs[0], internal)
            hswish = bool(taken)
            if not taken and DEPTHWISE_SILU_IN_KERNEL:
                taken = _silu_members(members, 0, node.outputs[0], internal)
                silu = bool(taken)
        residual, relu = None, 0
    else:
        residual, relu, taken = (_kernel_members(lw, node, members, internal, out_shape4) if in_kernel
                                 else (None, 0, ()))
    if prog is None and needs_program:
        prog = epilogue_program(lw, node, members, internal, target, g.value_info[node.outputs[0]].shape,
                                 bias_in_kernel=bias is not None, kernel_members=taken)
        if not prog.instrs and not prog.outputs:
            prog = None
    if prog is not None:
        prog = _as_4d(prog, out_shape4)
    if prog is not None and not prog.supported(space):
        if prog_override is not None or not members:
            raise AssertionError(f"{node.label}: bias epilogue does not fit the conv space")
        lw.unfuse(node, members, internal, target_name or node.outputs[0])
        return
    name = node.name or "Conv"
    nodes = (node, *members)
    x = lw.dense(node.inputs[0])
    geo = (n, c, H, W, kh, kw, sh, sw, ph, pw, dh, dw, OH, OW)
    if depthwise:
        lw.add_op(dwconv_op(lw, name, nodes, x, lw.view(node.inputs[1]), target4, prog, space, geo, m // c,
                            w_arr=w_arr, bias=bias, act=act, hswish=hswish, silu=silu))
        return
    lw.add_op(implicit_conv_op(lw, name, nodes, x, w_arr, target4, prog, space, geo, groups, bias, relu,
                               residual))


def _activation_member(lw: LowerContext, node: Node, members: list[Node],
                       internal: set[str]) -> tuple[tuple[float, float] | None, tuple[Node, ...]]:
    """A first fused member ``Relu(conv)`` or ``Clip(conv, lo, hi)`` (constant bounds) that the
    depthwise kernel applies as it stores: its bounds (lo, hi) and the member, or (None, ())."""
    value = node.outputs[0]
    if not members or value not in internal or any(value in m.inputs for m in members[1:]):
        return None, ()
    first = members[0]
    if not first.inputs or first.inputs[0] != value or value in first.inputs[1:]:
        return None, ()
    if first.op_type == "Relu":
        return (0.0, math.inf), (first,)
    if first.op_type == "Clip":
        lo, hi = clip_bounds(first, lw.graph)
        return (-math.inf if lo is None else lo, math.inf if hi is None else hi), (first,)
    return None, ()


def _kernel_members(lw: LowerContext, node: Node, members: list[Node], internal: set[str],
                    shape4: tuple[int, ...]) -> tuple[View | None, int, tuple[Node, ...]]:
    """The leading fused members the conv kernel applies itself: ``Add(conv, r)`` (or a two-input
    ``Sum``) with ``r`` a dense float32 tensor of the output's shape (the rows start as bias + r),
    then ``Relu``, a ``Clip`` to [0, 6] (ReLU6), a HardSwish written out as four ops
    (:func:`_hardswish_members`) or a SiLU as two (:func:`_silu_members`).  Each taken member's
    input must be internal and read by no later member (the kernel replaces it).  Returns (the residual's view or None, relu: 0 none, 1 ReLU,
    2 ReLU6, 3 HardSwish, 4 SiLU, the members taken)."""
    value = node.outputs[0]
    residual, relu, taken = None, 0, []
    dense4 = (shape4[1] * shape4[2] * shape4[3], shape4[2] * shape4[3], shape4[3], 1)
    for k, member in enumerate(members[:2]):
        if value not in internal:
            break
        hswish = _hardswish_members(lw, members, k, value, internal)
        silu = () if hswish else _silu_members(members, k, value, internal)
        if hswish or silu:
            taken.extend(hswish or silu)
            relu = 3 if hswish else 4
            break
        if any(value in m.inputs for m in members[k + 1:]):
            break
        ins = list(member.inputs)
        bounds = clip_bounds(member, lw.graph) if member.op_type == "Clip" else None
        if member.op_type in ("Add", "Sum") and not taken and len(ins) == 2 and value in ins and ins[0] != ins[1]:
            other = ins[1] if ins[0] == value else ins[0]
            info = lw.graph.value_info.get(other)
            if info is None or info.dtype != "float32" or len(info.shape) != 4:
                break  # (1-D convs run over 4-D views of 3-D tensors)
            v = lw.view(other)
            # rows read as the output's: dense per image (the batch stride only matters for n > 1)
            if v.dtype != "float32" or tuple(v.shape) != tuple(shape4) or tuple(v.strides[1:]) != dense4[1:] \
                    or (shape4[0] > 1 and v.strides[0] != dense4[0]):
                break
            residual = v
        elif member.op_type == "Relu" and ins == [value]:
            relu = 1
        elif bounds in ((0.0, 6.0), (0.0, None)) and ins and ins[0] == value and value not in ins[1:]:
            relu = 2 if bounds == (0.0, 6.0) else 1
        else:
            break
        taken.append(member)
        value = member.outputs[0]
        if relu:
            break
    return residual, relu, tuple(taken)


def _silu_members(members: list[Node], k: int, value: str, internal: set[str]) -> tuple[Node, ...]:
    """``members[k:k + 2]`` when they compute ``value * Sigmoid(value)`` (SiLU as torch exports it),
    the sigmoid read by the Mul alone and ``value`` by no later member; else ()."""
    two = members[k:k + 2]
    if len(two) < 2 or any(value in m.inputs for m in members[k + 2:]):
        return ()
    sig, mul = two
    if sig.op_type != "Sigmoid" or sig.domain or list(sig.inputs) != [value]:
        return ()
    s = sig.outputs[0]
    if mul.op_type != "Mul" or mul.domain or sorted(mul.inputs) != sorted([value, s]) or value == s:
        return ()
    if s not in internal or [i for m in members for i in m.inputs].count(s) != 1:
        return ()
    return tuple(two)


def _scalar_const(lw: LowerContext, name: str) -> float | None:
    value = lw.graph.initializers.get(name)
    if value is None or np.asarray(value).size != 1 or np.asarray(value).dtype != np.float32:
        return None
    return float(np.asarray(value).reshape(()))


def _hardswish_members(lw: LowerContext, members: list[Node], k: int, value: str,
                       internal: set[str]) -> tuple[Node, ...]:
    """``members[k:k + 4]`` when they compute ``value * Clip(value + 3, 0, 6) / 6`` (HardSwish as
    PaddlePaddle and torch's older exports write it; the division may be a product with 1/6), with
    every value between them internal and ``value`` read by no later member; else ()."""
    four = members[k:k + 4]
    if len(four) < 4 or any(value in m.inputs for m in members[k + 4:]):
        return ()
    add, clip, mul, div = four
    g = lw.graph

    def other(node: Node, known: str) -> str | None:
        ins = list(node.inputs)
        if node.domain or len(ins) != 2 or known not in ins or ins[0] == ins[1]:
            return None
        return ins[1] if ins[0] == known else ins[0]

    if add.op_type != "Add" or _scalar_const(lw, other(add, value) or "") != 3.0:
        return ()
    a3 = add.outputs[0]
    if clip.op_type != "Clip" or not clip.inputs or clip.inputs[0] != a3 or a3 in clip.inputs[1:] \
            or clip_bounds(clip, g) != (0.0, 6.0):
        return ()
    gate = clip.outputs[0]
    if mul.op_type != "Mul" or sorted(mul.inputs) != sorted([value, gate]) or value == gate:
        return ()
    prod = mul.outputs[0]
    if div.op_type == "Div":
        if list(div.inputs[:1]) != [prod] or _scalar_const(lw, div.inputs[1]) != 6.0:
            return ()
    elif div.op_type != "Mul" or _scalar_const(lw, other(div, prod) or "") != float(np.float32(1.0 / 6.0)):
        return ()
    inner = (a3, gate, prod)
    readers = [i for m in members for i in m.inputs]
    if any(t not in internal or readers.count(t) != 1 for t in inner):
        return ()
    return tuple(four)


def implicit_conv_op(lw: LowerContext, name: str, nodes: tuple[Node, ...], x: View, w_arr: np.ndarray, out: View,
                     prog: EwProgram | None, space: tuple, geo: tuple, groups: int, bias: View | None = None,
                     relu: int = 0, residual: View | None = None) -> CpuOp:
    """Convolution tiles (block, output-channel range, pixel range) with packed weights (``k_convp``);
    ``bias``, a ``residual`` added and ``relu`` are applied by the kernel (see :mod:`.kernels_conv`)."""
    n, c, kh, kw, OH, OW = geo[0], geo[1], geo[4], geo[5], geo[12], geo[13]
    m = w_arr.shape[0]
    cg, mg = c // groups, m // groups
    K = cg * kh * kw
    ohw = OH * OW
    blocks = n * groups
    # (the end pads too: an output pixel past the plane reads padding, not the plane in place)
    unpadded_1x1 = (kh == kw == 1 and geo[8] == geo[9] == 0 and (OH - 1) * geo[6] < geo[2]
                    and (OW - 1) * geo[7] < geo[3])
    pointwise = unpadded_1x1 and geo[6] == geo[7] == 1 and (OH, OW) == (geo[2], geo[3])
    # a line of pixels: one axis of one output pixel under a one-tap kernel (a 1-D conv as a row or column)
    line = (OH == 1 and kh == 1) or (OW == 1 and kw == 1)
    # the plane form's rows: output rows of NR pixels or more, or shorter ones of a stride-1 conv (on
    # strided 7x7 outputs the wrapped tiles' stores cost more than the pixel-row form's waste: 5-9%)
    plane_wq = -(-max(geo[3] + geo[9], (OW - 1) * geo[7] + (kw - 1) * geo[11] + 1) // geo[7])
    plane_rows = (OW, plane_wq) if OW >= NR or geo[6] == geo[7] == 1 else None
    form = conv_form(mg, ohw, K, kh * kw, strided_1x1=unpadded_1x1 and not pointwise, line=line,
                     plane_rows=plane_rows)
    wino = winograd_plan(geo, cg, mg, force=FORCE_FORM == FORM_WINOGRAD)
    if wino is not None and FORCE_FORM in (None, FORM_WINOGRAD):
        return _winograd_op(lw, name, nodes, x, w_arr, out, prog, space, geo, groups, bias, relu, residual, wino)
    inplace = pointwise and form == FORM_DIRECT and pointwise_in_place(K, mg, ohw)
    kc_max = IMPLICIT_KC_TRANSPOSED if form == FORM_TRANSPOSED else IMPLICIT_KC
    kc = -(-K // -(-K // kc_max))  # near-equal K blocks
    nc = min(IMPLICIT_NC, -(-ohw // NR) * NR)
    # rows of a packed weight panel; tasks cut output channels in these
    if form == FORM_PLANES:
        kc = K  # (one K block: the tile's accumulators run over the whole of K)
    unit = {FORM_DIRECT: MR, FORM_TRANSPOSED: NR, FORM_PIXEL_ROWS: PX_NR, FORM_PLANES: PLANES_ROWS}[form]
    mpad = -(-mg // unit) * unit
    m_panels = -(-mg // unit)
    if form == FORM_PIXEL_ROWS:
        # each panel packed over the whole of K (its K blocks are runs of a panel's rows), the
        # group's last ones possibly narrower (kernels_conv.pixel_row_panels)
        wide, narrow = pixel_row_panels(mg)
        m_panels = wide + narrow
        mpad = int(pixel_row_panel_start(m_panels, wide))
        wp = lw.const_view(pack_pixel_row_weights(np.asarray(w_arr), groups))
    else:
        wp = lw.const_view(pack_weights(np.asarray(w_arr), groups, kc, unit))
    regs = prog.n_registers() * BLOCK if prog is not None else 0
    sh, sw, pw, dh, dw = geo[6], geo[7], geo[9], geo[10], geo[11]
    wp_width = max(geo[3] + pw, (OW - 1) * sw + (kw - 1) * dw + 1)
    pad_rows = (OH - 1) * sh + (kh - 1) * dh + 1
    if pointwise or (unpadded_1x1 and form == FORM_PIXEL_ROWS):
        pad_rows = 0  # read in place: no phase planes
    # B panels, edge tile, overrun slack, the padded input rows of one group as phase planes, slack
    phases = sh * sw * -(-pad_rows // sh) * -(-wp_width // sw)  # stride-phase planes of the padded rows
    # A task's phase planes hold only the input rows its pixels reach (kernels_conv): on large
    # planes (detectors at 640 px) tasks are cut to at most rows_cap output rows so that they fit.
    rows_cap = _phase_rows_cap(cg, pad_rows, OH, OW, sh, sw, kh, dh, wp_width)
    if rows_cap < OH:
        phases = sh * sw * -(-((rows_cap - 1) * sh + (kh - 1) * dh + 1) // sh) * -(-wp_width // sw)
    pack = False
    plain = (STRIDED_PIXEL_ROWS_PLAIN and form == FORM_PIXEL_ROWS and pad_rows > 0 and (sh > 1 or sw > 1)
             and max(sh, sw) <= 2)
    if form == FORM_PIXEL_ROWS:
        kc = pixel_rows_depth(K, cg * (phases if pad_rows else geo[2] * geo[3]))
        # k and row tables (int64), edge tile, slack, phase planes, slack
        panel = 2 * (K + PX_MR + 1) + PX_MR * PX_NR + NR + cg * phases + NR
        pack_floats = -(-nc // PX_MR) * kc * PX_MR
        pack = (PACK_PIXEL_ROWS_MAX is not None and pad_rows == 0 and mg * K > WEIGHTS_IN_L2
                and pack_floats <= PACK_PIXEL_ROWS_MAX)
        if pack:  # the packed k and row tables (int64), alignment, the packed rows
            panel += 2 * (kc + PX_MR + 1) + 64 + pack_floats
    elif form == FORM_PLANES:  # the tap table (int64), the edge tile, slack, the phase planes, slack
        panel = 2 * (K + 1) + PLANES_ROWS * NR + NR + cg * phases + NR
    else:
        panel = kc * panel_columns(nc) + MR * NR + NR + cg * phases + NR
    flops = 2.0 * blocks * mg * ohw * K
    q_panels = -(-ohw // NR)
    starts = (lambda p: int(pixel_row_panel_start(p, wide))) if form == FORM_PIXEL_ROWS else None

    def partition(k: int) -> list:
        if k <= blocks:
            return [split_range(blocks, k, i) + (0, mg, 0, ohw) for i in range(k)]
        per = k // blocks
        # Pixels first (each rTask gathers only its own pixels); output channels
        # when the pixels run out (each of those rTasks gathers the same B panels),
        # or first when the weights outweigh the input (each rTask then streams its share).
        # (the plane form cuts pixels at output rows: its tiles are runs of one row)
        q_unit, q_units = (OW, OH) if form == FORM_PLANES else (NR, q_panels)
        q_parts = min(per, max(1, ohw // IMPLICIT_MIN_PIXELS), q_units)
        if mg > ohw:
            q_parts = max(1, per // min(per, m_panels))
        m_parts = min(max(1, per // q_parts), m_panels)
        return _grid_parts(blocks, mg, unit, m_panels, m_parts, ohw, q_unit, q_units, q_parts, starts)

    if rows_cap < OH:
        partition = _rows_capped(partition, blocks, mg, ohw, max(NR, (rows_cap - 1) * OW // NR * NR))

    return _conv_op(name, nodes, x, wp, out, prog, space, geo, [groups, cg, mg, wp, mpad, kc, nc],
                    [regs, wp_width, form], bias, relu, residual, int(inplace) | (PACK_PIXEL_ROWS if pack else 0)
                    | (STRIDED_PLAIN_ROWS if plain else 0),
                    flops, partition, regs + panel,
                    {"M": mg, "N": ohw, "K": K, "batches": blocks, "kernel": FORM_NAMES[form], "packed_rows": pack,
                     "plain_rows": plain})


def _conv_op(name: str, nodes: tuple[Node, ...], x: View, wp: View, out: View, prog: EwProgram | None,
             space: tuple, geo: tuple, shape_words: list, form_words: list, bias: View | None, relu: int,
             residual: View | None, flags: int, flops: float, partition, scratch: int, extra: dict) -> CpuOp:
    """A ``k_convp`` op, any form.  Its descriptor (see ``kernels_conv``) is the window words,
    ``shape_words`` (groups .. NC), the fused epilogue's program, ``form_words`` (panel scratch,
    padded width, form), bias, ReLU, residual and ``flags`` (the C_INPLACE word)."""
    epi_reads, epi_writes, epi_inputs = epilogue_io(prog)
    nbytes = 4.0 * (x.size + wp.size + out.size * (1 + epi_inputs))
    reads = {x.buffer, wp.buffer} | epi_reads | {v.buffer for v in (bias, residual) if v is not None}
    writes = {out.buffer} | epi_writes

    def emit(ctx: EmitContext, parts: list) -> list[Row]:
        epi = prog.emit(ctx.side, ctx.locate, space) if prog is not None else -1
        words = resolve_words(ctx, window_desc(x, out, geo) + shape_words + [epi] + form_words
                               + [-1 if bias is None else bias, int(relu), -1 if residual is None else residual, flags])
        desc = ctx.side.add_ints(words)
        return [("k_convp", [desc, *part]) for part in parts]

    return CpuOp(name, "conv", nodes, tuple(sorted(reads - writes)), tuple(sorted(writes)), flops, nbytes,
                 partition, emit, scratch=scratch, blas=True, extra=extra)


#: Floats of a vEU's scratch the phase planes of one conv rTask may take (1.5 of its 2 MiB).
PHASE_PLANES_MAX_FLOATS = 384 * 1024


def _phase_rows_cap(cg: int, pad_rows: int, OH: int, OW: int, sh: int, sw: int, kh: int, dh: int,
                    wp_width: int) -> int:
    """The most output rows one rTask may cover so that its phase planes fit in
    :data:`PHASE_PLANES_MAX_FLOATS` (``OH`` when the whole plane fits, or nothing is padded)."""
    def floats(rows: int) -> int:
        return cg * sh * sw * -(-((rows - 1) * sh + (kh - 1) * dh + 1) // sh) * -(-wp_width // sw)
    if pad_rows == 0 or floats(OH) <= PHASE_PLANES_MAX_FLOATS:
        return OH
    rows = OH
    while rows > 2 and floats(rows) > PHASE_PLANES_MAX_FLOATS:
        rows = max(2, rows // 2 if floats(rows // 2) > PHASE_PLANES_MAX_FLOATS else rows - max(1, rows // 16))
    # (a task of P pixels spans at most P / OW + 1 rows: the pixel cap below keeps it to rows)
    return max(2, rows) if (max(2, rows) - 1) * OW >= NR else OH


def _rows_capped(partition, blocks: int, mg: int, ohw: int, max_pixels: int):
    """``partition`` with every task's pixel range cut into runs of at most ``max_pixels``
    (a multiple of NR), so that its phase planes fit the scratch sized for them."""
    def capped(k: int) -> list:
        parts = partition(k) or [(b, b + 1, 0, mg, 0, ohw) for b in range(blocks)]
        out = []
        for b0, b1, m0, m1, q0, q1 in parts:
            for c0 in range(q0, q1, max_pixels):
                out.append((b0, b1, m0, m1, c0, min(q1, c0 + max_pixels)))
        return out
    return capped


def _grid_parts(blocks: int, mg: int, unit: int, m_panels: int, m_parts: int, ohw: int, q_unit: int,
                q_units: int, q_parts: int, starts=None) -> list:
    """Task rows ``(b, b + 1, m0, m1, q0, q1)`` for every block, cutting the output channels into
    ``m_parts`` runs of whole ``unit``-channel panels (panel p from channel ``starts(p)`` when the
    panels differ in width) and the pixels into ``q_parts`` runs of whole ``q_unit``-pixel units
    (NR pixels, or a tile row's two output rows); [] when that is one task.

    No task may be empty: with more parts than units a task's pixel range came out inverted
    (q0 = j0 * q_unit past ohw), and the kernels size their phase planes from it (a negative
    row count wrote the planes backwards over the arena before the vEU's scratch)."""
    m_parts = max(1, min(m_parts, m_panels))
    q_parts = max(1, min(q_parts, q_units))
    if m_parts * q_parts == 1:
        return []
    parts = []
    for b in range(blocks):
        for mi in range(m_parts):
            p0, p1 = split_range(m_panels, m_parts, mi)
            for qi in range(q_parts):
                j0, j1 = split_range(q_units, q_parts, qi)
                c0, c1 = (starts(p0), starts(p1)) if starts is not None else (p0 * unit, p1 * unit)
                parts.append((b, b + 1, c0, min(mg, c1), j0 * q_unit, min(ohw, j1 * q_unit)))
    return parts


#: The pixel-row form cuts K into blocks when one panel of weights (K x PX_NR floats) and the
#: input it is multiplied with (one group's planes, or padded phase planes) hold more than this
#: many floats (768 KiB of the 1 MiB L2).  A tile reads one line per k, 1 of every 4 lines of a
#: plane of 8x8 pixels: on ResNeXt's 8x8 4096 -> 1024 convs (K = 4096) those lines fall into a
#: quarter of the L2 sets, which the panel's weights then evict from, and how badly depends on
#: where the physical pages land: 2.9-4.2 ms from one arena to the next in one block, 2.9-3.3 in
#: two (in-model, 1 vEU, six processes); four blocks of 1024 cost 3-4% more than two.
PIXEL_ROWS_L2_FLOATS = 192 * 1024


def pixel_rows_depth(K: int, input_floats: int) -> int:
    """Depth of the pixel-row form's K blocks for ``K`` rows of weights and ``input_floats`` of
    one group's input."""
    blocks = -(-(K * PX_NR + input_floats) // PIXEL_ROWS_L2_FLOATS)
    return -(-K // blocks)


FORM_NAMES = {FORM_DIRECT: "implicit", FORM_TRANSPOSED: "implicit-transposed", FORM_PIXEL_ROWS: "pixel-rows",
              FORM_WINOGRAD: "winograd", FORM_PLANES: "planes"}
#: Floats of V and Mx (16 matrices each) one chunk of tile rows of the winograd form may fill
#: (1.5 MiB, past the L2): every chunk reads all of its group's transformed weights U again,
#: and fewer, bigger chunks measured faster (ResNeXt's 64-channel groups at 32x32: chunks of
#: 0.5 / 1 MiB 4.7 / 4.15 ms).  The whole scratch must stay within the vEU's 2 MiB.
WINOGRAD_CHUNK_FLOATS = 384 * 1024
WINOGRAD_MAX_SCRATCH_FLOATS = 448 * 1024
#: The winograd form needs at least this share of each chunk's 32-tile GEMM panels filled,
#: this many channels per group on either side (the GEMMs' depth and height), and this many
#: tiles per plane: its transformed weights are 16/9 the size of the weights, and on small
#: planes streaming them costs more than the multiplies saved (ResNeXt's 256-channel groups
#: at 8x8, 16 tiles: 10.0 ms against the pixel-row form's 6.0).
WINOGRAD_MIN_FILL = 0.75
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MIN_TILES = 40


def winograd_plan(geo: tuple, cg: int, mg: int, force: bool = False) -> tuple[int, int, int] | None:
    """``(tile rows per chunk, its tiles rounded up to NR, padded plane width)`` when the
    winograd form serves this conv (3x3, stride 1, no dilation) and pays (deep enough, its
    GEMM panels filled enough), else None; ``force``: whenever it can serve."""
    kh, kw, sh, sw, dh, dw, OH, OW = geo[4], geo[5], geo[6], geo[7], geo[10], geo[11], geo[12], geo[13]
    if (kh, kw, sh, sw, dh, dw) != (3, 3, 1, 1, 1, 1) or OH < 1 or OW < 1:
        return None
    tw, th = -(-OW // 2), -(-OH // 2)
    mpad = -(-mg // MR) * MR
    trc = max(1, min(th, WINOGRAD_CHUNK_FLOATS // (16 * (cg + mpad) * tw)))
    trc = -(-th // -(-th // trc))  # near-equal chunks
    # the padded rows a tile row's windows read: 2*tw + 2 columns (and slack for the vectors)
    wq = 2 * tw + 2
    while trc > 1 and winograd_scratch(cg, mpad, trc, -(-trc * tw // NR) * NR, wq) > WINOGRAD_MAX_SCRATCH_FLOATS:
        trc -= 1
    tcp = -(-trc * tw // NR) * NR
    if winograd_scratch(cg, mpad, trc, tcp, wq) > WINOGRAD_MAX_SCRATCH_FLOATS:
        return None
    if not force and (cg < WINOGRAD_MIN_CHANNELS or mg < WINOGRAD_MIN_CHANNELS or tw * th < WINOGRAD_MIN_TILES
                      or trc * tw / tcp < WINOGRAD_MIN_FILL):
        return None
    return trc, tcp, wq


def _winograd_op(lw: LowerContext, name: str, nodes: tuple[Node, ...], x: View, w_arr: np.ndarray, out: View,
                 prog: EwProgram | None, space: tuple, geo: tuple, groups: int, bias: View | None, relu: int,
                 residual: View | None, plan: tuple[int, int, int]) -> CpuOp:
    """A 3x3 stride-1 conv in the winograd form (:mod:`.kernels_winograd`): tasks are blocks,
    output-channel panels of MR and whole tile rows (pairs of output rows)."""
    n, c, OH, OW = geo[0], geo[1], geo[12], geo[13]
    m = w_arr.shape[0]
    cg, mg = c // groups, m // groups
    ohw = OH * OW
    blocks = n * groups
    trc, tcp, wq = plan
    mpad = -(-mg // MR) * MR
    u = winograd_weights(np.asarray(w_arr)).reshape(16, groups, mg, cg).transpose(1, 0, 2, 3)
    wp = lw.const_view(pack_weights(np.ascontiguousarray(u).reshape(groups * 16 * mg, cg, 1, 1), groups * 16, cg, MR))
    regs = prog.n_registers() * BLOCK if prog is not None else 0
    panel = winograd_scratch(cg, mpad, trc, tcp, wq)
    # 16/36 of the direct form's multiplies, plus the transforms
    flops = 2.0 * blocks * mg * ohw * cg * 9 * 0.55
    m_panels = -(-mg // MR)
    tile_rows = -(-OH // 2)

    def partition(k: int) -> list:
        if k <= blocks:
            return [split_range(blocks, k, i) + (0, mg, 0, ohw) for i in range(k)]
        # tile rows first (each rTask transforms only its own input rows), then channel panels
        per = k // blocks
        r_parts = min(per, tile_rows)
        m_parts = min(max(1, per // r_parts), m_panels)
        return _grid_parts(blocks, mg, MR, m_panels, m_parts, ohw, 2 * OW, tile_rows, r_parts)

    # (the KC and NC words hold the tile rows per chunk and its padded tile count)
    return _conv_op(name, nodes, x, wp, out, prog, space, geo, [groups, cg, mg, wp, mpad, trc, tcp],
                    [regs, wq, FORM_WINOGRAD], bias, relu, residual, 0, flops, partition, regs + panel,
                    {"M": mg, "N": ohw, "K": cg * 9, "batches": blocks, "kernel": FORM_NAMES[FORM_WINOGRAD]})


#: Force one form for every convolution (None: chosen by :func:`conv_form`); for tests and benchmarks.
FORCE_FORM: int | None = None


#: Stride-1 1x1 convs take the pixel-row form on planes up to this many pixels whose weights
#: (per group) hold more than POINTWISE_ROWS_MIN_WEIGHTS floats (1 MiB, the L2): ResNeXt's 8x8
#: 4096 <-> 1024 channel convs 3.3-3.5 -> 2.8 ms, 2048 -> 512 at 7x7 583 -> 515 us; 512 -> 512
#: at 8x8 (1 MiB) is a tie, 128 -> 64 (32 KiB) favours the direct form.  With packed pixel rows
#: (PACK_PIXEL_ROWS_MAX) ResNeXt's 16x16 ones gained too (in-model, 1 vEU): 512 -> 4096 18%,
#: 512 -> 2048 11-12%, 2048 -> 512 6-9%; at 32x32 they lost 8-23%.
POINTWISE_ROWS_MAX_PIXELS = 256
#: The pixel-row form's weight against the direct form's tile fill for a 1-D convolution of several
#: taps (see :func:`conv_form`).  With AVX2 (Zen 3) the direct form's packed windows were 7-37% faster
#: (0.9: the pixel rows only where they fill clearly better); with AVX-512 (Zen 4, 12 x 32 direct
#: tiles) the pixel rows were faster on the whole grid of ci/micro_conv1d.py, 15-18% on wav2vec2's
#: and Whisper's strided 384-512 channel convs (docs/benchmarks.md), so they take the planes' 1.15.
LINE_PIXEL_ROWS_WEIGHT = 1.15 if WIDTH == 16 else 0.9
POINTWISE_ROWS_MIN_WEIGHTS = 256 * 1024
#: Weights of more than this many floats (per group; 384 KiB, most of a Zen 3 core's 512 KiB L2) but
#: no more than POINTWISE_ROWS_MIN_WEIGHTS: a stride-1 1x1 conv on a plane of PX_MR to
#: POINTWISE_ROWS_MAX_PIXELS pixels takes the pixel-row form where it fills its tiles clearly better
#: than the direct form (POINTWISE_ROWS_FILL_WEIGHT on its fill).  A 7x7 plane's 49 pixels fill 49
#: of the direct form's 64 tile columns but 49 of the pixel-row form's 52 rows: measured
#: (ci/micro_conv.py, 1 vEU) 440 -> 440, 960 -> 160, 672 -> 192, 1152 -> 192 and 464 -> 464 at 7x7
#: 16-20% faster; with lighter weights (256 -> 256, 232 -> 232, 116 -> 116) the direct form stayed
#: as fast or faster.  (Planes of fewer pixels than a pixel-row tile, the squeeze-excitation convs
#: at 1x1, measured mixed.)
POINTWISE_ROWS_FILL_MIN_WEIGHTS = 96 * 1024
#: The pixel-row form's weight against the direct form's fill in that rule; 0: never (for comparisons).
POINTWISE_ROWS_FILL_WEIGHT = 0.9


#: Groups of at most this many output channels may take the plane form (kernels_conv._planes): the
#: pixel-row form's panels are at least 16 channels wide (AVX2), so it wastes half of their work or more.
PLANES_MAX_CHANNELS = 8


def conv_form(mg: int, ohw: int, K: int = 0, taps: int = 1, strided_1x1: bool = False, line: bool = False,
              plane_rows: tuple[int, int] | None = None) -> int:
    """The form of the implicit GEMM for ``mg`` output channels per group, ``ohw`` pixels and
    depth ``K`` (``taps`` kernel positions per input channel; ``strided_1x1``: an unpadded 1x1
    conv with a stride; ``line``: the output pixels are one line, a 1-D convolution).

    The pixel-row form needs no gather but pays a transposed store per tile,
    so it needs depth: measured (docs/benchmarks.md) it wins on every 3x3 or
    larger conv with K >= 64 (15-40%).  Stride-1 1x1 convs keep the direct
    form (its micro-kernel reads their input planes in place too), except on
    small planes with weights beyond L2: there the direct form streams each
    weight for only ohw / NR tiles, the pixel-row form for ohw / PX_MR.  A
    strided 1x1 conv in the pixel-row form reads its input in place where the
    direct form gathers it: 1.1-2.6x faster, measured from 32 to 4096 channels.
    A 1-D convolution of several taps (``line``) takes the pixel rows only
    where they fill their tiles clearly better (a short line: 100 outputs):
    elsewhere the direct form's packed windows took 7-37% less time on a grid
    of speech-front-end and Conv1D shapes (ci/micro_conv1d.py).
    A conv of several taps with at most :data:`PLANES_MAX_CHANNELS` output channels per group may take
    the plane form (``plane_rows``: its output rows' length and its phase planes' row length, given):
    no gather and no transposed store, but tiles of NR pixels of one output row, or on rows shorter
    than NR, NR positions of the phase planes' rows (the padding between rows computed for nothing).
    Among the other eligible forms the one that fills its tiles best wins.
    """
    if FORCE_FORM is not None and FORCE_FORM != FORM_WINOGRAD:
        return FORCE_FORM
    def used(rows: int, cols: int, mr: int, nr: int) -> float:
        return rows / (-(-rows // mr) * mr) * cols / (-(-cols // nr) * nr)

    def pixel_rows_used(pixels: int, channels: int) -> float:
        wide, narrow = pixel_row_panels(channels)
        return used(pixels, 1, PX_MR, 1) * channels / int(pixel_row_panel_start(wide + narrow, wide))
    # the transposed form scatters its tiles into the output, so it must win clearly
    fills = {FORM_DIRECT: used(mg, ohw, MR, NR), FORM_TRANSPOSED: used(ohw, mg, MR, NR) / 1.25}
    if ohw > IMPLICIT_NC:
        del fills[FORM_TRANSPOSED]
    if taps > 1 and K >= 64:
        fills[FORM_PIXEL_ROWS] = pixel_rows_used(ohw, mg) * (LINE_PIXEL_ROWS_WEIGHT if line else 1.15)
    elif taps == 1 and (strided_1x1 or (ohw <= POINTWISE_ROWS_MAX_PIXELS
                                        and mg * K > POINTWISE_ROWS_MIN_WEIGHTS)):
        fills[FORM_PIXEL_ROWS] = pixel_rows_used(ohw, mg) * 2
    elif (taps == 1 and PX_MR <= ohw <= POINTWISE_ROWS_MAX_PIXELS and mg * K > POINTWISE_ROWS_FILL_MIN_WEIGHTS
          and POINTWISE_ROWS_FILL_WEIGHT):
        fills[FORM_PIXEL_ROWS] = pixel_rows_used(ohw, mg) * POINTWISE_ROWS_FILL_WEIGHT
    if taps > 1 and plane_rows is not None and mg <= PLANES_MAX_CHANNELS and not line:
        ow, wq = plane_rows
        cols = used(1, ow, 1, NR) if ow >= NR else ow / wq
        fills[FORM_PLANES] = used(mg, 1, PLANES_ROWS, 1) * cols * 1.15  # (no gather: as the pixel-row form)
    return max(fills, key=lambda f: (fills[f], f == FORM_DIRECT))


def _as_4d(prog: EwProgram, shape4: tuple[int, ...]) -> EwProgram:
    """A 1-D convolution's program ([N, M, L]) re-expressed over [N, M, 1, L] (a row) or
    [N, M, L, 1] (a column, :func:`_column_1d`)."""
    if len(prog.shape) == 4:
        return prog
    column = shape4[3] == 1 and shape4[2] != 1
    def lift(v: View) -> View:
        unit = (0,)
        strides = v.strides[:3] + unit if column else v.strides[:2] + unit + v.strides[2:]
        return View(v.buffer, v.dtype, shape4, strides, v.offset)
    prog.inputs = [(lift(v), dt) for v, dt in prog.inputs]
    prog.outputs = [(r, lift(v)) for r, v in prog.outputs]
    prog.shape = tuple(shape4)
    return prog
