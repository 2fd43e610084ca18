"""Fixtures of the mcu backend's tests: the backend registered, small models built in code."""

from __future__ import annotations

import numpy as np
import pytest

from rammer import plugins


@pytest.fixture(scope="session")
def mcu_backend():
    """The mcu backend, registered for the test when the installed entry points lack it."""
    import rammer.backends.mcu as mod

    added = "mcu" not in plugins.backends()
    if added:
        plugins.register_plugin(mod, "rammer-mcu-tests")
    yield plugins.get_backend("mcu")
    if added:
        plugins.unregister_plugin("rammer-mcu-tests")


@pytest.fixture(scope="session")
def digits():
    """(onnx model, x_train, y_train, x_test, y_test): the digits CNN, trained briefly (seeded)."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from rammer.backends.mcu import models

    model = models.train_digits_cnn(seed=0, epochs=8)
    return (model, *models.digits_data(0))


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))
