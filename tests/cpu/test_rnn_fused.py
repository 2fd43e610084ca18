"""The recurrence rKernel (backends/cpu/kernels_rnn.py): its batch-1 GEMV on the weight as stored, and
whole layers split over vEUs by direction and blocks of batch rows (the op tests in test_ops.py cover
the cells, states, layouts and the layers that keep the rOperators per step)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand

from rammer.backends.cpu import kernels_rnn as kr


@pytest.mark.parametrize("rows,k,n,w_cs", [(1, 16, 8, 16), (1, 33, 29, 40), (3, 8, 70, 9), (2, 64, 1, 64)])
def test_dot_rows_is_a_times_w_transposed_and_writes_nothing_else(rows, k, n, w_cs):
    """N not a multiple of eight (the tail loop), rows of W further apart than K (a gate block of R),
    several rows of A; C's row stride wider than N, its gaps untouched."""
    a = rand(rows, k, seed=1)
    w = rand(n, w_cs, seed=2)
    c_rs = n + 5
    F = np.full(a.size + w.size + rows * c_rs, np.nan, np.float32)
    a_off, w_off, c_off = 0, a.size, a.size + w.size
    F[a_off:w_off] = a.ravel()
    F[w_off:c_off] = w.ravel()
    kr._dot_rows(F, a_off, k, rows, k, w_off, w_cs, c_off, c_rs, n)
    got = F[c_off:].reshape(rows, c_rs)
    np.testing.assert_allclose(got[:, :n], a.astype(np.float64) @ w[:, :k].T.astype(np.float64), rtol=1e-5,
                               atol=1e-5)
    assert np.isnan(got[:, n:]).all()


@pytest.mark.parametrize("op,gates,attrs,batch,hid,dirs", [
    ("LSTM", 4, {}, 8, 40, 1),                              # packed weight, 4-row blocks
    ("GRU", 3, {"linear_before_reset": 1}, 3, 20, 2),       # unpacked, blocks of single rows
    ("GRU", 3, {}, 5, 12, 1),                               # z|r and h GEMMs apart, rows split 3 + 2
    ("RNN", 1, {}, 2, 9, 2),
])
def test_layer_split_over_veus_by_direction_and_batch_rows(op, gates, attrs, batch, hid, dirs):
    seq, isz = 6, 7
    consts = {"W": rand(dirs, gates * hid, isz, seed=1) * 0.5, "R": rand(dirs, gates * hid, hid, seed=2) * 0.5,
              "B": rand(dirs, 2 * gates * hid, seed=3) * 0.2}
    feeds = {"x": rand(seq, batch, isz), "h0": rand(dirs, batch, hid, seed=5)}
    outs = ["y", "yh"]
    direction = "bidirectional" if dirs == 2 else "reverse"
    n = node(op, ["x", "W", "R", "B", "", "h0"], outs, hidden_size=hid, direction=direction, **attrs)
    report = compare(model([n], feeds, outs, consts), feeds, veus=2)
    assert "k_rnn" in report["kernels"] and report["ops_by_family"]["rnn"] == 1


def test_final_states_only_in_layout_1():
    """Y absent: the kernel writes Y_h and Y_c alone, in layout 1's [batch, dirs, hid] order."""
    hid, batch = 10, 2
    consts = {"W": rand(2, 4 * hid, 3, seed=1), "R": rand(2, 4 * hid, hid, seed=2) * 0.5}
    feeds = {"x": rand(batch, 5, 3)}
    n = node("LSTM", ["x", "W", "R"], ["", "yh", "yc"], hidden_size=hid, layout=1, direction="bidirectional")
    report = compare(model([n], feeds, ["yh", "yc"], consts), feeds)
    assert "k_rnn" in report["kernels"] and "k_copy_many" not in report["kernels"]
