"""Integer arithmetic, CumSum, GatherElements and extreme-valued reductions on the GPU backends
(issue 40, item 3): each on opencl (PoCL) against reference over a small grid.  Integer tensors live
in the float arena as exact float32 values; integer programs compute in 64-bit registers."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import check_wave, const, model, vi
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.backends.gpu.compiler import unsupported

F, I64, I32, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL


def _refusals(m) -> list[str]:
    be = plugins.get_backend("opencl", compile_only=True)
    return [why for _, why in unsupported(be.prepare_graph(rammer.load(m)).graph)]


def _to_float(name: str, out: str):
    return helper.make_node("Cast", [name], [out], to=F)


# -- integer arithmetic: position ids from a mask, as roberta/mpnet/opt compute them ------------

@pytest.mark.parametrize("itype", [I64, I32])
def test_integer_arithmetic_and_comparisons_match_reference(itype):
    dt = np.int64 if itype == I64 else np.int32
    nodes = [
        helper.make_node("Add", ["a", "b"], ["add"]),
        helper.make_node("Sub", ["a", "b"], ["sub"]),
        helper.make_node("Mul", ["a", "b"], ["mul"]),
        helper.make_node("Div", ["a", "b"], ["div"]),       # truncated toward zero, negative operands too
        helper.make_node("Mod", ["a", "b"], ["mod"]),       # the divisor's sign
        helper.make_node("Mul", ["a", "k"], ["scaled"]),    # a broadcast integer constant
        helper.make_node("Equal", ["a", "b"], ["eq"]),
        helper.make_node("Not", ["eq"], ["ne"]),
        helper.make_node("Greater", ["a", "k"], ["gt"]),
        helper.make_node("And", ["ne", "gt"], ["both"]),
        helper.make_node("Where", ["both", "a", "b"], ["sel"]),
        helper.make_node("Neg", ["a"], ["neg"]),
    ]
    outs = ["add", "sub", "mul", "div", "mod", "scaled", "sel", "neg"]
    bools = ["eq", "ne", "gt", "both"]
    nodes += [_to_float(o, f"y_{o}") for o in outs + bools]
    m = model(nodes, [vi("a", [3, 5], itype), vi("b", [3, 5], itype)], [vi(f"y_{o}", [3, 5]) for o in outs + bools],
              [const("k", np.array([2, -3, 0, 4, 1], dt))])
    assert _refusals(m) == []
    rng = np.random.default_rng(0)
    a = rng.integers(-50, 50, (3, 5)).astype(dt)
    b = rng.integers(-7, 8, (3, 5)).astype(dt)
    b[b == 0] = 3
    b[0, :2] = a[0, :2]  # some equal pairs
    check_wave(m, {"a": a, "b": b})


def test_position_ids_from_a_mask_cumsum_match_reference():
    """``cumsum(mask != pad) * (mask != pad) + pad``: the integer chain of roberta's position ids."""
    nodes = [
        helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
        helper.make_node("Not", ["is_pad"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["keep_i"], to=I32),
        helper.make_node("CumSum", ["keep_i", "axis"], ["cs"]),
        helper.make_node("Mul", ["cs", "keep_i"], ["masked"]),
        helper.make_node("Cast", ["masked"], ["masked64"], to=I64),
        helper.make_node("Add", ["masked64", "pad"], ["pos"]),
        helper.make_node("Gather", ["table", "pos"], ["y"], axis=0),
    ]
    m = model(nodes, [vi("ids", [2, 9], I64)], [vi("y", [2, 9, 4])],
              [const("pad", np.array(1, np.int64)), const("axis", np.array(1, np.int64)),
               const("table", np.random.default_rng(1).standard_normal((12, 4)).astype(np.float32))])
    ids = np.array([[5, 7, 2, 9, 1, 1, 1, 1, 1], [3, 1, 4, 1, 5, 9, 2, 6, 5]], np.int64)
    check_wave(m, {"ids": ids}, kernels=["cumsum_i", "gather_rows"])


def test_an_integer_result_past_float32s_exact_range_is_nan_not_rounded():
    """An int64 tensor written to the arena (here before a Reshape) holds float32 values: one
    beyond 2**24 is stored as NaN.  Inside one fused program (``Mul`` then ``Cast``) it never is."""
    nodes = [helper.make_node("Mul", ["a", "a"], ["sq"]), helper.make_node("Reshape", ["sq", "shape"], ["r"]),
             _to_float("r", "y"), helper.make_node("Mul", ["a", "a"], ["sq2"]), _to_float("sq2", "y2")]
    m = model(nodes, [vi("a", [4], I64)], [vi("y", [4]), vi("y2", [4])], [const("shape", np.array([4], np.int64))])
    compiled = rammer.compile(m, backend="opencl", mode="wave") if plugins.get_backend(
        "opencl").availability().ok else pytest.skip("needs an OpenCL device (PoCL here)")
    got = compiled.run({"a": np.array([3, -4096, 4097, 5000], np.int64)})
    # 4096**2 = 2**24 is exact; 4097**2 is not float32-exact, 5000**2 neither: NaN, never a rounded integer
    assert got["y"][:2].tolist() == [9.0, 16777216.0] and np.isnan(got["y"][2:]).all()
    # fused with its Cast, the product is exact in the 64-bit register and rounds once, as numpy's cast
    assert got["y2"].tolist() == np.array([9, 4096 ** 2, 4097 ** 2, 5000 ** 2]).astype(np.float32).tolist()


# -- CumSum ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F, I64])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_every_variant_matches_reference(dtype, axis):
    shape = (3, 4, 5)
    cases = []
    for exclusive in (0, 1):
        for reverse in (0, 1):
            name = f"c{exclusive}{reverse}"
            cases.append(helper.make_node("CumSum", ["x", "ax"], [name], exclusive=exclusive, reverse=reverse))
            if dtype != F:
                cases.append(_to_float(name, f"y_{name}"))
    outs = [n.output[0] for n in cases if n.op_type == ("Cast" if dtype != F else "CumSum")]
    m = model(cases, [vi("x", list(shape), dtype)], [vi(o, list(shape)) for o in outs],
              [const("ax", np.array(axis, np.int64))])
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32) if dtype == F else rng.integers(-9, 10, shape).astype(np.int64)
    check_wave(m, {"x": x}, kernels=["cumsum_f" if dtype == F else "cumsum_i"], rtol=1e-5, atol=1e-5)


def test_cumsum_with_a_computed_axis_is_refused_by_name():
    nodes = [helper.make_node("CumSum", ["x", "ax"], ["y"])]
    m = model(nodes, [vi("x", [3, 4]), vi("ax", [], I64)], [vi("y", [3, 4])])
    why = _refusals(m)
    assert len(why) == 1 and "CumSum" in why[0] and "axis is computed at run time" in why[0]


# -- GatherElements ------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_elements_matches_reference(axis):
    x_shape, i_shape = (3, 4, 5), [3, 4, 5]
    ax = axis % 3
    i_shape[ax] = 6  # the indices may be longer than the data along the axis
    size = x_shape[ax]
    rng = np.random.default_rng(3)
    ind = rng.integers(-size, size, i_shape).astype(np.int64)  # negative indices count from the end
    nodes = [helper.make_node("GatherElements", ["x", "ind"], ["y"], axis=axis),
             helper.make_node("GatherElements", ["x", "cind"], ["yc"], axis=axis)]
    m = model(nodes, [vi("x", list(x_shape)), vi("ind", i_shape, I64)], [vi("y", i_shape), vi("yc", i_shape)],
              [const("cind", np.flip(ind, ax).copy())])
    check_wave(m, {"x": rng.standard_normal(x_shape).astype(np.float32), "ind": ind}, kernels=["gather_elements"])


def test_gather_elements_of_integer_data_computed_indices():
    """Integer data (exact float32 in the arena) gathered by indices an integer program computed."""
    nodes = [helper.make_node("Sub", ["i", "one"], ["j"]),
             helper.make_node("GatherElements", ["d", "j"], ["g"], axis=1),
             _to_float("g", "y")]
    m = model(nodes, [vi("d", [2, 6], I64), vi("i", [2, 3], I64)], [vi("y", [2, 3])],
              [const("one", np.array(1, np.int64))])
    check_wave(m, {"d": np.arange(12, dtype=np.int64).reshape(2, 6) * 7 - 30,
                   "i": np.array([[1, 6, 3], [0, -2, 5]], np.int64)}, kernels=["gather_elements"])


# -- reductions over values near -FLT_MAX: a fully masked attention row -----------------------------

def test_softmax_and_max_reductions_of_a_fully_masked_row_match_reference():
    """``score + finfo(float32).min`` lies below -3e38: a row of only such values must still be the
    uniform softmax the reference gives (gpt2-ci gave NaN when the max started at -3e38)."""
    low = np.finfo(np.float32).min
    nodes = [helper.make_node("Add", ["x", "mask"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Softmax", ["s"], ["p0"], axis=0),
             helper.make_node("ReduceMax", ["s"], ["mx"], axes=[1], keepdims=0),
             helper.make_node("Neg", ["s"], ["neg"]),
             helper.make_node("ReduceMin", ["neg"], ["mn"], axes=[1], keepdims=0),
             helper.make_node("ReduceLogSumExp", ["s"], ["lse"], axes=[1], keepdims=0),
             helper.make_node("Clip", ["s"], ["clipped"])]
    m = model(nodes, [vi("x", [4, 300])], [vi("p", [4, 300]), vi("p0", [4, 300]), vi("mx", [4]), vi("mn", [4]),
                                           vi("lse", [4]), vi("clipped", [4, 300])],
              opset=13)
    mask = np.zeros((4, 300), np.float32)
    mask[0] = low  # row 0 fully masked
    mask[2, 7:] = low
    mask = const("mask", mask)
    m.graph.initializer.append(mask)
    x = np.random.default_rng(4).standard_normal((4, 300)).astype(np.float32)
    check_wave(m, {"x": x}, rtol=1e-4, atol=1e-6)


# -- linear quantization --------------------------------------------------------------------------------

U8, I8 = TensorProto.UINT8, TensorProto.INT8


@pytest.mark.parametrize("qtype", [U8, I8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_and_dequantize_linear_match_reference(qtype, per_axis):
    """Per tensor and per axis (axis 1), round half to even (ties built into x), saturation at both ends."""
    shape = (2, 3, 8)
    dt = np.uint8 if qtype == U8 else np.int8
    scale = np.array([0.05, 0.1, 0.5], np.float32) if per_axis else np.array(0.1, np.float32)
    zp = np.array([128, 120, 3], dt) if per_axis and qtype == U8 else (
        np.array([0, -5, 7], dt) if per_axis else np.array(100 if qtype == U8 else -3, dt))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("QuantizeLinear", ["x", "s"], ["q_nozp"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
             helper.make_node("DequantizeLinear", ["q_nozp", "s"], ["y_nozp"], axis=1),
             _to_float("q", "q_f")]
    if qtype == I8:  # QuantizeLinear without a zero point gives uint8; keep int8 with one of 0
        nodes[1] = helper.make_node("QuantizeLinear", ["x", "s", "z0"], ["q_nozp"], axis=1)
    m = model(nodes, [vi("x", list(shape))], [vi("y", list(shape)), vi("y_nozp", list(shape)), vi("q_f", list(shape))],
              [const("s", scale), const("z", zp), const("z0", np.zeros(scale.shape, dt))])
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 20).astype(np.float32)
    x[0, :, :4] = np.array([0.5, 1.5, 2.5, -2.5], np.float32)[None, :] * scale.reshape(-1, 1)  # ties
    x[1, 0, 0], x[1, 0, 1] = 1e6, -1e6  # saturate
    check_wave(m, {"x": x}, kernels=["quantize", "dequantize"], rtol=1e-6, atol=1e-6)


def test_dynamic_quantize_and_matmul_integer_match_reference():
    """ORT's dynamic quantization of a MatMul: DynamicQuantizeLinear of the activation, MatMulInteger
    with a per-column weight zero point over a batch, Cast, and the scales' product."""
    k = 300  # long enough that the dot products leave float32's exact range for a float accumulation
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["acc_f"], to=F),
             helper.make_node("Mul", ["xs", "ws"], ["sc"]),
             helper.make_node("Mul", ["acc_f", "sc"], ["y"]),
             _to_float("xq", "xq_f"), _to_float("xz", "xz_f"), helper.make_node("Identity", ["xs"], ["xs_out"])]
    rng = np.random.default_rng(6)
    w = rng.integers(0, 256, (k, 5)).astype(np.uint8)
    m = model(nodes, [vi("x", [2, 4, k])], [vi("y", [2, 4, 5]), vi("xq_f", [2, 4, k]), vi("xz_f", []),
                                             vi("xs_out", [])],
              [const("w", w), const("wz", rng.integers(100, 150, 5).astype(np.uint8)),
               const("ws", np.array(0.02, np.float32))])
    x = (rng.standard_normal((2, 4, k)) * 3 + 1).astype(np.float32)
    check_wave(m, {"x": x}, kernels=["dynamic_quantize", "matmul_integer"], rtol=1e-5, atol=1e-5)


def test_blocked_quantization_is_refused_by_name():
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2)]
    m = model(nodes, [vi("q", [2, 4], U8)], [vi("y", [2, 4])], [const("s", np.ones((2, 2), np.float32))], opset=21)
    why = _refusals(m)
    assert len(why) == 1 and "DequantizeLinear" in why[0] and "blocked quantization" in why[0]


# -- ops of older CNN exports (ci/real_models.py: alexnet, vgg19, inception-v1, squeezenet, zfnet512) -----

def test_lrn_constant_of_shape_and_inference_dropout_match_reference():
    """LRN over channels (odd and even window), ConstantOfShape (float and integer fills), and an
    opset-7 Dropout whose mask output nobody reads (a copy)."""
    nodes = [helper.make_node("LRN", ["x"], ["l5"], size=5, alpha=1e-3, beta=0.75, bias=2.0),
             helper.make_node("LRN", ["x"], ["l4"], size=4),
             helper.make_node("Dropout", ["x"], ["d", "unused_mask"], ratio=0.3),
             helper.make_node("ConstantOfShape", ["shape"], ["c"],
                              value=helper.make_tensor("v", F, [1], [2.5])),
             helper.make_node("ConstantOfShape", ["shape"], ["ci"],
                              value=helper.make_tensor("vi", I64, [1], [7])),
             helper.make_node("Add", ["d", "c"], ["dc"]),
             _to_float("ci", "ci_f")]
    shape = [2, 7, 3, 4]
    m = model(nodes, [vi("x", shape)], [vi("l5", shape), vi("l4", shape), vi("dc", shape), vi("ci_f", shape)],
              [const("shape", np.array(shape, np.int64))], opset=9)
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32) * 3
    check_wave(m, {"x": x}, kernels=["lrn"], rtol=1e-5, atol=1e-6)


def test_constant_of_shape_left_unfolded_runs_as_a_fill():
    """The frontend folds a ConstantOfShape; imported without folding (as a model past the fold size
    limit keeps it), the fill kernel writes it."""
    from rammer.frontend.onnx_import import import_model

    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], value=helper.make_tensor("v", F, [1], [2.5])),
             helper.make_node("ConstantOfShape", ["shape"], ["ci"], value=helper.make_tensor("vi", I64, [1], [-7])),
             helper.make_node("Add", ["x", "c"], ["y"]), _to_float("ci", "ci_f")]
    m = model(nodes, [vi("x", [3, 300])], [vi("y", [3, 300]), vi("ci_f", [3, 300])],
              [const("shape", np.array([3, 300], np.int64))])
    graph = import_model(m, fold=False)
    assert any(n.op_type == "ConstantOfShape" for n in graph.nodes)
    if not plugins.get_backend("opencl").availability().ok:
        pytest.skip("needs an OpenCL device (PoCL here)")
    compiled = rammer.compile(graph, backend="opencl", mode="wave")
    assert "fill" in compiled.executable.report["kernels"]
    x = np.random.default_rng(8).standard_normal((3, 300)).astype(np.float32)
    got = compiled.run({"x": x})
    np.testing.assert_allclose(got["y"], x + np.float32(2.5), rtol=1e-6)
    assert (got["ci_f"] == -7.0).all()


def test_dropout_whose_mask_is_read_is_refused_by_name():
    nodes = [helper.make_node("Dropout", ["x"], ["d", "mask"], ratio=0.3), _to_float("mask", "m")]
    m = model(nodes, [vi("x", [4])], [vi("d", [4]), vi("m", [4])], opset=9)
    why = _refusals(m)
    assert why and "Dropout" in why[0] and "mask output is read" in why[0]


# -- integer and bool graph outputs ----------------------------------------------------------------

def _int_outputs_model():
    """An int64 output computed by integer arithmetic, one passed through a Reshape, and a bool one."""
    nodes = [helper.make_node("Add", ["a", "k"], ["sum"]),
             helper.make_node("Reshape", ["a", "shape"], ["flat"]),
             helper.make_node("Greater", ["a", "k"], ["gt"])]
    return model(nodes, [vi("a", [2, 3], I64)], [vi("sum", [2, 3], I64), vi("flat", [6], I64), vi("gt", [2, 3], B)],
                 [const("k", np.array([1, -2, 3], np.int64)), const("shape", np.array([6], np.int64))])


def test_integer_and_bool_graph_outputs_come_back_in_their_dtype():
    assert _refusals(_int_outputs_model()) == []
    a = np.array([[5, -7, 0], [4096, 3, -1]], np.int64)
    check_wave(_int_outputs_model(), {"a": a})


def test_integer_and_bool_graph_outputs_on_the_cuda_emulator(monkeypatch):
    from emu_helpers import install_fake_cupy

    install_fake_cupy(monkeypatch)
    a = np.array([[5, -7, 0], [4096, 3, -1]], np.int64)
    got = rammer.compile(_int_outputs_model(), backend="cuda").run({"a": a})
    want = rammer.compile(_int_outputs_model(), backend="reference").run({"a": a})
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k])


def test_an_integer_output_beyond_float32s_exact_range_raises_naming_it():
    """``a * a`` past 2**24 is NaN in the arena: the run names the output instead of returning a wrong int."""
    from rammer.errors import OpExecutionError

    m = model([helper.make_node("Mul", ["a", "a"], ["sq"])], [vi("a", [3], I64)], [vi("sq", [3], I64)])
    if not plugins.get_backend("opencl").availability().ok:
        pytest.skip("needs an OpenCL device (PoCL here)")
    compiled = rammer.compile(m, backend="opencl", mode="wave")
    assert compiled.run({"a": np.array([3, -4096, 7], np.int64)})["sq"].tolist() == [9, 4096 ** 2, 49]
    with pytest.raises(OpExecutionError, match=r"output 'sq' \(int64\) at \[1\]"):
        compiled.run({"a": np.array([3, 4097, 7], np.int64)})
