"""Linear and cubic Resize run as a cpu rKernel (``k_resize``: compile-time tap tables per axis), not in
numpy.  SegFormer-style decoders upsample every scale bilinearly; before, each such Resize fell back to the
reference implementation between compiled segments.  A grid over the shape class: up- and down-sampling by
scales or sizes, every coordinate transformation, linear and cubic, antialiasing, rank 3 and 4."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand


def _resize(shape, mode, ctm, scales=None, sizes=None, **attrs):
    x = rand(*shape, seed=5)
    consts = {"roi": np.zeros(0, np.float32)}
    ins = ["x", "roi"]
    if scales is not None:
        consts["scales"] = np.asarray(scales, np.float32)
        ins.append("scales")
    else:
        consts["scales"] = np.zeros(0, np.float32)
        consts["sizes"] = np.asarray(sizes, np.int64)
        ins += ["scales", "sizes"]
    m = model([node("Resize", ins, ["y"], mode=mode, coordinate_transformation_mode=ctm, **attrs)], {"x": x}, ["y"],
              consts, opset=19)
    return m, {"x": x}


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                 "half_pixel_symmetric"])
@pytest.mark.parametrize("shape,scales,sizes", [
    ((1, 8, 16, 16), [1, 1, 4, 4], None),       # a decode head's x4 upsampling
    ((2, 3, 7, 9), [1, 1, 2.0, 1.5], None),      # odd planes, unequal factors
    ((1, 4, 32, 24), None, [1, 4, 13, 50]),      # sizes: down along rows, up along columns
    ((1, 2, 64, 64), [1, 1, 0.5, 0.25], None),   # downsampling
])
def test_linear_resize_runs_in_the_kernel(shape, scales, sizes, ctm):
    m, feeds = _resize(shape, "linear", ctm, scales, sizes)
    compare(m, feeds, rtol=1e-5, atol=1e-5)  # (it asserts that no node fell back to numpy)


@pytest.mark.parametrize("shape,scales,attrs", [
    ((1, 3, 10, 12), [1, 1, 2, 2], {}),
    ((1, 3, 10, 12), [1, 1, 2, 2], {"cubic_coeff_a": -0.5, "exclude_outside": 1}),
    ((1, 2, 40, 40), [1, 1, 0.3, 0.6], {"antialias": 1}),
])
def test_cubic_and_antialiased_resize(shape, scales, attrs):
    m, feeds = _resize(shape, "cubic", "half_pixel", scales, **attrs)
    compare(m, feeds, rtol=1e-4, atol=1e-4)


def test_rank3_linear_resize_over_the_last_axis():
    m, feeds = _resize((2, 5, 100), "linear", "align_corners", [1, 1, 3.0])
    compare(m, feeds, rtol=1e-5, atol=1e-5)


def test_resize_of_a_leading_axis_still_falls_back():
    m, feeds = _resize((4, 3, 8, 8), "linear", "half_pixel", [2, 1, 1, 1])
    compare(m, feeds, rtol=1e-5, atol=1e-5, expect_fallback=True)


@pytest.mark.parametrize("mode,shape,scales,sizes", [
    ("linear", (1, 8, 16, 16), [1, 1, 4, 4], None),
    ("linear", (1, 4, 32, 24), None, [1, 4, 13, 50]),
    ("linear", (1, 2, 64, 64), [1, 1, 0.5, 0.25], None),
    ("cubic", (2, 3, 10, 12), [1, 1, 2, 1.5], None),
])
def test_separable_passes_match_the_gathering_loop_bit_for_bit(monkeypatch, mode, shape, scales, sizes):
    """A plane whose column pass fits the vEU's scratch is resampled along columns into scratch, then
    along rows; a larger one gathers every output pixel's taps.  Both sum the same products in the same
    order, so their outputs are identical, and both match the reference."""
    import rammer
    from rammer.backends.cpu import lower_nn
    from rammer.backends.cpu.compiler import compile_program
    from rammer.frontend import load

    def resize_scratch() -> list[int]:
        return [op.scratch for op in compile_program(load(m)).lowered.ops if op.family == "resize"]

    m, feeds = _resize(shape, mode, "half_pixel", scales, sizes)
    separable = rammer.compile(m, backend="cpu", cache=False)
    assert resize_scratch() == [shape[2] * (sizes or [round(a * b) for a, b in zip(shape, scales)])[3]]
    monkeypatch.setattr(lower_nn, "RESIZE_MAX_SCRATCH_FLOATS", 0)
    gathering = rammer.compile(m, backend="cpu", cache=False)
    assert resize_scratch() == [0]
    np.testing.assert_array_equal(separable(feeds)["y"], gathering(feeds)["y"])
    compare(m, feeds, rtol=1e-4, atol=1e-4)
