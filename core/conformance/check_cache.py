"""The compile cache survives corrupt entries.

Only for backends that declare ``capabilities.compile_cache``.  The contract:
the backend keeps its cache under the folder named by the environment
variable ``RAMMER_CACHE_DIR`` (or the variable named by
``capabilities.extra["cache_dir_env"]``), read when it compiles.  A corrupt,
truncated or empty entry must be detected and rebuilt, never crash the
compile nor change a result.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .target import Target, reference_outputs
from .tiny import tiny_graph

DEFAULT_ENV = "RAMMER_CACHE_DIR"


def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_cache_survives_corrupt_entries(conformance_target: Target, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    from ..api import random_feeds
    from ..bench.runner import compare

    target = conformance_target
    if not target.caps.compile_cache:
        pytest.skip("the backend does not declare capabilities.compile_cache")
    env = str(target.caps.extra.get("cache_dir_env", DEFAULT_ENV))
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv(env, str(cache))
    graph = tiny_graph(target)
    target.compile(graph)
    entries = _entries(cache)
    assert entries, (f"backend '{target.name}' declares compile_cache but wrote nothing under ${env} "
                     f"({cache}) when it compiled '{graph.name}'")
    for path in entries:
        data = path.read_bytes()
        if damage == "garbage":
            path.write_bytes(bytes((b ^ 0x5A) for b in data[:4096]) + os.urandom(64))
        elif damage == "truncated":
            path.write_bytes(data[: len(data) // 2])
        else:
            path.write_bytes(b"")
    compiled = target.compile(graph)  # must rebuild, not crash
    target.compile(graph)  # and the rebuilt entry must be usable
    target.require_run()
    feeds = random_feeds(graph.inputs, seed=9)
    result = compare(reference_outputs(graph, feeds), compiled.run(feeds), target.caps.rtol, target.caps.atol)
    assert result.ok, f"after a {damage} cache entry the results are wrong: {result.problem}"
