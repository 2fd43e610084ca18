"""Repeat runs give bit-identical results, and a run neither keeps nor edits
the caller's arrays (no aliasing of feeds or of earlier outputs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .target import Target
from .tiny import tiny_graph


def _first_claimed_small_model(target: Target) -> Any | None:
    from .. import zoo
    from ..frontend import load
    from .target import graph_dtypes

    for entry in zoo.list_models():
        if not entry.small:
            continue
        graph = load(zoo.build(entry.name, seed=0))
        if not target.backend.unsupported_nodes(graph) and graph_dtypes(graph) <= set(target.caps.dtypes):
            return graph
    return None


def _models(target: Target) -> list[Any]:
    graphs = [tiny_graph(target)]
    zoo_graph = _first_claimed_small_model(target)
    if zoo_graph is not None:
        graphs.append(zoo_graph)
    return graphs


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


def test_repeat_runs_are_identical(conformance_target: Target) -> None:
    from ..api import random_feeds

    target = conformance_target
    for graph in _models(target):
        compiled = target.compile(graph)
        target.require_run()
        feeds = random_feeds(graph.inputs, seed=5)
        first = compiled.run(feeds)
        for attempt in range(2, 5):
            again = compiled.run(feeds)
            for name, arr in first.items():
                assert _same(arr, again[name]), (
                    f"graph '{graph.name}': run {attempt} gave a different '{name}' than run 1 "
                    f"(max abs diff {float(np.max(np.abs(arr.astype(np.float64) - again[name]))):.3g})")


def test_runs_do_not_alias_feeds_or_outputs(conformance_target: Target) -> None:
    from ..api import random_feeds

    target = conformance_target
    graph = tiny_graph(target)
    compiled = target.compile(graph)
    target.require_run()
    feeds = random_feeds(graph.inputs, seed=6)
    saved = {k: v.copy() for k, v in feeds.items()}
    first = compiled.run(feeds)
    for name, arr in feeds.items():
        assert np.array_equal(arr, saved[name]), f"the run modified the caller's feed '{name}'"
    kept = {k: v.copy() for k, v in first.items()}
    for arr in first.values():
        if arr.flags.writeable:
            arr[...] = 0  # a caller may scribble on what it got back
    second = compiled.run(feeds)
    for name, arr in second.items():
        assert _same(arr, kept[name]), (f"output '{name}' changed after the caller edited the previous "
                                        "run's output: the backend hands out a buffer it reuses")
    other = random_feeds(graph.inputs, seed=7)
    compiled.run(other)
    for name, arr in second.items():
        assert _same(arr, kept[name]), (f"output '{name}' of an earlier run changed when the model ran again: "
                                        "the backend hands out a buffer it reuses")


@pytest.mark.parametrize("seed", [11, 12])
def test_results_depend_only_on_feeds(conformance_target: Target, seed: int) -> None:
    """Two compiled instances of one graph agree bit for bit."""
    from ..api import random_feeds

    target = conformance_target
    graph = tiny_graph(target)
    a = target.compile(graph)
    b = target.compile(graph)
    target.require_run()
    feeds = random_feeds(graph.inputs, seed=seed)
    ra, rb = a.run(feeds), b.run(feeds)
    for name in ra:
        assert _same(ra[name], rb[name]), f"two compilations of '{graph.name}' disagree on '{name}'"
