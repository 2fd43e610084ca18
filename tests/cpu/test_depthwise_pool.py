"""Depthwise convolution, pooling and Concat written in place, on the cpu backend against the reference.

Depthwise convs with square 3x3 or 5x5 windows at stride 1 or 2 are swept
straight from the input plane (backends/cpu/ukernel_window.py); the others, and
pooling, split a padded plane into stride-phase planes and sweep them flat
(backends/cpu/kernels_window.py).  These cases cover the geometry both paths
have to get right: kernel sizes, strides, asymmetric
pads, dilations, channel multipliers, batches and fused epilogues.  Concat
inputs may be planned inside the Concat output (the producer writes its
slice directly); the last cases check that aliasing with other consumers,
graph outputs and nested Concats.
"""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand


def _dw_model(c: int, mult: int, hw: tuple[int, int], k: int, stride: tuple[int, int], pads: list[int],
              dil: tuple[int, int], n: int = 1, epilogue: bool = False, bias: bool = True):
    x = rand(n, c, *hw)
    consts = {"w": rand(c * mult, 1, k, k, seed=1)}
    ins = ["x", "w"]
    if bias:
        consts["b"] = rand(c * mult, seed=2)
        ins.append("b")
    nodes = [node("Conv", ins, ["c"], kernel_shape=[k, k], strides=list(stride), pads=pads, dilations=list(dil),
                  group=c)]
    out = "c"
    if epilogue:
        consts["s"] = rand(1, c * mult, 1, 1, seed=3)
        nodes += [node("Relu", ["c"], ["r"]), node("Mul", ["r", "s"], ["y"])]
        out = "y"
    return model(nodes, {"x": x}, [out], consts), {"x": x}


@pytest.mark.parametrize("k", [3, 5, 7])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_kernel_sizes_and_strides(k, stride):
    m, feeds = _dw_model(6, 1, (13, 16), k, (stride, stride), [k // 2] * 4, (1, 1))
    report = compare(m, feeds)
    assert report["ops_by_family"].get("conv.depthwise") == 1, report["ops_by_family"]


@pytest.mark.parametrize("case", [
    dict(k=3, stride=(1, 1), pads=[0, 0, 0, 0], dil=(1, 1)),          # valid: input read in place
    dict(k=3, stride=(2, 1), pads=[1, 0, 2, 1], dil=(1, 1)),          # asymmetric pads, mixed strides
    dict(k=5, stride=(1, 2), pads=[2, 1, 0, 2], dil=(1, 1)),
    dict(k=3, stride=(1, 1), pads=[2, 2, 2, 2], dil=(2, 2)),          # dilated
    dict(k=3, stride=(2, 2), pads=[2, 1, 2, 1], dil=(2, 1)),          # dilation with stride 2
    dict(k=5, stride=(3, 3), pads=[1, 1, 1, 1], dil=(1, 1)),          # stride 3: three phases
    dict(k=7, stride=(1, 1), pads=[3, 3, 3, 3], dil=(1, 1), hw=(5, 4)),  # kernel larger than the plane
    dict(k=1, stride=(2, 2), pads=[0, 0, 0, 0], dil=(1, 1)),
    dict(k=5, stride=(1, 1), pads=[2, 1, 2, 3], dil=(1, 1), hw=(9, 21)),  # row sweep: a partial column vector
    dict(k=3, stride=(1, 1), pads=[1, 1, 1, 1], dil=(1, 1), hw=(17, 40)),  # row sweep: 17 rows, 3 vectors
    # direct sweeps over planes wide enough for strips inside the plane; TF-style pads at the end only
    dict(k=3, stride=(2, 2), pads=[0, 0, 1, 1], dil=(1, 1), hw=(20, 70)),
    dict(k=5, stride=(2, 2), pads=[2, 1, 2, 2], dil=(1, 1), hw=(19, 81)),
    dict(k=5, stride=(1, 1), pads=[0, 2, 1, 0], dil=(1, 1), hw=(14, 45)),
])
def test_depthwise_geometry(case):
    hw = case.pop("hw", (11, 9))
    m, feeds = _dw_model(4, 1, hw, case["k"], case["stride"], case["pads"], case["dil"])
    compare(m, feeds)


@pytest.mark.parametrize("mult,n", [(2, 1), (3, 2), (1, 3)])
def test_depthwise_channel_multiplier_and_batch(mult, n):
    m, feeds = _dw_model(5, mult, (9, 10), 3, (2, 2), [1, 1, 1, 1], (1, 1), n=n)
    compare(m, feeds)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_fused_epilogue(stride):
    m, feeds = _dw_model(8, 1, (16, 16), 5, (stride, stride), [2, 2, 2, 2], (1, 1), n=2, epilogue=True)
    report = compare(m, feeds)
    assert report["ops_by_family"] == {"conv.depthwise": 1}, report["ops_by_family"]


def _dw_activation_model(act: str, mult: int, k: int, stride: int, hw: tuple[int, int], bias: bool = True,
                         also_read: bool = False, nan: bool = False):
    """Conv (depthwise) -> Relu / Clip with the given bounds [-> Mul]; ``also_read``: the conv's own output
    is a graph output too (the kernel may then not clamp it)."""
    c = 6
    x = rand(2, c, *hw)
    if nan:
        x[0, 1, 1, 1] = np.nan
        x[1, 4, 0, 0] = np.nan
    consts = {"w": rand(c * mult, 1, k, k, seed=1)}
    ins = ["x", "w"]
    if bias:
        consts["b"] = rand(c * mult, seed=2)
        ins.append("b")
    nodes = [node("Conv", ins, ["c"], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=c)]
    if act == "relu":
        nodes.append(node("Relu", ["c"], ["a"]))
    elif act == "hswish":
        consts.update(three=np.array(3.0, np.float32), zero=np.array(0.0, np.float32), six=np.array(6.0, np.float32))
        nodes += [node("Add", ["c", "three"], ["a3"]), node("Clip", ["a3", "zero", "six"], ["g"]),
                  node("Mul", ["g", "c"], ["p"]), node("Div", ["p", "six"], ["a"])]
    elif act == "silu":
        nodes += [node("Sigmoid", ["c"], ["sg"]), node("Mul", ["c", "sg"], ["a"])]
    else:
        lo, hi = {"relu6": (0.0, 6.0), "crossed": (0.5, -0.5), "max-only": (None, 0.7)}[act]
        names = ["c", "", ""]
        for i, (name, v) in enumerate((("lo", lo), ("hi", hi)), 1):
            if v is not None:
                consts[name] = np.array(v, np.float32)
                names[i] = name
        nodes.append(node("Clip", names[:3] if names[2] else names[:2], ["a"]))
    consts["s"] = rand(1, c * mult, 1, 1, seed=3)
    nodes.append(node("Mul", ["a", "s"], ["y"]))
    return model(nodes, {"x": x}, ["y", "c"] if also_read else ["y"], consts), {"x": x}


@pytest.mark.parametrize("act", ["relu", "relu6", "crossed", "max-only", "hswish", "silu"])
@pytest.mark.parametrize("k,stride,hw,mult", [(3, 1, (13, 20), 1), (3, 2, (12, 11), 1), (5, 1, (9, 9), 2),
                                              (3, 1, (2, 2), 1), (3, 1, (2, 2), 2), (3, 2, (18, 75), 1),
                                              (5, 2, (11, 80), 1)])
def test_depthwise_bias_and_activation_in_the_sweep(act, k, stride, hw, mult):
    """The planar kernel starts its sweeps at the bias and clamps before storing (a ReLU, ReLU6,
    bounds that cross, a Clip with only a max; a HardSwish or a SiLU after the store), NaN inputs staying
    NaN: direct sweeps (planes with strips at the edges only, and wide ones), channel multiplier,
    channel blocks (small planes) and the tiny-plane loop (2x2 with a multiplier); the Mul after
    them still runs as the epilogue."""
    m, feeds = _dw_activation_model(act, mult, k, stride, hw, nan=True)
    report = compare(m, feeds)
    assert report["ops_by_family"] == {"conv.depthwise": 1}, report["ops_by_family"]


@pytest.mark.parametrize("bias,also_read", [(False, False), (True, True)])
def test_depthwise_activation_without_bias_or_with_its_input_read(bias, also_read):
    m, feeds = _dw_activation_model("relu6", 1, 3, 1, (10, 18), bias=bias, also_read=also_read)
    compare(m, feeds)


@pytest.mark.parametrize("channel_blocks", [False, True])
@pytest.mark.parametrize("c,hw,stride,veus", [(150, (4, 4), 1, 1), (150, (4, 4), 1, 2), (70, (3, 5), 2, 2),
                                              (8, (2, 2), 1, 1)])
def test_depthwise_small_planes_both_layouts(monkeypatch, channel_blocks, c, hw, stride, veus):
    # channels in the lanes (ukernel_dwcb: blocks of WIDTH channels, the rest plane by plane) or plane by plane
    from rammer.backends.cpu import lower_common

    monkeypatch.setattr(lower_common, "DWCONV_CBLOCK_MAX_PIXELS", 1000 if channel_blocks else 0)
    m, feeds = _dw_model(c, 1, hw, 3, (stride, stride), [1, 1, 1, 1], (1, 1), n=2, epilogue=True)
    report = compare(m, feeds, veus=veus)
    assert report["ops_by_family"] == {"conv.depthwise": 1}, report["ops_by_family"]


def test_depthwise_1d():
    x = rand(2, 6, 20)
    consts = {"w": rand(6, 1, 5, seed=1)}
    m = model([node("Conv", ["x", "w"], ["y"], kernel_shape=[5], strides=[2], pads=[2, 1], group=6)],
              {"x": x}, ["y"], consts)
    compare(m, {"x": x})


POOLS = [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 0], dilations=[2, 1])),
    ("MaxPool", dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=1, pads=[1, 0, 1, 0])),
    ("AveragePool", dict(kernel_shape=[1, 1], strides=[2, 2])),
    ("AveragePool", dict(kernel_shape=[7, 7], strides=[1, 1], pads=[3, 3, 3, 3])),
]


@pytest.mark.parametrize("op,attrs", POOLS)
def test_pooling(op, attrs):
    x = rand(2, 3, 11, 12)
    x[0, 0, 3, 4] = np.nan  # max pooling propagates NaN
    x[1, 2, 0, 0] = -np.inf
    report = compare(model([node(op, ["x"], **attrs)], {"x": x}, ["y"], opset=19), {"x": x})
    assert report["ops_by_family"] == {"pool": 1}, report["ops_by_family"]


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[2, 1], pads=[0, 1, 2, 0]),
    dict(kernel_shape=[1, 3], strides=[1, 2], pads=[0, 1, 0, 1]),
])
@pytest.mark.parametrize("veus", [1, 2])
def test_strided_max_pooling_on_wide_planes(attrs, veus):
    """Output rows of 8 pixels and more: square windows at stride 2 as direct sweeps
    (ukernel_window), the others as a row maximum then a column maximum
    (kernels_window._max_separable); pads, ceil mode, NaN and -inf included."""
    x = rand(2, 5, 23, 37)
    x[0, 0, 3, 4] = np.nan
    x[1, 2, 0, 0] = -np.inf
    x[1, 4, 22, 36] = np.nan
    x[0, 3, 10:13, :] = -np.inf
    report = compare(model([node("MaxPool", ["x"], **attrs)], {"x": x}, ["y"], opset=19), {"x": x}, veus=veus)
    assert report["ops_by_family"] == {"pool": 1}, report["ops_by_family"]


@pytest.mark.parametrize("op,pads", [("dw", [1, 1, 1, 1]), ("dw", [0, 2, 1, 0]), ("avg", [1, 0, 0, 1]),
                                     ("conv", [1, 1, 1, 1]), ("conv", [2, 0, 0, 2])])
def test_large_stride_two_planes_fill_only_their_borders(op, pads):
    """Phase planes of 1024+ elements split by column pairs fill only rows and columns outside the
    input (kernels_window._phase_planes, border mode); junk left inside would show in the output.
    (The depthwise and average-pool cases now take direct sweeps: the same geometry, checked.)"""
    c = 3
    x = rand(1, c, 70, 75)
    if op == "dw":
        consts = {"w": rand(c, 1, 3, 3, seed=1)}
        n = node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=pads, group=c)
    elif op == "conv":
        consts = {"w": rand(8, c, 3, 3, seed=1)}
        n = node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=pads)
    else:
        consts = {}
        n = node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=pads, count_include_pad=1)
    compare(model([n], {"x": x}, ["y"], consts), {"x": x}, veus=2)


STACKED_POOLS = [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[2, 1, 2, 0], dilations=[2, 1])),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[1, 1])),
    ("AveragePool", dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 0, 1, 2], count_include_pad=1)),
]


@pytest.mark.parametrize("veus", [1, 2])
@pytest.mark.parametrize("op,attrs", STACKED_POOLS)
def test_stride_one_pooling_stacks_planes(op, attrs, veus):
    # 80 small planes: stride-1 pooling sweeps dozens of them stacked at once, with a
    # partial last stack; a plane's rows must neither leak into its neighbours nor move.
    x = rand(2, 40, 9, 7) - 0.5
    x[1, 17, 4, 3] = np.nan
    compare(model([node(op, ["x"], **attrs)], {"x": x}, ["y"], opset=19), {"x": x}, veus=veus)


def test_pooling_1d():
    x = rand(2, 3, 17)
    compare(model([node("MaxPool", ["x"], kernel_shape=[3], strides=[2], pads=[1, 1])], {"x": x}, ["y"]), {"x": x})
    compare(model([node("AveragePool", ["x"], kernel_shape=[4], strides=[3], pads=[1, 2])], {"x": x}, ["y"]),
            {"x": x})


@pytest.mark.parametrize("veus", [1, 2])
@pytest.mark.parametrize("op,attrs", [
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),  # stacked planes
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[1, 1], strides=[2, 2])),  # the subsampling path
])
def test_pooling_runs_its_fused_epilogue(op, attrs, veus):
    # NASNet's pooled branches: pool, Add of another tensor, ReLU, in the pooling kernel
    x = rand(2, 40, 9, 7) - 0.5
    x[1, 3, 2, 2] = np.nan
    out_hw = (9, 7) if attrs["strides"] == [1, 1] else (5, 4)
    z = rand(2, 40, *out_hw, seed=5) - 0.5
    nodes = [node(op, ["x"], ["p"], **attrs), node("Add", ["p", "z"], ["a"]), node("Relu", ["a"], ["y"])]
    report = compare(model(nodes, {"x": x, "z": z}, ["y"], opset=19), {"x": x, "z": z}, veus=veus)
    assert report["ops_by_family"] == {"pool": 1}, report["ops_by_family"]
    # the pooled value is read elsewhere too: the kernel stores it and the epilogue's result
    nodes.append(node("Sigmoid", ["p"], ["s"]))
    report = compare(model(nodes, {"x": x, "z": z}, ["y", "s"], opset=19), {"x": x, "z": z}, veus=veus)
    assert report["ops_by_family"]["pool"] == 1, report["ops_by_family"]


def test_pooling_1d_with_epilogue():
    x = rand(2, 3, 17)
    nodes = [node("AveragePool", ["x"], ["p"], kernel_shape=[4], strides=[3], pads=[1, 2]), node("Relu", ["p"], ["y"])]
    report = compare(model(nodes, {"x": x}, ["y"]), {"x": x})
    assert report["ops_by_family"] == {"pool": 1}, report["ops_by_family"]


def _concat_ops(report):
    return report["ops_by_family"].get("copy.concat", 0)


def test_concat_inputs_written_in_place():
    """Branches of a cell write their slices of the Concat output; nothing is copied."""
    x = rand(1, 4, 6, 6)
    consts = {"w": rand(4, 1, 3, 3, seed=1), "s": rand(1, 4, 1, 1, seed=2)}
    nodes = [node("Conv", ["x", "w"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=4),
             node("MaxPool", ["x"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("Relu", ["x"], ["r"]), node("Mul", ["r", "s"], ["c"]),
             node("Concat", ["a", "b", "c"], ["cat"], axis=1), node("Sigmoid", ["cat"], ["y"])]
    m = model(nodes, {"x": x}, ["y"], consts)
    compare(m, {"x": x})
    import rammer
    from rammer.backends.cpu.compiler import compile_program

    lowered = compile_program(rammer.load(m)).lowered
    concat = [op for op in lowered.ops if op.family == "copy.concat"]
    assert len(concat) == 1 and len(concat[0].extra["aliases"]) == 3 and concat[0].nbytes == 0


def test_concat_input_also_read_by_another_op_and_graph_output():
    x = rand(1, 3, 5, 5)
    nodes = [node("Relu", ["x"], ["a"]), node("Sigmoid", ["x"], ["b"]),
             node("Concat", ["a", "b", "a", "x"], ["cat"], axis=1),   # a twice, x is a graph input
             node("Tanh", ["a"], ["t"]), node("Add", ["cat", "cat"], ["y"])]
    compare(model(nodes, {"x": x}, ["y", "t", "a", "b"]), {"x": x})


def test_concat_output_is_a_graph_output_and_nested_concats():
    x = rand(1, 2, 4, 4)
    nodes = [node("Relu", ["x"], ["a"]), node("Neg", ["x"], ["b"]), node("Exp", ["x"], ["c"]),
             node("Concat", ["a", "b"], ["ab"], axis=1), node("Concat", ["c", "ab", "b"], ["y"], axis=1),
             node("Abs", ["ab"], ["z"])]
    compare(model(nodes, {"x": x}, ["y", "z", "ab"]), {"x": x})


def test_concat_batched_and_inner_axis_fall_back_to_copies():
    x = rand(2, 3, 4, 4)
    nodes = [node("Relu", ["x"], ["a"]), node("Neg", ["x"], ["b"]),
             node("Concat", ["a", "b"], ["c1"], axis=1), node("Concat", ["a", "b"], ["c2"], axis=3),
             node("Concat", ["a", "b"], ["c0"], axis=0)]
    compare(model(nodes, {"x": x}, ["c1", "c2", "c0"]), {"x": x})


def test_concat_in_place_with_memory_reuse_in_a_chain():
    """Long chains reuse arena memory; the in-place groups must not overlap live buffers."""
    x = rand(1, 4, 8, 8)
    nodes, prev = [], "x"
    for k in range(6):
        nodes += [node("Relu", [prev], [f"r{k}"]), node("Neg", [prev], [f"n{k}"]),
                  node("AveragePool", [f"r{k}"], [f"p{k}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  node("Concat", [f"p{k}", f"n{k}"], [f"c{k}"], axis=1),
                  node("Conv", [f"c{k}", "w"], [f"o{k}"], kernel_shape=[1, 1])]
        prev = f"o{k}"
    compare(model(nodes, {"x": x}, [prev], {"w": rand(4, 8, 1, 1, seed=3) * 0.5}), {"x": x})
