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
