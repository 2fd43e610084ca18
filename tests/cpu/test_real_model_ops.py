"""Ops and shapes from real published models (ci/real_models.py) that the cpu backend
failed to compile or left to the reference: each compared with the reference backend."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, conv_model, model, node, rand

from rammer.backends.cpu import lower_conv


def test_conv_on_a_detector_sized_plane_compiles():
    # PP-OCRv4's first conv at 640 px: one group's padded input (3 x 642 x 642 floats) is more
    # than a vEU's scratch; each rTask's phase planes now hold only the rows it reaches.
    m, feeds = conv_model((1, 3, 640, 640), (8, 3, 3, 3), epilogue=("Relu",), pads=[1, 1, 1, 1], strides=[2, 2])
    compare(m, feeds, veus=2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("form", [lower_conv.FORM_DIRECT, lower_conv.FORM_PIXEL_ROWS])
@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 4, 37, 29), (10, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((2, 6, 31, 33), (12, 3, 5, 5), {"pads": [2, 2, 2, 2], "group": 2}),
    ((1, 4, 30, 30), (8, 4, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
])
def test_conv_tasks_capped_to_a_few_rows_match_reference(monkeypatch, form, x_shape, w_shape, attrs):
    # A tiny phase-plane budget cuts every task to a few output rows (tasks start mid-row).
    monkeypatch.setattr(lower_conv, "PHASE_PLANES_MAX_FLOATS", 2000)
    monkeypatch.setattr(lower_conv, "FORCE_FORM", form)
    m, feeds = conv_model(x_shape, w_shape, epilogue=("Relu",), **attrs)
    compare(m, feeds, veus=2, rtol=1e-4, atol=1e-4)


def test_rows_cap_bounds_the_phase_planes():
    cap = lower_conv._phase_rows_cap(3, 641, 320, 320, 2, 2, 3, 1, 642)
    assert 2 <= cap < 320
    rows = (cap - 1) * 2 + 3
    assert 3 * 4 * -(-rows // 2) * 321 <= lower_conv.PHASE_PLANES_MAX_FLOATS
    assert lower_conv._phase_rows_cap(3, 34, 16, 16, 2, 2, 3, 1, 34) == 16  # small planes: uncut


# -- rewrites (core/passes/decompose.py) -------------------------------------------------------------

@pytest.mark.parametrize("ctm,nm,factors", [
    ("asymmetric", "floor", (1, 1, 2, 2)),          # PaddleOCR's DB detector
    ("half_pixel", "round_prefer_floor", (1, 1, 3, 2)),
    ("pytorch_half_pixel", "round_prefer_ceil", (1, 2, 2, 4)),
])
def test_nearest_resize_by_integer_factors_matches_reference(ctm, nm, factors):
    x = rand(2, 3, 5, 7)
    scales = np.array(factors, dtype=np.float32)
    m = model([node("Resize", ["x", "", "scales"], mode="nearest", coordinate_transformation_mode=ctm,
                    nearest_mode=nm)], {"x": x}, ["y"], {"scales": scales}, opset=13)
    compare(m, {"x": x})


@pytest.mark.parametrize("factors", [(1, 1, 2, 2), (1, 1, 3, 3), (1, 1, 1, 9), (1, 1, 5, 1)])
@pytest.mark.parametrize("veus", [1, 2])
def test_nearest_upsampling_rows_split_anywhere(factors, veus):
    """The repeated-element copy (kernels_data._repeat_rows: rows of up to 8 copies of one element,
    written a run at a time) with rTasks that start and end inside a plane's rows; 9 copies a
    row take the general path."""
    x = rand(2, 5, 7, 9)
    scales = np.array(factors, dtype=np.float32)
    m = model([node("Resize", ["x", "", "scales"], mode="nearest", coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor")], {"x": x}, ["y"], {"scales": scales}, opset=13)
    compare(m, {"x": x}, veus=veus)


def test_nearest_resize_by_sizes_matches_reference():
    x = rand(1, 4, 6, 5)
    m = model([node("Resize", ["x", "", "", "sizes"], mode="nearest", coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor")], {"x": x}, ["y"], {"sizes": np.array([1, 4, 12, 15], dtype=np.int64)},
              opset=13)
    compare(m, {"x": x})


def test_linear_resize_over_the_last_two_axes_compiles():
    # it ran in numpy until k_resize (SegFormer's decode head)
    x = rand(1, 2, 4, 4)
    m = model([node("Resize", ["x", "", "scales"], mode="linear")], {"x": x}, ["y"],
              {"scales": np.array([1, 1, 2, 2], dtype=np.float32)}, opset=13)
    compare(m, {"x": x})


def test_resize_forms_without_a_kernel_still_fall_back():
    x = rand(1, 2, 4, 4)
    m = model([node("Resize", ["x", "", "scales"], mode="linear")], {"x": x}, ["y"],
              {"scales": np.array([1, 2, 1, 2], dtype=np.float32)}, opset=13)
    compare(m, {"x": x}, expect_fallback=True)


@pytest.mark.parametrize("k,bias", [(2, False), (2, True), (3, True)])
def test_conv_transpose_with_kernel_equal_to_stride_matches_reference(k, bias):
    x = rand(2, 6, 5, 7)
    consts = {"w": rand(6, 4, k, k, seed=1)}
    ins = ["x", "w"]
    if bias:
        consts["b"] = rand(4, seed=2)
        ins.append("b")
    m = model([node("ConvTranspose", ins, ["c"], kernel_shape=[k, k], strides=[k, k]), node("Relu", ["c"])],
              {"x": x}, ["y"], consts)
    compare(m, {"x": x})


@pytest.mark.parametrize("opset,size", [(9, 5), (13, 4), (13, 3)])
def test_lrn_matches_reference(opset, size):
    x = rand(2, 7, 6, 5)
    m = model([node("LRN", ["x"], size=size, alpha=1e-2, beta=0.75, bias=2.0)], {"x": x}, ["y"], opset=opset)
    compare(m, {"x": x})


def test_dropout_with_an_unread_mask_is_a_view():
    x = rand(3, 8)
    m = model([node("Dropout", ["x"], ["d", "mask"], ratio=0.5), node("Relu", ["d"])], {"x": x}, ["y"], opset=9)
    compare(m, {"x": x})


@pytest.mark.parametrize("shape,pads", [
    ((1, 512), [0, 64, 0, 64]),                   # silero VAD's STFT padding
    ((2, 3, 6, 7), [0, 0, 2, 1, 0, 0, 1, 3]),
])
def test_reflect_pad_matches_reference(shape, pads):
    x = rand(*shape)
    m = model([node("Pad", ["x", "pads"], mode="reflect")], {"x": x}, ["y"],
              {"pads": np.array(pads, dtype=np.int64)}, opset=13)
    compare(m, {"x": x})


def test_constant_of_shape_of_a_constant_shape_becomes_a_constant():
    from rammer.ir import Graph, Node, TensorInfo
    from rammer.passes import decompose_model_ops

    shape = np.array([3, 4], dtype=np.int64)
    g = Graph("t", (TensorInfo("x", "float32", (3, 4)),), (TensorInfo("y", "float32", (3, 4)),),
              (Node("ConstantOfShape", ("s",), ("c",), name="fill", attrs={"value": np.array([0.5], np.float32)}),
               Node("Add", ("x", "c"), ("y",), name="add")),
              {"s": shape},
              {"x": TensorInfo("x", "float32", (3, 4)), "s": TensorInfo("s", "int64", (2,)),
               "c": TensorInfo("c", "float32", (3, 4)), "y": TensorInfo("y", "float32", (3, 4))}, {"": 13})
    out = decompose_model_ops(g)
    assert [n.op_type for n in out.nodes] == ["Add"]
    np.testing.assert_array_equal(out.initializers["c"], np.full((3, 4), 0.5, np.float32))
    x = rand(3, 4)
    import rammer

    got = rammer.compile(g, backend="cpu", cache=False)({"x": x})["y"]
    np.testing.assert_allclose(got, x + 0.5, rtol=1e-6)


@pytest.mark.parametrize("trans_a,m_rows", [(0, 1), (0, 7), (1, 5)])
def test_gemm_with_constant_transposed_weights_matches_reference(trans_a, m_rows):
    # The weights are transposed once at compile time into a dense constant.
    x = rand(*((37, m_rows) if trans_a else (m_rows, 37)))
    consts = {"w": rand(50, 37, seed=1), "b": rand(50, seed=2)}
    m = model([node("Gemm", ["x", "w", "b"], ["g"], transA=trans_a, transB=1, alpha=0.5), node("Relu", ["g"])],
              {"x": x}, ["y"], consts)
    compare(m, {"x": x})


def test_two_gemms_share_one_transposed_constant():
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    x = rand(3, 16)
    m = model([node("Gemm", ["x", "w"], ["a"], transB=1), node("Gemm", ["x", "w"], ["b"], transB=1, alpha=2.0),
               node("Add", ["a", "b"])], {"x": x}, ["y"], {"w": rand(24, 16, seed=1)})
    compare(m, {"x": x})
    lowered = compile_program(load(m)).lowered
    consts = [b for b in lowered.buffers if b.kind == "const" and b.size == 24 * 16]
    assert len(consts) == 1  # transposed once, the original never copied into the arena
