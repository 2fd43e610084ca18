"""Run-time errors: wrong feeds are refused with a :class:`~rammer.errors.FeedError`
that names the input, before the backend's code sees them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .target import Target
from .tiny import tiny_graph


@pytest.fixture(scope="module")
def tiny(conformance_target: Target) -> tuple[Any, dict[str, np.ndarray]]:
    from ..api import random_feeds

    graph = tiny_graph(conformance_target)
    compiled = conformance_target.compile(graph)
    conformance_target.require_run()
    return compiled, random_feeds(graph.inputs, seed=3)


def _other_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype != np.float64 else np.dtype(np.float32)


def test_good_feeds_run(tiny: tuple[Any, dict[str, np.ndarray]]) -> None:
    compiled, feeds = tiny
    outs = compiled.run(feeds)
    assert set(outs) == {t.name for t in compiled.outputs}


def test_missing_feed_is_refused(tiny: tuple[Any, dict[str, np.ndarray]]) -> None:
    from ..errors import FeedError

    compiled, feeds = tiny
    name = compiled.inputs[0].name
    partial = {k: v for k, v in feeds.items() if k != name}
    with pytest.raises(FeedError, match=name):
        compiled.run(partial)


def test_wrong_dtype_is_refused(tiny: tuple[Any, dict[str, np.ndarray]]) -> None:
    from ..errors import FeedError

    compiled, feeds = tiny
    name = compiled.inputs[0].name
    bad = dict(feeds, **{name: feeds[name].astype(_other_dtype(feeds[name].dtype))})
    with pytest.raises(FeedError, match=name):
        compiled.run(bad)


def test_wrong_shape_is_refused(tiny: tuple[Any, dict[str, np.ndarray]]) -> None:
    from ..errors import FeedError

    compiled, feeds = tiny
    name = compiled.inputs[0].name
    arr = feeds[name]
    bad = dict(feeds, **{name: np.zeros(arr.shape + (1,), dtype=arr.dtype)})
    with pytest.raises(FeedError, match=name):
        compiled.run(bad)


def test_unknown_feed_is_refused(tiny: tuple[Any, dict[str, np.ndarray]]) -> None:
    from ..errors import FeedError

    compiled, feeds = tiny
    with pytest.raises(FeedError, match="no_such_input"):
        compiled.run(dict(feeds, no_such_input=np.zeros(1, dtype=np.float32)))


def test_feeds_that_are_not_a_mapping_are_refused(tiny: tuple[Any, dict[str, np.ndarray]]) -> None:
    from ..errors import FeedError

    compiled, feeds = tiny
    with pytest.raises(FeedError):
        compiled.run(list(feeds.values()))
