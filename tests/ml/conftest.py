"""tests/ml: its helper module on sys.path (the suite imports with --import-mode=importlib),
and the cpu backend registered even before its entry point is installed."""

from __future__ import annotations

import os
import sys

import pytest

import rammer.backends.cpu as cpu_backend
from rammer import plugins

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture(scope="session", autouse=True)
def cpu_registered():
    if "cpu" not in plugins.backends():
        plugins.register_plugin(cpu_backend, "cpu-ml-tests")
    yield


@pytest.fixture(scope="session", autouse=True)
def ml_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """A compile cache of this session's own, so cached programs never hide a lowering change."""
    old = os.environ.get("RAMMER_CACHE_DIR")
    os.environ["RAMMER_CACHE_DIR"] = str(tmp_path_factory.mktemp("ml-cache"))
    yield
    if old is None:
        os.environ.pop("RAMMER_CACHE_DIR", None)
    else:
        os.environ["RAMMER_CACHE_DIR"] = old
