"""The weights' -128 known at compile time: the lowering tells the ``avx2`` micro-kernel's callers whether
the packed weights hold a -128 (``no_min_weight``, the GEMM's packed-weight flag), so that they skip the
run-time scan when there is none and keep it when there is one.  A lone -128 against activations of
x = a - 128 = -128 gives wrong sums if the scan is skipped (``vpsignb`` cannot negate it)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, node
from onnx import numpy_helper
from test_quant_gemm_int8 import _model, _qconv

from rammer.backends.cpu import lower_quant, lower_quant_conv


@pytest.mark.parametrize("lone_min", [True, False], ids=["one-min-weight", "none"])
@pytest.mark.parametrize("w_shape", [(20, 8, 3, 3), (70, 40, 1, 1)], ids=["nhwc-3x3", "pointwise"])
def test_qlinear_conv_with_and_without_a_min_weight(w_shape, lone_min, monkeypatch):
    monkeypatch.setattr(lower_quant_conv, "nhwc_pays", lambda taps, cp, oc: True)
    flags = []
    original = lower_quant_conv.no_min_weight
    monkeypatch.setattr(lower_quant_conv, "no_min_weight", lambda lw, n: flags.append(original(lw, n)) or flags[-1])
    m, feeds = _qconv((1, w_shape[1], 9, 11), w_shape, "uint8", "int8", "uint8", True, True,
                      **(dict(pads=[1, 1, 1, 1]) if w_shape[2] == 3 else {}))
    rng = np.random.default_rng(7)
    w = rng.integers(-127, 128, size=w_shape).astype(np.int8)
    if lone_min:
        w[-1, -1, -1, -1] = -128
    for init in m.graph.initializer:
        if init.name in ("w", "wz"):
            value = w if init.name == "w" else np.zeros(tuple(init.dims), np.int8)
            init.CopyFrom(numpy_helper.from_array(value, init.name))
    feeds["x"][...] = 0  # x = a - 128 = -128 everywhere, the byte the unchecked kernel gets wrong
    feeds["x"][0, 0, 0, :3] = 255
    compare(m, feeds, expect_fallback=False)
    assert flags == [not lone_min]


@pytest.mark.parametrize("lone_min", [True, False], ids=["one-min-weight", "none"])
def test_matmul_integer_with_and_without_a_min_weight(lone_min, monkeypatch):
    rng = np.random.default_rng(11)
    b = rng.integers(-127, 128, size=(64, 70)).astype(np.int8)
    if lone_min:
        b[-1, 3] = -128
    a = np.zeros((7, 64), np.uint8)  # x = -128 against the weights
    found = []
    original = lower_quant._packed_weight

    def packed(lw, name):
        got = original(lw, name)
        found.append(got[3] if got is not None else None)
        return got

    monkeypatch.setattr(lower_quant, "_packed_weight", packed)
    m = _model([node("MatMulInteger", ["a", "b"], ["y"])], {"a": a}, ["y"], {"b": b}, opset=17)
    compare(m, {"a": a}, expect_fallback=False)
    assert found and all(f == (not lone_min) for f in found)
