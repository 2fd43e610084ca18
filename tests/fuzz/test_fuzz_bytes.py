"""Damaged model bytes, drawn by hypothesis (which shrinks a failure to the smallest damage).

The seeded mutator (rammer.fuzzing.mutate) flips, truncates and splices bytes too; hypothesis adds a
shrinker for the byte edit itself.  Derandomized, so CI runs the same examples every time.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rammer
from rammer.fuzzing.graphs import random_model
from rammer.fuzzing.oracle import _judge_error

_MODEL, _FEEDS = random_model(5)
_DATA = _MODEL.SerializeToString()


@st.composite
def _damaged(draw: st.DrawFn) -> bytes:
    data = bytearray(_DATA)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        piece = draw(st.binary(min_size=0, max_size=8))
        cut = draw(st.integers(0, 8))
        data[at:at + cut] = piece
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


@pytest.mark.slow
@settings(derandomize=True, max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_damaged())
def test_damaged_bytes_run_or_are_refused_by_name(data: bytes) -> None:
    try:
        rammer.compile(data, backend="reference").run(dict(_FEEDS))
    except Exception as exc:  # noqa: BLE001 - judging what escaped is the point
        bad = _judge_error(exc, data)
        assert bad is None, bad.detail
