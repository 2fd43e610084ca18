from __future__ import annotations

import pytest

import rammer.plugins


@pytest.fixture(scope="session", autouse=True)
def ipu_backend_registered():
    """Registers the ipu backend when its entry point is not installed yet."""
    if "ipu" in rammer.plugins.backends():
        yield
        return
    import rammer.backends.ipu as ipu

    rammer.plugins.register_plugin(ipu, "rammer-ipu-tests")
    yield
    rammer.plugins.unregister_plugin("rammer-ipu-tests")
