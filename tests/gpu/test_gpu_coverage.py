"""Ops and attribute variants the GPU backends once refused and the cpu backend runs (issue 40, item
3): each class on opencl (PoCL) against reference over a small grid of shapes and attributes.  Many
cases share one model (one output each), so one PoCL build covers a grid."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import check_wave, const, model, need_opencl, vi
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.backends.gpu.compiler import unsupported

F = TensorProto.FLOAT


def _refusals(m) -> list[str]:
    be = plugins.get_backend("opencl", compile_only=True)
    return [why for _, why in unsupported(be.prepare_graph(rammer.load(m)).graph)]


def _grid_model(x_shape, nodes_and_shapes, inits=(), opset=17):
    """One input ``x``; each ``(node, out_shape)`` writes its own graph output."""
    nodes = [n for n, _ in nodes_and_shapes]
    outs = [vi(n.output[0], list(s)) for n, s in nodes_and_shapes]
    return model(nodes, [vi("x", list(x_shape))], outs, inits, opset)


def _feeds(shape, seed=0):
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


# -- reductions: every kind, any axes ------------------------------------------------------------

_KINDS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceSumSquare", "ReduceLogSumExp"]


@pytest.mark.parametrize("axes, keep", [([1, 3], 0), ([0, 2], 1), ([0, 1, 3], 0), ([2], 1), (None, 0)])
def test_reductions_of_every_kind_over_any_axes_match_reference(axes, keep):
    x_shape = (2, 3, 4, 5)
    red = set(range(4)) if axes is None else set(axes)
    y = tuple(1 if i in red else d for i, d in enumerate(x_shape)) if keep else tuple(
        d for i, d in enumerate(x_shape) if i not in red)
    cases = []
    for op in _KINDS:
        attrs = {"keepdims": keep} if axes is None else {"keepdims": keep, "axes": axes}
        cases.append((helper.make_node(op, ["x"], [f"y_{op}"], **attrs), y))
    # opset 13: ReduceSum's axes are an input; the others keep the attribute
    inits = []
    if axes is not None:
        inits = [helper.make_tensor("ax", TensorProto.INT64, [len(axes)], axes)]
        cases[0] = (helper.make_node("ReduceSum", ["x", "ax"], ["y_ReduceSum"], keepdims=keep), y)
    m = _grid_model(x_shape, cases, inits, opset=13)
    feeds = {"x": (np.random.default_rng(1).standard_normal(x_shape) * 0.5 + 0.8).astype(np.float32)}
    check_wave(m, feeds)


def test_reduce_logsum_of_positive_values():
    node = helper.make_node("ReduceLogSum", ["x"], ["y"], axes=[0, 2], keepdims=0)
    m = _grid_model((3, 4, 5), [(node, (4,))], opset=13)
    check_wave(m, {"x": np.random.default_rng(2).uniform(0.1, 2.0, (3, 4, 5)).astype(np.float32)},
               kernels=["reduce_logsum_any"])


# -- Softmax and LogSoftmax on any axis -----------------------------------------------------------

@pytest.mark.parametrize("opset", [13, 11])
def test_softmax_and_logsoftmax_on_every_axis_match_reference(opset):
    x_shape = (3, 4, 300)  # a row longer than the block: the rows kernel strides over it
    cases = []
    for op in ("Softmax", "LogSoftmax"):
        for axis in (0, 1, 2, -2):
            cases.append((helper.make_node(op, ["x"], [f"y_{op}_{str(axis).replace('-', 'm')}"], axis=axis),
                          x_shape))
    feeds = {"x": (np.random.default_rng(3).standard_normal(x_shape) * 4).astype(np.float32)}
    kernels = ["softmax_strided", "logsoftmax_strided", "softmax_rows", "logsoftmax_rows"] if opset >= 13 else \
        ["softmax_rows", "logsoftmax_rows"]
    check_wave(_grid_model(x_shape, cases, opset=opset), feeds, kernels=kernels)


# -- a standalone BatchNormalization: a per-channel affine, fused --------------------------------

@pytest.mark.parametrize("x_shape", [(2, 3), (2, 3, 5), (1, 4, 3, 3)])
def test_standalone_batchnorm_matches_reference(x_shape):
    rng = np.random.default_rng(4)
    c = x_shape[1]
    inits = [const(n, rng.standard_normal(c).astype(np.float32)) for n in ("s", "b", "mu")]
    inits.append(const("var", rng.uniform(0.5, 1.5, c).astype(np.float32)))
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["y"], epsilon=1e-5)
    m = _grid_model(x_shape, [(node, x_shape)], inits)
    assert not _refusals(m)
    check_wave(m, _feeds(x_shape))


# -- comparisons feeding Where; If on a run-time condition -----------------------------------------

def test_a_comparison_alone_writes_a_bool_the_where_reads():
    nodes = [helper.make_node("Less", ["x", "zero"], ["neg"]),
             helper.make_node("Where", ["neg", "x", "other"], ["y"])]
    m = model(nodes, [vi("x", [3, 4])], [vi("y", [2, 3, 4])],
              [const("zero", np.float32(0.0)), const("other", np.arange(24, dtype=np.float32).reshape(2, 3, 4))])
    assert not _refusals(m)
    check_wave(m, _feeds((3, 4)))


def _if_model():
    branches = []
    for label, op in (("then", "Add"), ("else", "Mul")):
        body = helper.make_graph(
            [helper.make_node(op, ["x", "k"], [f"{label}_a"]), helper.make_node("Tanh", [f"{label}_a"], [f"{label}_out"])],
            label, [], [vi(f"{label}_out", [2, 3])], [const("k", np.float32(1.5))])
        branches.append(body)
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=branches[0], else_branch=branches[1], name="the_if")]
    return model(nodes, [vi("x", [2, 3]), vi("cond", [], TensorProto.BOOL)], [vi("y", [2, 3])])


@pytest.mark.parametrize("cond", [True, False])
def test_if_on_a_run_time_condition_computes_both_branches_and_selects(cond):
    m = _if_model()
    assert not _refusals(m)
    feeds = {**_feeds((2, 3)), "cond": np.array(cond)}
    check_wave(m, feeds)


# -- MatMul with partly broadcast batch axes -------------------------------------------------------

@pytest.mark.parametrize("a_shape, b_shape", [((2, 1, 3, 4), (1, 3, 4, 5)), ((3, 1, 2, 4), (2, 4, 17)),
                                              ((2, 3, 1, 5, 4), (3, 2, 4, 2))])
def test_matmul_with_partly_broadcast_batches_matches_reference(a_shape, b_shape):
    out = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])) + (a_shape[-2], b_shape[-1])
    rng = np.random.default_rng(5)
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", list(a_shape))], [vi("y", list(out))],
              [const("w", rng.standard_normal(b_shape).astype(np.float32))])
    assert not _refusals(m)
    check_wave(m, _feeds(a_shape), kernels=["gemm16"])


# -- AveragePool counting the padding ----------------------------------------------------------------

@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]},
    {"kernel_shape": [2, 3], "pads": [1, 0, 0, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 1]},
    {"kernel_shape": [3], "pads": [2, 1], "strides": [1]},
])
def test_average_pool_with_count_include_pad_matches_reference(attrs):
    need_opencl()
    x_shape = (1, 2, 7, 6) if len(attrs["kernel_shape"]) == 2 else (2, 3, 7)
    node = helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=1, **attrs)
    nsp, k, st = len(attrs["kernel_shape"]), attrs["kernel_shape"], attrs["strides"]
    pads = attrs.get("pads", [0] * 2 * nsp)
    rnd = np.ceil if attrs.get("ceil_mode") else np.floor
    spatial = [int(np.ceil(d / s)) if "auto_pad" in attrs else int(rnd((d + pads[i] + pads[i + nsp] - k[i]) / s)) + 1
               for i, (d, s) in enumerate(zip(x_shape[2:], st))]
    y_shape = x_shape[:2] + tuple(spatial)
    m = _grid_model(x_shape, [(node, y_shape)])
    check_wave(m, _feeds(x_shape), kernels=["pool_avg_pad"])


# -- InstanceNormalization and GroupNormalization (core pass NORM_AS_LAYERNORM) ---------------------

@pytest.mark.parametrize("op, x_shape, groups, scale_size", [
    ("InstanceNormalization", (2, 3, 5), None, 3),
    ("InstanceNormalization", (1, 4, 3, 7), None, 4),
    ("GroupNormalization", (2, 6, 4, 3), 3, 6),    # opset 21: per-channel scale
    ("GroupNormalization", (1, 8, 5), 2, 8),
])
def test_instance_and_group_norm_match_reference(op, x_shape, groups, scale_size):
    rng = np.random.default_rng(6)
    inits = [const("s", rng.standard_normal(scale_size).astype(np.float32)),
             const("b", rng.standard_normal(scale_size).astype(np.float32))]
    attrs = {"epsilon": 1e-3} if groups is None else {"epsilon": 1e-3, "num_groups": groups}
    node = helper.make_node(op, ["x", "s", "b"], ["y"], **attrs)
    opset = 21 if groups is not None else 17
    m = _grid_model(x_shape, [(node, x_shape)], inits, opset=opset)
    assert not _refusals(m)
    feeds = {"x": (np.random.default_rng(7).standard_normal(x_shape) * 2 + 5).astype(np.float32)}
    check_wave(m, feeds, kernels=["layernorm_rows"])


# -- Expand: a broadcast copy ---------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape, shape, y_shape", [((3, 1), (2, 3, 4), (2, 3, 4)), ((1, 4), (3, 1), (3, 4)),
                                                     ((2, 1, 5), (1, 3, 1), (2, 3, 5))])
def test_expand_matches_reference(x_shape, shape, y_shape):
    node = helper.make_node("Expand", ["x", "shape"], ["y"])
    m = _grid_model(x_shape, [(node, y_shape)], [const("shape", np.array(shape, np.int64))])
    assert not _refusals(m)
    check_wave(m, _feeds(x_shape), kernels=["copy_nd"])


# -- ConvTranspose ------------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape, c_out, attrs", [
    ((1, 3, 5, 4), 2, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 4, 3, 3), 4, {"kernel_shape": [2, 2], "strides": [2, 2], "group": 2}),
    ((1, 2, 4, 5), 3, {"kernel_shape": [3, 2], "strides": [1, 2], "dilations": [2, 1], "pads": [0, 1, 2, 0],
                       "output_padding": [0, 1]}),
    ((1, 3, 7), 2, {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}),
    # 5 output channels a group: a thread's block of 4 channels runs past the group's end
    ((1, 6, 3, 4), 10, {"kernel_shape": [3, 3], "strides": [2, 2], "group": 2, "pads": [1, 0, 0, 1]}),
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose_matches_reference(x_shape, c_out, attrs, bias):
    nsp = len(x_shape) - 2
    g = attrs.get("group", 1)
    k, s = attrs["kernel_shape"], attrs["strides"]
    d, p = attrs.get("dilations", [1] * nsp), attrs.get("pads", [0] * 2 * nsp)
    op_ = attrs.get("output_padding", [0] * nsp)
    spatial = [s[i] * (x_shape[2 + i] - 1) + op_[i] + (k[i] - 1) * d[i] + 1 - p[i] - p[i + nsp] for i in range(nsp)]
    y_shape = (x_shape[0], c_out) + tuple(spatial)
    rng = np.random.default_rng(8)
    inits = [const("w", rng.standard_normal((x_shape[1], c_out // g, *k)).astype(np.float32))]
    ins = ["x", "w"]
    if bias:
        inits.append(const("b", rng.standard_normal(c_out).astype(np.float32)))
        ins.append("b")
    node = helper.make_node("ConvTranspose", ins, ["y"], **attrs)
    m = _grid_model(x_shape, [(node, y_shape)], inits)
    assert not _refusals(m)
    # (groups of fewer than 4 output channels: one a thread, the _c1 variant)
    check_wave(m, _feeds(x_shape), kernels=["conv_transpose" if c_out // g >= 4 else "conv_transpose_c1"])


# -- Pad: edge, reflect and wrap (a strided view per box around the input) --------------------------

def test_edge_reflect_and_wrap_pads_match_reference():
    x_shape = (2, 3, 5, 6)
    cases = [  # (mode, pads, axes or None): every output in one model, one compile
        ("reflect", [0, 0, 2, 3, 0, 0, 1, 2], None),
        ("edge", [0, 1, 3, 0, 1, 0, 0, 4], None),
        ("wrap", [0, 0, 2, 2, 0, 0, 3, 1], None),
        ("reflect", [2, 4], [3]),                     # opset 18's axes: the last axis only (an STFT's pad)
        ("edge", [1, -1, 2, 0], [2, 3]),              # a negative pad crops that side
    ]
    nodes, inits = [], []
    for i, (mode, pads, axes) in enumerate(cases):
        inits.append(const(f"p{i}", np.array(pads, np.int64)))
        ins = ["x", f"p{i}", ""]
        if axes is not None:
            inits.append(const(f"a{i}", np.array(axes, np.int64)))
            ins.append(f"a{i}")
        full = [0] * 8
        for j, a in enumerate(axes if axes is not None else range(4)):
            full[a], full[a + 4] = pads[j], pads[j + len(pads) // 2]
        y = [d + full[a] + full[a + 4] for a, d in enumerate(x_shape)]
        nodes.append((helper.make_node("Pad", ins, [f"y{i}"], mode=mode), y))
    m = _grid_model(x_shape, nodes, inits, opset=19)
    assert not _refusals(m)
    check_wave(m, _feeds(x_shape), kernels=["copy_nd"])
