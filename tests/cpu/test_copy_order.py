"""Strided copies whose last dim is short run another dim innermost (``lower_views.copy_loop_order``):
the same elements land in the same places, for interleaving transposes and stride-2 ConvTranspose."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node

from rammer.backends.cpu.lower_views import copy_loop_order


def test_the_longest_unit_stride_dim_goes_last():
    # [C, H, 2, W, 2] written densely from [C, 2, 2, H, W]: W (source stride 1) runs innermost
    dims, (ss, ts) = copy_loop_order((24, 120, 2, 120, 2), (57600, 120, 28800, 1, 14400), (57600, 480, 240, 2, 1))
    assert dims[-1] == 120 and ss[-1] == 1 and ts[-1] == 2
    assert sorted(dims) == sorted((24, 120, 2, 2, 120))
    # a long last dim stays
    assert copy_loop_order((8, 64), (1, 8), (64, 1))[0] == (8, 64)


@pytest.mark.parametrize("shape,perm", [
    ((1, 5, 2, 2, 7, 9), (0, 1, 4, 2, 5, 3)),   # DepthToSpace-style interleave
    ((2, 3, 3, 3, 5, 6), (0, 1, 4, 2, 5, 3)),
    ((1, 3, 17, 19), (0, 2, 3, 1)),              # NCHW -> NHWC with 3 channels
    ((2, 4, 6, 2), (3, 1, 0, 2)),
])
def test_interleaving_transposes_between_ops_match(shape, perm):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    # Relu on both sides keeps the transpose a copy between two arena buffers
    m = model([node("Relu", ["x"], ["r"]), node("Transpose", ["r"], ["t"], perm=list(perm)),
               node("Sigmoid", ["t"], ["y"])], {"x": x}, ["y"])
    compare(m, {"x": x})


@pytest.mark.parametrize("c,m,side", [(4, 3, 9), (6, 6, 16)])
def test_stride2_conv_transpose_matches(c, m, side):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, c, side, side)).astype(np.float32)
    w = rng.standard_normal((c, m, 2, 2)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    mdl = model([node("ConvTranspose", ["x", "w", "b"], ["t"], kernel_shape=[2, 2], strides=[2, 2]),
                 node("Relu", ["t"], ["y"])], {"x": x}, ["y"], {"w": w, "b": b})
    compare(mdl, {"x": x})


@pytest.mark.parametrize("shape", [(128, 4096), (4096, 128), (3136, 64), (40, 197), (1024, 24), (9, 1024)])
@pytest.mark.parametrize("veus", [1, 2])
def test_transposing_copies_in_tiles(shape, veus):
    # a 2-D transpose that a reshape makes a dense copy: tiles of rows by columns
    # (``kernels_data._transpose_rows``), moved directly or through a buffer when the strided side's
    # stride is a multiple of 4 KiB; rows that end mid-tile, and tasks that start mid-plane
    x = np.random.default_rng(4).standard_normal((2, *shape)).astype(np.float32)
    consts = {"s": np.array([2, shape[0] * shape[1]], np.int64)}
    m = model([node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), node("Reshape", ["t", "s"], ["y"])],
              {"x": x}, ["y"], consts)
    compare(m, {"x": x}, veus=veus)


def test_int32_and_int64_transposes_match():
    a = np.random.default_rng(6).integers(-2**31, 2**31 - 1, (3, 50, 1024)).astype(np.int32)
    b = a.astype(np.int64) * 3
    consts = {"s": np.array([3, 50 * 1024], np.int64)}
    m = model([node("Transpose", ["a"], ["t"], perm=[0, 2, 1]), node("Reshape", ["t", "s"], ["y"]),
               node("Transpose", ["b"], ["u"], perm=[0, 2, 1]), node("Reshape", ["u", "s"], ["z"])],
              {"a": a, "b": b}, ["y", "z"], consts)
    compare(m, {"a": a, "b": b})
