"""QuantizedAdd on ``cpu`` (``k_qadd``): the residual DQ(a) + DQ(b) [-> Relu] -> Q of QDQ models runs on bytes
and gives the reference's bytes (the unfused float chain) for every pair of input bytes."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare
from qdq_add_models import add_model, feeds_for


@pytest.mark.parametrize("a_type,b_type,y_type,relu", [
    ("uint8", "uint8", "uint8", False), ("uint8", "uint8", "uint8", True), ("int8", "uint8", "int8", False),
    ("uint8", "int8", "uint8", True), ("int8", "int8", "int8", False)])
@pytest.mark.parametrize("scales", [(0.0072, 0.0139, 0.0121), (0.02, 0.02, 0.01), (0.0031, 0.25, 0.5)],
                         ids=["resnet-like", "round-halves", "wide"])
def test_every_pair_of_bytes_matches_the_chain(a_type, b_type, y_type, relu, scales):
    shape = (256, 256)  # a[i, j] = byte i, b[i, j] = byte j: all 65,536 pairs
    model = add_model(a_type, b_type, y_type, relu, shape=shape, scales=scales)
    i, j = np.meshgrid(np.arange(256, dtype=np.uint8), np.arange(256, dtype=np.uint8), indexing="ij")
    report = compare(model, {"a": i.view(a_type), "b": j.view(b_type)}, expect_fallback=False)
    assert "k_qadd" in report["kernels"], report["kernels"]


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 64, 33, 17), (1, 40000)])
def test_odd_lengths_and_several_tasks(shape):
    model = add_model("uint8", "uint8", "uint8", relu=False, shape=shape, zero_points=False)
    report = compare(model, feeds_for("uint8", "uint8", shape, seed=1), expect_fallback=False)
    assert "k_qadd" in report["kernels"] and "k_ew" not in report["kernels"], report["kernels"]
