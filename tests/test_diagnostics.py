"""Fallbacks to the reference implementation are said once, or refused in strict mode."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from helpers import make_model, rand
from onnx import TensorProto, helper

import rammer
from rammer import diagnostics
from rammer.errors import CompileError


def _trilu_model(name: str = "cs"):
    """Relu -> Trilu (no CPU kernel: a host step) -> Relu."""
    return make_model(
        [helper.make_node("Relu", ["x"], ["a"], name="r1"),
         helper.make_node("Trilu", ["a"], ["b"], name="trilu_node"),
         helper.make_node("Relu", ["b"], ["y"], name="r2")],
        [("x", TensorProto.FLOAT, [2, 8])], [("y", TensorProto.FLOAT, [2, 8])], name=name)


@pytest.fixture(autouse=True)
def _fresh_memory():
    diagnostics._said.clear()
    yield
    diagnostics._said.clear()


def test_fallback_warns_once_naming_op_and_node(caplog):
    with caplog.at_level(logging.WARNING, logger="rammer"):
        model = rammer.compile(_trilu_model(), backend="cpu")
        rammer.compile(_trilu_model(), backend="cpu")
    msgs = [r.getMessage() for r in caplog.records if r.name == "rammer"]
    assert len(msgs) == 1, msgs
    assert "Trilu x1 (trilu_node)" in msgs[0] and "10-100x" in msgs[0]
    x = rand((2, 8))
    np.testing.assert_allclose(model({"x": x})["y"], np.triu(np.maximum(x, 0)), rtol=1e-5)


def test_strict_refuses_fallback():
    with pytest.raises(CompileError, match="strict mode forbids fallbacks.*trilu_node"):
        rammer.compile(_trilu_model(), backend="cpu", strict=True)


def test_no_warning_without_fallback(caplog):
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [("x", TensorProto.FLOAT, [2, 8])], [("y", TensorProto.FLOAT, [2, 8])])
    with caplog.at_level(logging.WARNING, logger="rammer"):
        rammer.compile(model, backend="cpu", strict=True)
        rammer.compile(model, backend="reference", strict=True)
    assert not [r for r in caplog.records if r.name == "rammer"]


def test_host_steps_run_blas_on_one_thread(monkeypatch):
    from rammer.backends.cpu import runtime

    seen = []

    class FakeBlas:
        user_api = "blas"
        num_threads = 4

        def set_num_threads(self, n):
            seen.append(n)
            self.num_threads = n

    fake = FakeBlas()
    monkeypatch.setattr(runtime, "_BLAS", [fake])
    model = rammer.compile(_trilu_model("cs_blas"), backend="cpu")
    x = rand((2, 8))
    np.testing.assert_allclose(model({"x": x})["y"], np.triu(np.maximum(x, 0)), rtol=1e-5)
    assert seen == [1, 4] and fake.num_threads == 4  # one thread during the host step, restored after
