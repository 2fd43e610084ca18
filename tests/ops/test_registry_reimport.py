"""The op registry refuses two different definitions of one op, and accepts the same definition again (a
module imported a second time, as after pytester restores sys.modules)."""
from __future__ import annotations

import pytest

from rammer.ops import registry


def _infer(ctx):  # pragma: no cover - never called
    return []


def test_a_second_different_definition_is_refused_and_the_same_one_replaces(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    def compute_a(*args):
        return args

    registry.register_op("RammerTestOp", infer=_infer, domain="test.rammer")(compute_a)
    again = compute_a  # the same module and qualified name: a re-import
    registry.register_op("RammerTestOp", infer=_infer, domain="test.rammer")(again)

    def compute_b(*args):
        return args

    with pytest.raises(RuntimeError, match="registered twice"):
        registry.register_op("RammerTestOp", infer=_infer, domain="test.rammer")(compute_b)
