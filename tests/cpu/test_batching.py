"""Batching of shared-weight MatMuls (rammer.lower.batching) and its effect on results."""

from __future__ import annotations

import numpy as np
import pytest

import rammer
import rammer.zoo
from rammer.frontend import load
from rammer.lower.batching import find_chunks
from rammer.lower.fusion import ancestors


@pytest.fixture(scope="module")
def lstm():
    return load(rammer.zoo.build("lstm-tc-small"))  # 2 layers x 5 steps


def test_chunks_group_independent_input_projections_only(lstm):
    g = lstm
    chunks = find_chunks(g, ancestors(g), max_rows=3)
    names = [[g.nodes[i].name for i in c] for c in chunks]
    # x @ W of each layer in runs of at most 3 steps; h @ R (a chain) never batches
    assert names and all(len(c) <= 3 for c in names)
    assert all(all(n.endswith("_xw") for n in c) for c in names), names
    for c in chunks:
        weights = {g.nodes[i].inputs[1] for i in c}
        assert len(weights) == 1
        mask = sum(1 << i for i in c)
        assert all(ancestors(g)[i] & mask == 0 for i in c)  # no member depends on another
    assert find_chunks(g, ancestors(g), max_rows=1) == []


@pytest.mark.parametrize("rows", [0, 2, 4, 100])
def test_batched_results_match_reference(lstm, rows):
    cpu = rammer.compile(lstm, backend="cpu", cache=False, batch_rows=rows)
    ref = rammer.compile(lstm, backend="reference")
    feeds = cpu.random_feeds(seed=4)
    np.testing.assert_allclose(cpu(feeds)["h_final"], ref(feeds)["h_final"], rtol=1e-4, atol=1e-5)
    gemms = cpu.executable.report["ops_by_family"]["gemm"]
    matmuls = lstm.op_counts()["MatMul"]
    if rows == 0:
        assert gemms == matmuls  # one GEMM per MatMul node
    else:
        assert gemms < matmuls
