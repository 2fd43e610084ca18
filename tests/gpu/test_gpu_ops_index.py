"""Gather, Where, Cast and integer tensors on the GPU backends: small ONNX models compiled for opencl
(PoCL) in wave mode against reference.  Integer and bool tensors travel in the float arena as exact
float32 values: converted at copy-in, refused with an error naming the input when a value is not
exact (or is out of range for the Gather that reads it); what the GPU cannot do exactly is refused
naming node and op."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import check_wave as _check
from gpu_helpers import const as _const
from gpu_helpers import model as _model
from gpu_helpers import need_opencl as _opencl
from gpu_helpers import vi as _vi
from onnx import TensorProto, helper

import rammer
from rammer import plugins
from rammer.backends.gpu.compiler import unsupported
from rammer.errors import FeedError, UnsupportedOpError

#: Each case builds OpenCL programs on PoCL: seconds each with PoCL's cache cold (a fresh machine). Left out
#: of the quick subset.
pytestmark = pytest.mark.slow

F, I64, I32, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL


def _embedding(ids_shape, vocab=50, dim=12, axis=0, t=I64):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((vocab, dim) if axis == 0 else (dim, vocab)).astype(np.float32)
    out = list(ids_shape) + [dim] if axis == 0 else [dim] + list(ids_shape)
    return _model([helper.make_node("Gather", ["w", "ids"], ["e"], axis=axis), helper.make_node("Relu", ["e"], ["y"])],
                  [_vi("ids", list(ids_shape), t)], [_vi("y", out)], [_const("w", table)])


def test_embedding_lookup_of_int64_ids_with_negative_indices():
    ids = np.array([[0, 49, -1, 7], [-50, 3, 3, 25]], np.int64)  # -1 and -50 count from the end
    _check(_embedding(ids.shape), {"ids": ids}, kernels=["gather_rows"])


def test_gather_of_int32_ids_along_axis_1():
    ids = np.array([4, -2, 0, 49, 4], np.int32)
    _check(_embedding(ids.shape, axis=1, t=I32), {"ids": ids}, kernels=["gather_rows"])


def test_gather_of_computed_data_by_computed_indices_along_a_middle_axis():
    model = _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
                   [_vi("x", [2, 5, 3]), _vi("i", [2, 2], I64)], [_vi("y", [2, 2, 2, 3])])
    x = np.random.default_rng(1).standard_normal((2, 5, 3)).astype(np.float32)
    _check(model, {"x": x, "i": np.array([[4, -5], [2, -1]], np.int64)}, kernels=["gather_rows"])


@pytest.mark.parametrize("index, axis", [(2, 0), (-1, 1), (0, 2)])
def test_constant_scalar_gather_is_a_copy_view(index, axis):
    # vit's attention-head Gathers (q/k/v out of a stacked tensor) and its class-token Gather.
    model = _model([helper.make_node("Gather", ["x", "k"], ["y"], axis=axis)], [_vi("x", [3, 4, 5])],
                   [_vi("y", [d for a, d in enumerate([3, 4, 5]) if a != axis])], [_const("k", np.int64(index))])
    x = np.random.default_rng(2).standard_normal((3, 4, 5)).astype(np.float32)
    compiled = _check(model, {"x": x}, kernels=["copy_nd"])
    assert "gather_rows" not in compiled.executable.report["kernels"]


def test_constant_indices_in_no_strided_order_are_read_from_the_arena():
    model = _model([helper.make_node("Gather", ["x", "k"], ["y"], axis=0)], [_vi("x", [4, 3])], [_vi("y", [2, 2, 3])],
                   [_const("k", np.array([[2, 0], [-1, 2]], np.int64))])
    _check(model, {"x": np.arange(12, dtype=np.float32).reshape(4, 3)}, kernels=["gather_rows"])


def test_constant_indices_out_of_range_are_refused_naming_the_node():
    _opencl()
    model = _model([helper.make_node("Gather", ["x", "k"], ["y"], axis=0, name="bad_gather")], [_vi("x", [4, 3])],
                   [_vi("y", [2, 3])], [_const("k", np.array([1, 4], np.int64))])
    with pytest.raises(UnsupportedOpError, match="bad_gather"):
        rammer.compile(model, backend="opencl", mode="wave")


def test_feeds_out_of_range_or_not_exact_in_float32_are_refused_naming_the_input():
    _opencl()
    compiled = rammer.compile(_embedding((2, 3)), backend="opencl", mode="wave")
    ids = np.zeros((2, 3), np.int64)
    ids[1, 2] = 50
    with pytest.raises(FeedError, match=r"Gather node '.*' \(op Gather\): index 50 out of range \[-50, 50\) in "
                                        r"input 'ids' at \[1, 2\]"):
        compiled.run({"ids": ids})
    ids[1, 2] = -51
    with pytest.raises(FeedError, match="index -51 out of range"):
        compiled.run({"ids": ids})
    # Not read by a Gather: only exactness is checked (2**24 + 1 rounds in float32).
    model = _model([helper.make_node("Cast", ["n"], ["f"], to=F), helper.make_node("Relu", ["f"], ["y"])],
                   [_vi("n", [3], I64)], [_vi("y", [3])])
    compiled = rammer.compile(model, backend="opencl", mode="wave")
    exact = np.array([2 ** 24, -2 ** 24, 7], np.int64)
    np.testing.assert_array_equal(compiled.run({"n": exact})["y"], np.maximum(exact, 0).astype(np.float32))
    with pytest.raises(FeedError, match=r"input 'n' holds 16777217 at \[0\].*exact only up to 2\*\*24"):
        compiled.run({"n": np.array([2 ** 24 + 1, 0, 0], np.int64)})


def test_ids_reshaped_before_the_gather_are_range_checked_at_copy_in():
    nodes = [helper.make_node("Reshape", ["ids", "shape"], ["r"]),
             helper.make_node("Gather", ["w", "r"], ["y"], name="lookup")]
    model = _model(nodes, [_vi("ids", [6], I64)], [_vi("y", [2, 3, 4])],
                   [_const("shape", np.array([2, 3], np.int64)), _const("w", np.ones((10, 4), np.float32))])
    ids = np.array([0, 1, 2, 3, 4, -10], np.int64)
    _check(model, {"ids": ids}, kernels=["gather_rows"])
    ids[4] = 10
    with pytest.raises(FeedError, match=r"Gather node 'lookup' \(op Gather\): index 10 out of range \[-10, 10\) "
                                        r"in input 'ids' at \[4\]"):
        rammer.compile(model, backend="opencl", mode="wave").run({"ids": ids})


def test_computed_indices_out_of_range_make_their_rows_nan_never_other_memory():
    # A Slice keeps part of the input: only the kernel sees which values it gathers.  ONNX makes an
    # out-of-range index an error (reference raises); the kernel cannot, so the row is NaN.
    nodes = [helper.make_node("Slice", ["ids", "s0", "s1"], ["r"]), helper.make_node("Gather", ["w", "r"], ["y"])]
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    model = _model(nodes, [_vi("ids", [4], I64)], [_vi("y", [3, 4])],
                   [_const("s0", np.array([0], np.int64)), _const("s1", np.array([3], np.int64)), _const("w", table)])
    _check(model, {"ids": np.array([1, 2, 3, 99], np.int64)}, kernels=["gather_rows"])  # 99 is sliced away
    got = rammer.compile(model, backend="opencl", mode="wave").run({"ids": np.array([1, 10, -11, 0], np.int64)})["y"]
    assert np.isnan(got[1:]).all() and np.array_equal(got[0], table[1])
    with pytest.raises(rammer.errors.RammerError, match="out of range"):
        rammer.compile(model, backend="reference").run({"ids": np.array([1, 10, -11, 0], np.int64)})


def test_int64_mask_through_unsqueeze_and_cast_as_bert_has_it():
    # bert: attention_mask[b, s] -> Unsqueeze(1) -> Unsqueeze(2) -> Cast(float) -> (1 - m) * -10000 + scores
    axes1, axes2 = _const("a1", np.array([1], np.int64)), _const("a2", np.array([2], np.int64))
    nodes = [helper.make_node("Unsqueeze", ["mask", "a1"], ["m1"]), helper.make_node("Unsqueeze", ["m1", "a2"], ["m2"]),
             helper.make_node("Cast", ["m2"], ["mf"], to=F), helper.make_node("Sub", ["one", "mf"], ["inv"]),
             helper.make_node("Mul", ["inv", "big"], ["bias"]), helper.make_node("Add", ["scores", "bias"], ["y"])]
    model = _model(nodes, [_vi("mask", [2, 5], I64), _vi("scores", [2, 3, 5, 5])], [_vi("y", [2, 3, 5, 5])],
                   [axes1, axes2, _const("one", np.float32(1)), _const("big", np.float32(-10000))])
    mask = np.ones((2, 5), np.int64)
    mask[1, 3:] = 0
    scores = np.random.default_rng(3).standard_normal((2, 3, 5, 5)).astype(np.float32)
    _check(model, {"mask": mask, "scores": scores}, kernels=["copy_nd"])


@pytest.mark.parametrize("src, dst, values", [
    (B, F, np.array([True, False, True])), (I32, F, np.array([-3, 0, 9], np.int32)),
    (I64, I32, np.array([-3, 0, 2 ** 20], np.int64)), (F, B, np.array([0.0, -0.5, np.nan], np.float32)),
    (F, F, np.array([1.5, -2.0, 0.0], np.float32))])
def test_casts_that_keep_values_run(src, dst, values):
    # A cast to an integer type is checked through a Cast back to float (outputs are float32).
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=dst)]
    if dst != F:
        nodes.append(helper.make_node("Cast", ["c"], ["y"], to=F))
    else:
        nodes[0] = helper.make_node("Cast", ["x"], ["y"], to=dst)
    model = _model(nodes, [_vi("x", [3], src)], [_vi("y", [3])])
    # The elementwise fusion pass takes the casts (one fused kernel; integers in 64-bit registers).
    used = _check(model, {"x": values}).executable.report["kernels"]
    assert all(k.startswith("ew_") for k in used), used


def test_a_lone_cast_between_integer_types_is_a_copy():
    """Integer -> integer with nothing to fuse with (its input and output live in the arena) is
    Cast's own rKernel, a flat copy (the values are the same float32 numbers)."""
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=I32), helper.make_node("Unsqueeze", ["c", "ax"], ["u"]),
             helper.make_node("Cast", ["u"], ["y"], to=F)]
    model = _model(nodes, [_vi("x", [3], I64)], [_vi("y", [1, 3])], [_const("ax", np.array([0], np.int64))])
    _check(model, {"x": np.array([-3, 0, 2 ** 20], np.int64)})


def test_a_float_to_int_cast_truncates_as_numpy():
    """Float -> int64 / int32 truncates toward zero (a fused F2I), then back to float."""
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=I64), helper.make_node("Cast", ["x"], ["c32"], to=I32),
             helper.make_node("Cast", ["c"], ["y"], to=F), helper.make_node("Cast", ["c32"], ["y32"], to=F)]
    model = _model(nodes, [_vi("x", [5])], [_vi("y", [5]), _vi("y32", [5])])
    _check(model, {"x": np.array([-2.7, -0.5, 0.0, 1.9, 1000.5], np.float32)})


@pytest.mark.parametrize("src, dst, why", [(I64, TensorProto.UINT8, "wrap")])
def test_casts_that_would_change_values_are_refused_naming_the_node(src, dst, why):
    _opencl()
    model = _model([helper.make_node("Cast", ["x"], ["c"], to=dst, name="the_cast"),
                    helper.make_node("Cast", ["c"], ["y"], to=F)], [_vi("x", [3], src)], [_vi("y", [3])])
    with pytest.raises(UnsupportedOpError, match="the_cast"):
        rammer.compile(model, backend="opencl", mode="wave")
    be = plugins.get_backend("opencl")
    reasons = [text for _, text in unsupported(be.prepare_graph(rammer.load(model)).graph)]
    assert any("the_cast" in r and why in r for r in reasons), reasons


def test_integer_arithmetic_and_integer_outputs_run():
    _opencl()
    add = _model([helper.make_node("Add", ["a", "a"], ["s"], name="int_add"),
                  helper.make_node("Cast", ["s"], ["y"], to=F)],
                 [_vi("a", [3], I64)], [_vi("y", [3])])
    _check(add, {"a": np.array([-5, 0, 2 ** 22], np.int64)})  # integer programs (tests/gpu/test_gpu_ops_ints.py)
    out = _model([helper.make_node("Unsqueeze", ["a", "ax"], ["y"], name="int_out")], [_vi("a", [3], I64)],
                 [_vi("y", [1, 3], I64)], [_const("ax", np.array([0], np.int64))])
    # An integer graph output is read back from the float arena as int64 (exact below 2**24; larger
    # values raise, tests/gpu/test_gpu_ops_ints.py).
    _check(out, {"a": np.array([-5, 0, 2 ** 22], np.int64)})


def test_where_with_a_computed_condition_broadcasts():
    model = _model([helper.make_node("Where", ["c", "x", "z"], ["y"])],
                   [_vi("c", [1, 4], B), _vi("x", [3, 1]), _vi("z", [])], [_vi("y", [3, 4])])
    feeds = {"c": np.array([[True, False, False, True]]), "x": np.array([[1.0], [-2.0], [3.5]], np.float32),
             "z": np.array(-7.0, np.float32)}
    # A bool condition fed by the model fuses with float values (bools are 0.0/1.0 in the arena).
    used = _check(model, feeds).executable.report["kernels"]
    assert any(k.startswith("ew_") or k == "where_nd" for k in used), used


def test_where_with_a_condition_computed_on_the_gpu_and_integer_values():
    # cond from a Cast (float -> bool), values int64 (an input and a constant), the result cast to float.
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=B), helper.make_node("Where", ["c", "n", "k"], ["w"]),
             helper.make_node("Cast", ["w"], ["y"], to=F)]
    model = _model(nodes, [_vi("x", [2, 3]), _vi("n", [3], I64)], [_vi("y", [2, 3])],
                   [_const("k", np.array([[-1], [5]], np.int64))])
    feeds = {"x": np.array([[0, 1, 0], [2, 0, -1]], np.float32), "n": np.array([10, 20, 30], np.int64)}
    # one fused program: the cast to bool, an integer Where in 64-bit registers, the cast to float
    used = _check(model, feeds).executable.report["kernels"]
    assert all(k.startswith("ew_") for k in used), used


def test_where_with_a_constant_condition_runs_fused_and_broadcasts():
    # gpt2's causal mask: the constant bool condition becomes 0/1 floats inside the fused kernel.
    keep = np.tril(np.ones((4, 4), bool))
    model = _model([helper.make_node("Where", ["keep", "s", "low"], ["y"])], [_vi("s", [2, 1, 4, 4])],
                   [_vi("y", [2, 1, 4, 4])], [_const("keep", keep), _const("low", np.float32(-3.4e38))])
    s = np.random.default_rng(4).standard_normal((2, 1, 4, 4)).astype(np.float32)
    compiled = _check(model, {"s": s})
    assert not {"where_nd"} & set(compiled.executable.report["kernels"])


def test_new_rkernels_are_one_template_in_cuda_hip_and_opencl():
    from rammer.backends.gpu import kernels_index as kx
    from rammer.backends.gpu import kernels_nn as kn
    from rammer.codegen.dialects import DIALECTS
    from rammer.codegen.render import neutral, render_kernel

    kernels = (kx.gather_rows("g"), kx.where_nd("w"), kx.cast_bool("b"), kn.layernorm_rows("ln", 256, broadcast=True))
    for kernel in kernels:
        texts = {d: neutral(render_kernel(kernel, DIALECTS[d], mark=True)) for d in ("cuda", "hip", "opencl")}
        assert texts["cuda"] == texts["hip"] == texts["opencl"], kernel.name


def test_copy_views_are_shared_only_between_equal_copies():
    """A copy's strided views are derived once per kind of copy (op, attributes, input shapes and
    constant values), and two copies that differ in any of these get their own."""
    from onnx import TensorProto, helper

    from rammer.backends.gpu import lower_copy
    from rammer.frontend import load

    def model(starts_a, starts_b):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])
        ya = helper.make_tensor_value_info("ya", TensorProto.FLOAT, [2, 6])
        yb = helper.make_tensor_value_info("yb", TensorProto.FLOAT, [2, 6])
        inits = [helper.make_tensor(n, TensorProto.INT64, [1], v) for n, v in
                 (("sa", [starts_a]), ("ea", [starts_a + 2]), ("sb", [starts_b]), ("eb", [starts_b + 2]),
                  ("ax", [0]))]
        nodes = [helper.make_node("Slice", ["x", "sa", "ea", "ax"], ["ya"]),
                 helper.make_node("Slice", ["x", "sb", "eb", "ax"], ["yb"])]
        g = helper.make_graph(nodes, "g", [x], [ya, yb], inits)
        return load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())

    for a, b in ((0, 0), (0, 2)):
        graph = model(a, b)
        first, second = graph.nodes
        lower_copy._VIEW_MEMO.clear()
        va, vb = lower_copy._views(first, graph), lower_copy._views(second, graph)
        assert len(lower_copy._VIEW_MEMO) == (1 if a == b else 2)
        assert va == lower_copy._derive_views(first, graph) and vb == lower_copy._derive_views(second, graph)
        assert (va == vb) == (a == b) and vb[0].src_base == 6 * b
