"""Time limits scale with the machine's measured slowdown, so load alone does not fail a time-limited check."""

from __future__ import annotations

import pytest

from rammer import time_limits
from rammer.time_limits import MAX_SLOWDOWN, REFERENCE_CALIBRATION_S, SLOWDOWN_ENV, machine_slowdown, scaled_limit


@pytest.fixture
def quiet_load(monkeypatch):
    """No load average, no fixed factor: the calibration alone decides."""
    monkeypatch.delenv(SLOWDOWN_ENV, raising=False)
    monkeypatch.setattr(time_limits.os, "getloadavg", lambda: (0.0, 0.0, 0.0))


def test_a_limit_grows_with_a_slowed_down_calibration(quiet_load):
    assert scaled_limit(120, calibrate=lambda: REFERENCE_CALIBRATION_S) == pytest.approx(120)
    assert scaled_limit(120, calibrate=lambda: 5 * REFERENCE_CALIBRATION_S) == pytest.approx(600)


def test_a_limit_never_shrinks_and_is_capped(quiet_load):
    assert scaled_limit(120, calibrate=lambda: REFERENCE_CALIBRATION_S / 10) == pytest.approx(120)
    assert scaled_limit(120, calibrate=lambda: 1e6) == pytest.approx(120 * MAX_SLOWDOWN)


def test_the_load_average_per_cpu_counts(monkeypatch):
    monkeypatch.delenv(SLOWDOWN_ENV, raising=False)
    monkeypatch.setattr(time_limits.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    monkeypatch.setattr(time_limits.os, "cpu_count", lambda: 2)
    assert machine_slowdown(calibrate=lambda: REFERENCE_CALIBRATION_S) == pytest.approx(4.0)


def test_the_environment_fixes_the_factor(monkeypatch):
    monkeypatch.setenv(SLOWDOWN_ENV, "3")
    assert scaled_limit(10, calibrate=lambda: 1e6) == pytest.approx(30)
    monkeypatch.setenv(SLOWDOWN_ENV, "fast")
    with pytest.raises(ValueError, match=f"{SLOWDOWN_ENV}='fast' is not a number"):
        machine_slowdown()


def test_the_real_calibration_measures_something(quiet_load):
    seconds = time_limits.calibration_seconds()
    assert seconds > 0
    assert 1.0 <= machine_slowdown() <= MAX_SLOWDOWN


def test_hypothesis_sets_no_deadline_per_example():
    """Hypothesis's default 200 ms deadline per example fails a property test from load alone (tests/conftest.py)."""
    hypothesis = pytest.importorskip("hypothesis")
    assert hypothesis.settings.default.deadline is None
