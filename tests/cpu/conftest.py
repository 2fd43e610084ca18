"""Make the ``cpu`` backend available to these tests even before its entry
point is installed, and give every test session its own compile cache."""

from __future__ import annotations

import pytest

import rammer.backends.cpu as cpu_backend
from rammer import plugins


@pytest.fixture(scope="session", autouse=True)
def cpu_registered(tmp_path_factory: pytest.TempPathFactory):
    if "cpu" not in plugins.backends():
        plugins.register_plugin(cpu_backend, "cpu-tests")
    # Tests call kernels directly, not through entries: numba may load them from its cache, and
    # cached code builds no micro-kernel module (see entries.ensure_all_micro_kernels; models build
    # their own, as test_lazy_ukernels checks in fresh processes).
    from rammer.backends.cpu import entries

    entries.ensure_all_micro_kernels()
    yield


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A private compile cache for one test."""
    monkeypatch.setenv("RAMMER_CACHE_DIR", str(tmp_path / "cache"))
    return str(tmp_path / "cache")


def assert_close(actual, expected, rtol=1e-4, atol=1e-5):
    import numpy as np

    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
