"""Every small zoo model against the reference backend, within the backend's
declared tolerance (``capabilities.rtol`` / ``atol``)."""

from __future__ import annotations

import pytest

from .target import Target, first_line, reference_outputs


def _small_models() -> list[str]:
    from .. import zoo

    return [e.name for e in zoo.list_models() if e.small]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "zoo_model" in metafunc.fixturenames:
        metafunc.parametrize("zoo_model", _small_models())


def test_zoo_model_matches_reference(zoo_model: str, conformance_target: Target) -> None:
    from .. import zoo
    from ..api import random_feeds
    from ..bench.runner import compare
    from ..frontend import load

    target = conformance_target
    target.skip_if_quantized("the zoo check")
    graph = load(zoo.build(zoo_model, seed=0))
    target.skip_unless_dtypes(graph)
    target.skip_unless_compilable(graph)
    compiled = target.compile(graph)
    target.require_run()
    feeds = random_feeds(graph.inputs, seed=1)
    try:
        expected = reference_outputs(graph, feeds)
    except Exception as exc:
        pytest.xfail(f"rammer's reference backend fails on {zoo_model} ({first_line(exc)})")
    got = compiled.run(feeds)
    rtol, atol = target.caps.rtol, target.caps.atol
    result = compare(expected, got, rtol, atol)
    assert result.ok, (f"backend '{target.name}' on {zoo_model}: {result.problem} "
                       f"(declared tolerance rtol={rtol:g}, atol={atol:g})")
