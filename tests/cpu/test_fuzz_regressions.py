"""Regressions from differential fuzzing of the ``cpu`` backend against ``reference`` (issue 20).

Each class of wrong result or crash the fuzzer found gets a test over the whole class, not only
its minimized reproducer.  Every model runs twice on ``cpu``: a kernel that writes outside its
buffers shows up on the second run (the first one reads a zeroed arena).
"""

from __future__ import annotations

import itertools
from typing import Any

import numba
import numpy as np
import onnx
import pytest
from cpu_helpers import model, node, rand
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.cpu import lower_conv
from rammer.backends.cpu.kernels_conv import FORM_DIRECT, FORM_PIXEL_ROWS, FORM_TRANSPOSED


def check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-4,
          runs: int = 2, **options: Any) -> dict[str, Any]:
    """``cpu`` equals ``reference`` on ``feeds``, on every one of ``runs`` runs; returns the cpu report."""
    cpu = rammer.compile(m, backend="cpu", cache=False, **options)
    want = rammer.compile(m, backend="reference")(feeds)
    for run in range(runs):
        got = cpu(feeds)
        for k in want:
            assert got[k].dtype == want[k].dtype, (k, got[k].dtype, want[k].dtype)
            assert got[k].shape == want[k].shape, (k, got[k].shape, want[k].shape)
            np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"{k}, run {run}")
    return cpu.executable.report


# -- 1. convolutions: every stride / plane / kernel combination of every form -------------------

def _conv(x_shape: tuple, w_shape: tuple, **attrs: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = rand(*x_shape)
    consts = {"w": rand(*w_shape, seed=1), "b": rand(w_shape[0], seed=2)}
    return model([node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": x}, ["y"], consts), {"x": x}


def test_strided_pixel_row_conv_reproducer():
    """Conv x[1,8,7,4], W[8,8,3,3], strides 3: a task's pixel range came out inverted."""
    m, feeds = _conv((1, 8, 7, 4), (8, 8, 3, 3), strides=[3, 3])
    for veus in range(1, min(4, numba.config.NUMBA_NUM_THREADS) + 1):
        check(m, feeds, veus=veus, runs=3)


def _conv_cases() -> list[tuple]:
    """(H, W, k, stride, pads, dilation, groups) over planes 1..9, kernels 1..5, strides 1..4."""
    rng = np.random.default_rng(20)
    cases = []
    for k, s in itertools.product(range(1, 6), range(1, 5)):
        for _ in range(3):
            dil = int(rng.integers(1, 3)) if k > 1 else 1
            pads = [int(v) for v in rng.integers(0, k, 4)] if rng.random() < 0.6 else [0, 0, 0, 0]
            # a plane the (dilated) window fits in, padded
            span = (k - 1) * dil + 1
            h = int(rng.integers(max(1, span - pads[0] - pads[2]), 10))
            w = int(rng.integers(max(1, span - pads[1] - pads[3]), 10))
            groups = int(rng.choice([1, 1, 2]))
            cases.append((h, w, k, s, pads, dil, groups))
    return cases


@pytest.mark.parametrize("form", [None, FORM_DIRECT, FORM_TRANSPOSED, FORM_PIXEL_ROWS],
                         ids=["chosen", "direct", "transposed", "pixel-rows"])
def test_conv_strides_small_planes(monkeypatch, form):
    monkeypatch.setattr(lower_conv, "FORCE_FORM", form)
    for h, w, k, s, pads, dil, groups in _conv_cases():
        cin, cout = 8 * groups, 8 * groups
        m, feeds = _conv((1, cin, h, w), (cout, cin // groups, k, k), strides=[s, s], pads=pads,
                         dilations=[dil, dil], group=groups)
        try:
            check(m, feeds, veus=2)
        except AssertionError as e:
            raise AssertionError(f"H={h} W={w} k={k} stride={s} pads={pads} dilation={dil} groups={groups}") from e


# -- 2. 1x1 convolutions padded only at the end -------------------------------------------------

def test_end_padded_1x1_conv1d_reproducer():
    """Conv1D x[1,4,8], k=1, pads [0,3]: the end padding was read in place past the plane."""
    m, feeds = _conv((1, 4, 8), (4, 4, 1), pads=[0, 3])
    check(m, feeds)


@pytest.mark.slow
@pytest.mark.parametrize("form", [None, FORM_DIRECT, FORM_TRANSPOSED, FORM_PIXEL_ROWS],
                         ids=["chosen", "direct", "transposed", "pixel-rows"])
def test_end_padded_1x1_convs(monkeypatch, form):
    monkeypatch.setattr(lower_conv, "FORCE_FORM", form)
    # Every plane x stride x end padding, each with one of the channel counts in turn (all five
    # channel counts meet every plane and every padding): the whole product took 4 minutes of CI.
    channels = [(4, 4, 1), (8, 16, 1), (64, 64, 1), (8, 8, 8), (8, 16, 2)]
    geometries = itertools.product([(1, 1), (3, 5), (8, 8), (9, 2)], [1, 2, 3],
                                   [[0, 0, 2, 0], [0, 0, 0, 3], [0, 0, 1, 1], [1, 0, 0, 2]])
    for i, ((h, w), s, pads) in enumerate(geometries):
        cin, cout, groups = channels[i % len(channels)]
        m, feeds = _conv((1, cin, h, w), (cout, cin // groups, 1, 1), strides=[s, s], pads=pads, group=groups)
        try:
            check(m, feeds, veus=2)
        except AssertionError as e:
            raise AssertionError(f"H={h} W={w} stride={s} pads={pads} channels={cin}->{cout}/{groups}") from e
    for i, (length, s) in enumerate(itertools.product([1, 5, 8], [1, 2, 3])):
        pads = [[0, 3], [0, 1], [2, 1]][i % 3]
        m, feeds = _conv((2, 16, length), (16, 16, 1), strides=[s], pads=pads)
        check(m, feeds, veus=2)


# -- 3. MatMul with a 1-D operand (or any rank mix) and a fused epilogue ------------------------

def test_matmul_1d_right_operand_epilogue_reproducer():
    """Relu(MatMul(A[3,4,5], b[5])): the epilogue walked [3, 4] tiles where the GEMM wrote 3 x (4 x 1)."""
    feeds = {"a": rand(3, 4, 5), "b": rand(5, seed=1)}
    check(model([node("MatMul", ["a", "b"], ["m"]), node("Relu", ["m"], ["y"])], feeds, ["y"]), feeds)


def _matmul_shapes() -> list[tuple[tuple, tuple]]:
    """Operand shapes: 1-D on either side or both, batch ranks 0-3 with broadcasting."""
    M, K, N = 3, 5, 4
    batches = [(), (2,), (1,), (2, 3), (1, 3), (2, 1, 3)]
    out = [((K,), (K,))]
    for bt in batches:
        out += [(bt + (M, K), (K,)), ((K,), bt + (K, N))]
        for bt2 in batches:
            try:
                np.broadcast_shapes(bt, bt2)
            except ValueError:
                continue
            out.append((bt + (M, K), bt2 + (K, N)))
    return out


@pytest.mark.parametrize("epilogue", ["relu", "chain", "residual"])
def test_matmul_rank_mixes_with_epilogues(epilogue):
    for sa, sb in _matmul_shapes():
        feeds = {"a": rand(*sa), "b": rand(*sb, seed=1)}
        out_shape = np.matmul(feeds["a"], feeds["b"]).shape
        nodes = [node("MatMul", ["a", "b"], ["m"])]
        if epilogue == "relu":
            nodes.append(node("Relu", ["m"], ["y"]))
        elif epilogue == "chain":
            # a broadcast constant operand along the last axis, then two unary ops
            nodes += [node("Add", ["m", "c"], ["t0"]), node("Sigmoid", ["t0"], ["t1"]),
                      node("Mul", ["t1", "m"], ["y"])]
        else:
            feeds["r"] = rand(*out_shape, seed=2)
            nodes += [node("Add", ["m", "r"], ["t0"]), node("Tanh", ["t0"], ["y"])]
        consts = {"c": rand(*(out_shape[-1:] or (1,)), seed=3)}
        m = model(nodes, feeds, ["y"], consts if epilogue == "chain" else None)
        try:
            check(m, feeds, veus=2)
        except AssertionError as e:
            raise AssertionError(f"A{sa} @ B{sb} then {epilogue}") from e


# -- 4. broadcasting over more than 4 dims ----------------------------------------------------

def test_broadcast_above_4_dims_reproducer():
    """Add([2,3,4,2,3,4], [2,1,1,2,1,4]) collapses to 5 dims: a CompileError before."""
    feeds = {"a": rand(2, 3, 4, 2, 3, 4), "b": rand(2, 1, 1, 2, 1, 4, seed=1)}
    report = check(model([node("Add", ["a", "b"], ["y"])], feeds, ["y"]), feeds, veus=2)
    assert not report["fallbacks"]


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 4, 2, 3, 4), (2, 1, 1, 2, 1, 4)),
    ((2, 3, 4, 2, 3, 4), (1, 3, 1, 2, 1, 4)),
    ((3, 1, 4, 1, 5, 1, 2), (1, 2, 1, 3, 1, 2, 1)),
    ((2, 2, 2, 2, 2, 2, 2, 2), (2, 1, 2, 1, 2, 1, 2, 1)),
    ((5, 1, 3, 1, 70), (1, 4, 1, 6, 70)),
    ((1, 2, 1, 3, 1, 4), (2, 2, 3, 3, 4, 4)),
])
def test_broadcast_above_4_dims_fused(a_shape, b_shape):
    feeds = {"a": rand(*a_shape), "b": rand(*b_shape, seed=1)}
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    feeds["r"] = rand(*out_shape, seed=2)
    nodes = [node("Add", ["a", "b"], ["t0"]), node("Relu", ["t0"], ["t1"]), node("Mul", ["t1", "r"], ["t2"]),
             node("Greater", ["t2", "a"], ["t3"]), node("Where", ["t3", "t2", "b"], ["y"])]
    report = check(model(nodes, feeds, ["y", "t1"]), feeds, veus=2)
    assert not report["fallbacks"]


def test_transposed_6d_operand():
    """A strided (transposed) 6-D view in an elementwise group: its strides collapse to 6 dims."""
    feeds = {"a": rand(2, 3, 4, 2, 3, 4), "c": rand(4, 1, 3, 1, 1, 3, seed=1)}
    nodes = [node("Transpose", ["a"], ["t"], perm=[5, 3, 1, 0, 2, 4]), node("Add", ["t", "c"], ["y"])]
    check(model(nodes, feeds, ["y"]), feeds, veus=2)


# -- 5. subgraphs run as host steps that capture outer-scope tensors -------------------------

_F = TensorProto.FLOAT


def _vi(name: str, shape: list | None = None, dtype: int = _F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _branch(name: str, op: str, captured: str, shape: list) -> onnx.GraphProto:
    """``captured op 1`` over an outer-scope tensor."""
    one = numpy_helper.from_array(np.ones(shape, np.float32), f"{name}_one")
    return helper.make_graph([helper.make_node(op, [captured, f"{name}_one"], [f"{name}_out"])], name, [],
                             [_vi(f"{name}_out", shape)], [one])


def _graph_model(nodes: list, inputs: list, outputs: list, inits: dict | None = None) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _if(cond: str, out: str, captured: str, shape: list) -> onnx.NodeProto:
    return helper.make_node("If", [cond], [out], then_branch=_branch(f"{out}_then", "Add", captured, shape),
                            else_branch=_branch(f"{out}_else", "Sub", captured, shape))


def _run_both_branches(m: onnx.ModelProto, x_shape: list) -> None:
    for c in (True, False):
        feeds = {"x": rand(*x_shape), "c": np.array(c)}
        report = check(m, feeds)
        assert [f["op"] for f in report["fallbacks"]] and all(f["op"] in ("If", "Loop", "Scan")
                                                              for f in report["fallbacks"])


def test_if_capturing_computed_tensor_reproducer():
    """r = Relu(x); y = If(c) with branches r + 1 / r - 1: KeyError 'r' at run time before."""
    m = _graph_model([helper.make_node("Relu", ["x"], ["r"]), _if("c", "y", "r", [2, 3])],
                     [_vi("x", [2, 3]), _vi("c", [], TensorProto.BOOL)], [_vi("y", [2, 3])])
    _run_both_branches(m, [2, 3])


@pytest.mark.parametrize("variant", ["read-after", "fused-around", "graph-input", "initializer", "graph-output",
                                     "view", "two-captures"])
def test_if_capturing_outer_tensors(variant):
    shape = [2, 3]
    ins = [_vi("x", shape), _vi("c", [], TensorProto.BOOL)]
    inits = {}
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    outs = [_vi("y", shape)]
    if variant == "read-after":  # the If's output and the captured tensor meet again: was a cycle
        nodes += [_if("c", "t", "r", shape), helper.make_node("Add", ["t", "r"], ["y"])]
    elif variant == "fused-around":  # r's group continues past it; another group reads the If's output
        nodes += [helper.make_node("Sigmoid", ["r"], ["s"]), _if("c", "t", "r", shape),
                  helper.make_node("Mul", ["t", "s"], ["u"]), helper.make_node("Add", ["u", "r"], ["y"])]
    elif variant == "graph-input":
        nodes += [_if("c", "t", "x", shape), helper.make_node("Add", ["t", "r"], ["y"])]
    elif variant == "initializer":
        inits["w"] = rand(*shape, seed=5)
        nodes += [_if("c", "t", "w", shape), helper.make_node("Add", ["t", "r"], ["y"])]
    elif variant == "graph-output":
        nodes += [_if("c", "y", "r", shape)]
        outs.append(_vi("r", shape))
    elif variant == "view":  # a captured tensor that is a view (no buffer of its own)
        inits["s"] = np.array([3, 2], np.int64)
        nodes += [helper.make_node("Reshape", ["r", "s"], ["rv"]), _if("c", "t", "rv", [3, 2]),
                  helper.make_node("Relu", ["t"], ["y"])]
        outs = [_vi("y", [3, 2])]
    else:
        nodes += [helper.make_node("Tanh", ["x"], ["q"]), _if("c", "t1", "r", shape), _if("c", "t2", "q", shape),
                  helper.make_node("Add", ["t1", "t2"], ["y"])]
    _run_both_branches(_graph_model(nodes, ins, outs, inits), shape)


def test_nested_if_capturing_outer_tensor():
    """An If inside an If's branch reads a tensor of the outermost graph."""
    shape = [2, 3]
    inner = helper.make_node("If", ["c"], ["inner_out"], then_branch=_branch("in_then", "Mul", "r", shape),
                             else_branch=_branch("in_else", "Add", "r", shape))
    then = helper.make_graph([inner], "outer_then", [], [_vi("inner_out", shape)])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("If", ["c"], ["t"], then_branch=then,
                              else_branch=_branch("outer_else", "Sub", "r", shape)),
             helper.make_node("Add", ["t", "r"], ["y"])]
    m = _graph_model(nodes, [_vi("x", shape), _vi("c", [], TensorProto.BOOL)], [_vi("y", shape)])
    _run_both_branches(m, shape)


def test_loop_capturing_outer_tensor():
    """A Loop body adding an outer-scope tensor to its carried value."""
    shape = [2, 3]
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "r"], ["v_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in", shape)],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", shape)])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["x"], ["v0"]),
             helper.make_node("Loop", ["n", "c", "v0"], ["v"], body=body),
             helper.make_node("Mul", ["v", "r"], ["y"])]
    m = _graph_model(nodes, [_vi("x", shape), _vi("c", [], TensorProto.BOOL)], [_vi("y", shape)],
                     {"n": np.array(3, np.int64)})
    _run_both_branches(m, shape)


def test_loop_body_if_capturing_outer_tensor():
    """An If inside a Loop body reads a tensor two scopes out; the captured tensor also feeds a Concat
    (whose inputs may live inside its output's buffer)."""
    shape = [2, 3]
    inner = helper.make_node(
        "If", ["cond_in"], ["v_out"],
        then_branch=helper.make_graph([helper.make_node("Add", ["v_in", "r"], ["o1"])], "bt", [], [_vi("o1", shape)]),
        else_branch=helper.make_graph([helper.make_node("Sub", ["v_in", "r"], ["o2"])], "be", [], [_vi("o2", shape)]))
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), inner], "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in", shape)],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", shape)])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["x"], ["z"]),
             helper.make_node("Concat", ["r", "z"], ["cc"], axis=0),
             helper.make_node("Loop", ["n", "c", "x"], ["v"], body=body),
             helper.make_node("Concat", ["v", "v"], ["v2"], axis=0), helper.make_node("Mul", ["v2", "cc"], ["y"])]
    m = _graph_model(nodes, [_vi("x", shape), _vi("c", [], TensorProto.BOOL)], [_vi("y", [4, 3])],
                     {"n": np.array(2, np.int64)})
    _run_both_branches(m, shape)


def test_scan_capturing_outer_tensor():
    """A Scan body reading an outer-scope tensor next to its state and scanned slice."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["a"]), helper.make_node("Mul", ["a", "r"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y_t"])],
        "body", [_vi("s_in", [3]), _vi("x_t", [3])], [_vi("s_out", [3]), _vi("y_t", [3])])
    nodes = [helper.make_node("Sigmoid", ["x"], ["xs"]), helper.make_node("ReduceMean", ["x"], ["r0"], axes=[0],
                                                                           keepdims=0),
             helper.make_node("Relu", ["r0"], ["r"]),
             helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1),
             helper.make_node("Add", ["ys", "xs"], ["y"])]
    m = _graph_model(nodes, [_vi("x", [4, 3]), _vi("c", [], TensorProto.BOOL)], [_vi("y", [4, 3]), _vi("s", [3])],
                     {"s0": np.zeros(3, np.float32)})
    _run_both_branches(m, [4, 3])


# -- zero-size tensors ----------------------------------------------------------------------

@pytest.mark.parametrize("case", ["conv-batch-0", "maxpool-0-channels", "matmul-K-0-epilogue", "pad-empty",
                                  "reduce-empty-axis", "concat-empty-piece", "add-empty"])
def test_zero_size_tensors(case):
    """A node with only empty outputs computes nothing (a Conv over a batch of 0 divided by zero
    at compile time, a MaxPool over 0 channels stepped a range by 0); empty inputs of non-empty
    outputs still give the right values."""
    consts: dict[str, np.ndarray] = {}
    if case == "conv-batch-0":
        feeds, consts = {"a": rand(0, 3, 5, 5)}, {"w": rand(4, 3, 3, 3, seed=1)}
        nodes = [node("Conv", ["a", "w"], ["t"]), node("Relu", ["t"], ["y"])]
    elif case == "maxpool-0-channels":
        feeds, nodes = {"a": rand(1, 0, 4, 4)}, [node("MaxPool", ["a"], ["y"], kernel_shape=[2, 2])]
    elif case == "matmul-K-0-epilogue":
        feeds, consts = {"a": rand(2, 3, 0), "b": rand(0, 4, seed=1)}, {"c": rand(4, seed=2)}
        nodes = [node("MatMul", ["a", "b"], ["m"]), node("Add", ["m", "c"], ["y"])]
    elif case == "pad-empty":
        feeds, consts = {"a": rand(2, 0)}, {"p": np.array([0, 1, 0, 1], np.int64)}
        nodes = [node("Pad", ["a", "p"], ["y"])]
    elif case == "reduce-empty-axis":
        feeds, nodes = {"a": rand(2, 0, 3)}, [node("ReduceMax", ["a"], ["y"], axes=[1], keepdims=1)]
    elif case == "concat-empty-piece":
        feeds = {"a": rand(2, 0), "b": rand(2, 3, seed=1)}
        nodes = [node("Concat", ["a", "b"], ["t"], axis=1), node("Relu", ["t"], ["y"])]
    else:
        feeds, nodes = {"a": rand(2, 0, 3), "b": rand(3, seed=1)}, [node("Add", ["a", "b"], ["y"])]
    check(model(nodes, feeds, ["y"], consts), feeds, veus=2)


# -- mutants: huge strides over one output pixel, Softmax over a rank-0 tensor ---------------

@pytest.mark.parametrize("case", ["maxpool-1d", "maxpool-2d-h", "maxpool-2d-w", "avgpool", "conv", "conv-1d",
                                  "depthwise", "dilation"])
def test_huge_stride_over_one_output_pixel(case):
    """A stride of 2**33 along an axis with one output pixel takes no step, but the phase planes
    were split that many ways: a ScheduleError (scratch beyond a vEU) where reference runs it."""
    big = 2 ** 33
    consts: dict[str, np.ndarray] = {}
    if case == "maxpool-1d":
        feeds, nd = {"x": rand(4, 5, 1)}, node("MaxPool", ["x"], ["y"], kernel_shape=[1], strides=[big])
    elif case == "maxpool-2d-h":
        feeds = {"x": rand(4, 1, 2, 3)}
        nd = node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[0, 1, 0, 1], strides=[big, 2])
    elif case == "maxpool-2d-w":
        feeds, nd = {"x": rand(2, 1, 3, 1)}, node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1], strides=[2, big])
    elif case == "avgpool":
        feeds = {"x": rand(2, 3, 4, 4)}
        nd = node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], strides=[big, big], pads=[1, 0, 0, 1],
                  count_include_pad=1)
    elif case in ("conv", "depthwise"):
        groups = 8 if case == "depthwise" else 1
        feeds, consts = {"x": rand(1, 8, 5, 6)}, {"w": rand(8, 8 // groups, 3, 3, seed=1)}
        nd = node("Conv", ["x", "w"], ["y"], strides=[big, 2], group=groups)
    elif case == "conv-1d":
        feeds, consts = {"x": rand(1, 16, 5)}, {"w": rand(8, 16, 3, seed=1)}
        nd = node("Conv", ["x", "w"], ["y"], strides=[big])
    else:  # a dilation over a kernel of one tap takes no step either
        feeds, consts = {"x": rand(1, 8, 5, 6)}, {"w": rand(8, 8, 1, 3, seed=1)}
        nd = node("Conv", ["x", "w"], ["y"], dilations=[big, 2])
    check(model([nd, node("Relu", ["y"], ["z"])], feeds, ["z"], consts), feeds, veus=2)


def test_softmax_of_rank_0_tensor_is_refused_naming_the_node():
    """Shape inference lets a rank-0 Softmax through; the lowering indexed its axis past the shape
    (an IndexError); now a ShapeError naming the node and tensor, as reference raises at run time."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                           helper.make_node("Softmax", ["r"], ["y"], name="sm")], "g", [_vi("x", [])], [_vi("y", [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(rammer.errors.ShapeError, match=r"'sm'.*rank-0 input 'r'"):
        rammer.compile(m, backend="cpu", cache=False)


def test_fusion_groups_that_would_feed_each_other_are_split():
    """Fuzz graphs:1045344: a 1-D MatMul's epilogue pulled in Mul(in1, in1), whose output an
    elementwise group also reads while that group feeds the MatMul: the groups formed a cycle and
    the cpu backend refused the model ("cycle among CPU ops")."""
    import numpy as _np
    import onnx as _onnx
    from onnx import TensorProto as _TP
    from onnx import helper as _h

    import rammer as _rammer

    w12 = _h.make_tensor("w12", _TP.FLOAT, [2], [-0.228, -0.295])
    half = _h.make_tensor("half", _TP.FLOAT, [], [0.5])
    nodes = [
        _h.make_node("Mul", ["in1", "in1"], ["t2"], name="mul"), _h.make_node("Abs", ["in4"], ["t5"], name="abs1"),
        _h.make_node("Add", ["t5", "half"], ["t8"], name="add1"),
        _h.make_node("Div", ["t2", "t8"], ["t10"], name="div"),
        _h.make_node("MatMul", ["w12", "t5"], ["t13"], name="mm"), _h.make_node("Abs", ["t13"], ["t15"], name="abs2"),
        _h.make_node("Add", ["t15", "half"], ["t18"], name="add2"), _h.make_node("Tanh", ["t2"], ["t20"], name="tanh"),
        _h.make_node("Pow", ["t18", "t20"], ["t22"], name="pow"),
        _h.make_node("Softmax", ["t18"], ["t25"], name="softmax", axis=0)]
    g = _h.make_graph(nodes, "cycle", [_h.make_tensor_value_info("in1", _TP.FLOAT, [6]),
                                       _h.make_tensor_value_info("in4", _TP.FLOAT, [2, 6])],
                      [_h.make_tensor_value_info(n, _TP.FLOAT, [s]) if n != "t10" else
                       _h.make_tensor_value_info(n, _TP.FLOAT, [2, 6])
                       for n, s in (("t10", 6), ("t22", 6), ("t25", 6))],
                      initializer=[w12, half])
    model = _h.make_model(g, opset_imports=[_h.make_opsetid("", 17)])
    model.ir_version = 8
    _onnx.checker.check_model(model, full_check=True)
    rng = _np.random.default_rng(0)
    feeds = {"in1": rng.standard_normal(6).astype(_np.float32), "in4": rng.standard_normal((2, 6)).astype(_np.float32)}
    got = _rammer.compile(model, backend="cpu").run(feeds)
    want = _rammer.compile(model, backend="reference").run(feeds)
    for k in want:
        _np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)


def test_an_op_cycle_after_fusion_compiles_without_fusion(caplog):
    """Fuzz graphs:110258: two MatMuls batched on a shared input, an epilogue group and a host If made
    a cycle among the lowered ops; the backend now lowers such a graph again without fusion."""
    import logging

    import numpy as _np

    import rammer as _rammer
    from rammer.fuzzing.campaign import build_case

    data, feeds, _ = build_case("graphs", 110258)
    with caplog.at_level(logging.WARNING, logger="rammer"):
        got = _rammer.compile(data, backend="cpu").run(feeds)
    want = _rammer.compile(data, backend="reference").run(feeds)
    for k in want:
        _np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("case", [
    # (x shape, w shape, attributes): the depthwise tap loop of tiny planes (the reproducer,
    # mutants:26000924), the direct sweep, the phase planes, channels-last, implicit GEMM, Winograd
    ((2, 16, 3, 5), (32, 1, 6, 6), dict(auto_pad="SAME_UPPER", group=16, strides=[3, 3])),
    ((1, 4, 12, 12), (4, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=4)),
    ((1, 4, 16, 16), (4, 1, 5, 5), dict(pads=[2, 2, 2, 2], group=4, strides=[2, 2], dilations=[1, 2])),
    ((1, 8, 5, 5), (8, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=8)),
    ((1, 6, 9, 9), (8, 6, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 16, 20, 20), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
])
def test_nonfinite_conv_weights_give_the_nan_of_padding(case, bad):
    """A NaN or infinite weight times a padding zero is NaN.  The kernels skip padded taps (and
    Winograd mixes taps), so such a Conv is left to the host, which computes it as specified."""
    x_shape, w_shape, attrs = case
    x = rand(*x_shape)
    w = rand(*w_shape, seed=1)
    w.reshape(-1)[w.size // 2 - 1] = bad
    w[0, 0, 0, 0] = bad  # a corner tap: it lands on padding at the first output pixel
    m = model([node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": x}, ["y"],
              {"w": w, "b": rand(w_shape[0], seed=2)})
    want = rammer.compile(m, backend="reference")({"x": x})["y"]
    assert np.isnan(want).any()
    cpu = rammer.compile(m, backend="cpu", cache=False)
    got = cpu({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
