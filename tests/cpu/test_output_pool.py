"""Large outputs are copied into buffers that are reused only once the caller has dropped them
(backends/cpu/output_pool.py): a held array, or a view of it, is never written again."""

from __future__ import annotations

import gc

import numpy as np
from cpu_helpers import model, node, rand

import rammer
from rammer.backends.cpu.output_pool import OutputPool


def test_a_buffer_is_written_again_only_when_nothing_else_refers_to_it():
    pool = OutputPool(buffers=2, min_bytes=64)
    src = np.arange(64, dtype=np.float32)
    first = pool.copy("y", src)
    first_id = id(first)
    np.testing.assert_array_equal(first, src)
    second = pool.copy("y", src + 1)  # `first` is held: another buffer
    assert second is not first and (first == src).all()
    del first
    gc.collect()
    third = pool.copy("y", src + 2)  # the first buffer, free again
    assert id(third) == first_id and (third == src + 2).all() and (second == src + 1).all()
    view = third[3:]  # a view holds its base
    del third
    fourth = pool.copy("y", src + 3)  # both kept buffers are referred to: a fresh copy, not kept
    assert (view == (src + 2)[3:]).all() and (second == src + 1).all() and (fourth == src + 3).all()
    assert len(pool._kept["y"]) == 2 and all(fourth is not b for b in pool._kept["y"])
    # small outputs and a pool of no buffers are plain copies
    for plain in (OutputPool(min_bytes=1 << 20), OutputPool(buffers=0, min_bytes=64)):
        np.testing.assert_array_equal(plain.copy("y", src), src)
        assert plain._kept == {}


def test_runs_never_overwrite_an_output_the_caller_still_holds():
    w = rand(64, 4096, seed=1)
    m = model([node("MatMul", ["x", "w"], ["y"])], {"x": rand(96, 64)}, ["y"], {"w": w})
    cm = rammer.compile(m, backend="cpu", cache=False, veus=1)
    feeds = [{"x": rand(96, 64, seed=s)} for s in range(4)]
    want = [f["x"] @ w for f in feeds]
    assert want[0].nbytes >= (1 << 20)  # large enough for the pool
    held = cm(feeds[0])["y"]
    for i in (1, 2, 3):  # as `out = model(feeds)` in a loop: the previous output is alive during the run
        out = cm(feeds[i])["y"]
        np.testing.assert_allclose(held, want[i - 1], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(out, want[i], rtol=1e-4, atol=1e-4)
        assert out is not held
        held = out
    kept = cm.executable.output_pool._kept["y"]
    assert len(kept) == 2 and any(held is b for b in kept)
    del out, held
    again = cm(feeds[2])["y"]  # both free: a kept buffer is written again
    assert any(again is b for b in kept)
    np.testing.assert_allclose(again, want[2], rtol=1e-4, atol=1e-4)
