"""The weight pool: cosine k-means, assignment, alpha, fine-tuning with the pool fixed."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.mcu import lower, pool, quantize
from rammer.errors import CompileError
from rammer.frontend import load

from .conftest import nhwc


def test_kmeans_sizes_and_cosine_assignment():
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((2000, 8)).astype(np.float32)
    with pytest.raises(CompileError, match="32..256"):
        pool.kmeans_cosine(vecs, 16)
    with pytest.raises(CompileError, match="32..256"):
        pool.kmeans_cosine(vecs, 257)
    p = pool.kmeans_cosine(vecs, 32, seed=1)
    assert p.shape == (32, 8)
    np.testing.assert_array_equal(p, pool.kmeans_cosine(vecs, 32, seed=1))  # seeded
    w = rng.standard_normal((4, 3, 3, 16)).astype(np.float32)
    pw = pool.assign(w, p)
    assert pw.indices.shape == (4, 3, 3, 2) and pw.indices.dtype == np.uint8
    unit = p / np.linalg.norm(p, axis=1, keepdims=True)
    v = w.reshape(4, -1, 8)
    best = np.argmax(v @ unit.T, axis=2)
    np.testing.assert_array_equal(pw.indices.reshape(4, -1), best)
    # alpha is the least-squares scale of each output channel
    approx = pool.pooled_float_weight(pw, p, w.shape).reshape(4, -1)
    for k in range(4):
        for scale in (0.9, 1.1):
            assert np.sum((w[k].reshape(-1) - approx[k]) ** 2) <= np.sum((w[k].reshape(-1) - scale * approx[k]) ** 2)


@pytest.mark.slow
def test_finetune_keeps_the_pool_and_improves_the_pooled_model(digits):
    model, xtr, ytr, xte, yte = digits
    net = lower.lower_graph(load(model))
    calib = nhwc(xtr[:256])
    plan = pool.build_pool(net, calib, 32)
    net2, plan2 = pool.finetune(net, plan, nhwc(xtr), ytr, epochs=2)
    np.testing.assert_array_equal(plan2.pool, plan.pool)
    assert plan2.pooled.keys() == plan.pooled.keys() and plan2.reasons == plan.reasons

    def acc(n, p):
        q = quantize.quantize_net(n, calib, p.pooled, p.pool, p.reasons)
        from rammer.backends.mcu import kernels

        x = quantize.quantize_input(nhwc(xte), q.input_tensor)
        return float((kernels.run_model(q, x, 8).reshape(len(x), -1).argmax(1) == yte).mean())

    assert acc(net2, plan2) >= acc(net, plan)
