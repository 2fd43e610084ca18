"""Whole models on the cpu backend: the small zoo, policies, fallback, feeds, NaN."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import compare, model, node, rand

import rammer
import rammer.zoo
from rammer.errors import FeedError
from rammer.frontend import load

SMALL_ZOO = [e.name for e in rammer.zoo.list_models() if e.small]


@pytest.fixture(scope="module")
def graphs():
    return {name: load(rammer.zoo.build(name, seed=3)) for name in SMALL_ZOO}


@pytest.mark.parametrize("name", SMALL_ZOO)
def test_small_zoo_matches_reference_without_fallback(name, graphs):
    g = graphs[name]
    cpu = rammer.compile(g, backend="cpu", cache=False)
    ref = rammer.compile(g, backend="reference")
    feeds = cpu.random_feeds(seed=1)
    got, want = cpu(feeds), ref(feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
    report = cpu.executable.report
    assert report["fallbacks"] == []
    assert report["arena"]["peak_intermediate_bytes"] <= report["arena"]["without_reuse_bytes"]
    # the second run reuses the arena and gives the same answer
    again = cpu(feeds)
    for k in want:
        np.testing.assert_array_equal(again[k], got[k])


@pytest.mark.parametrize("policy", ["op-by-op", "wavefront-fastest"])
def test_other_policies_give_the_same_results(policy, graphs):
    g = graphs["nasnet-small"]
    cpu = rammer.compile(g, backend="cpu", cache=False, policy=policy)
    ref = rammer.compile(g, backend="reference")
    feeds = cpu.random_feeds(seed=2)
    np.testing.assert_allclose(cpu(feeds)["fc"], ref(feeds)["fc"], rtol=1e-4, atol=1e-5)
    assert cpu.executable.report["policy"] == policy


@pytest.mark.parametrize("veus", [1, 2])
def test_vEU_counts(veus, graphs):
    g = graphs["lstm-tc-small"]
    cpu = rammer.compile(g, backend="cpu", cache=False, veus=veus)
    ref = rammer.compile(g, backend="reference")
    feeds = cpu.random_feeds()
    np.testing.assert_allclose(cpu(feeds)["h_final"], ref(feeds)["h_final"], rtol=1e-4, atol=1e-5)
    assert cpu.executable.report["veus"] == veus


def test_unsupported_ops_fall_back_between_compiled_segments():
    x = rand(3, 10)
    k = np.array([4], np.int64)
    nodes = [node("Relu", ["x"], ["r"]), node("TopK", ["r", "k"], ["v", "i"], axis=1),
             node("Cast", ["x"], ["d"], to=11), node("Cos", ["d"], ["dc"]), node("Cast", ["dc"], ["df"], to=1),
             node("Sigmoid", ["v"], ["s"]), node("Add", ["df", "x"], ["y"])]
    report = compare(model(nodes, {"x": x}, ["s", "i", "y"], {"k": k}), {"x": x}, expect_fallback=True)
    ops = sorted(f["op"] for f in report["fallbacks"])
    assert ops == ["Cast", "Cast", "Cos", "TopK"], report["fallbacks"]
    assert all(f["reason"] for f in report["fallbacks"])
    assert report["segments"] >= 2


def test_feed_errors_are_clear():
    cpu = rammer.compile(model([node("Relu", ["x"])], {"x": rand(2, 3)}, ["y"]), backend="cpu", cache=False)
    with pytest.raises(FeedError, match="float64"):
        cpu({"x": np.zeros((2, 3))})
    with pytest.raises(FeedError, match=r"\[3, 2\]"):
        cpu({"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(FeedError, match="missing"):
        cpu({})
    # the executable checks feeds itself too (for direct callers)
    with pytest.raises(FeedError):
        cpu.executable.run({"x": np.zeros((3, 2), np.float32)})


def test_nan_and_inf_inputs_propagate(graphs):
    g = graphs["resnext-small"]
    cpu = rammer.compile(g, backend="cpu", cache=False)
    ref = rammer.compile(g, backend="reference")
    feeds = cpu.random_feeds()
    x = next(iter(feeds))
    feeds[x] = feeds[x].copy()
    feeds[x].reshape(-1)[:5] = [np.nan, np.inf, -np.inf, np.nan, 1e30]
    got, want = cpu(feeds), ref(feeds)
    for k in want:
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(want[k]))
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, equal_nan=True)
