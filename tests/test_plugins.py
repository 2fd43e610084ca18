from __future__ import annotations

import types

import numpy as np
import pytest
from helpers import add_relu_model

import rammer
from rammer import plugins
from rammer.backend import Availability, Backend, Capabilities
from rammer.errors import BackendUnavailableError, PluginError
from rammer.hookspecs import hookimpl


class _Doubler(Backend):
    """A toy backend: runs the reference interpreter and doubles every output."""

    name = "toy-doubler"
    description = "test backend"
    capabilities = Capabilities(ops=frozenset({"Add", "Relu"}))

    def compile(self, graph, options):
        from rammer.interpreter import run_graph

        class Exe:
            def run(self, feeds):
                return {t.name: 2 * v for t, v in zip(graph.outputs, run_graph(graph, feeds))}

        return Exe()


class _Absent(_Doubler):
    name = "toy-absent"

    def availability(self):
        return Availability(False, "needs a FooAccelerator (none found)")


def _plugin(*backends):
    mod = types.SimpleNamespace()

    @hookimpl
    def rammer_register_backends(register):
        for b in backends:
            register(b)

    mod.rammer_register_backends = rammer_register_backends
    return mod


@pytest.fixture(autouse=True)
def fresh_plugins():
    plugins.reset()
    yield
    plugins.reset()


def test_builtin_reference_registers_through_entry_point():
    assert "reference" in plugins.backends()
    assert plugins.backend_origin("reference") == "reference"


def test_loader_is_idempotent():
    assert plugins.plugin_manager() is plugins.plugin_manager()
    assert plugins.backends().keys() == plugins.backends().keys()


def test_third_party_backend_registers_and_runs():
    plugins.register_plugin(_plugin(_Doubler()), "toy")
    model = rammer.compile(add_relu_model(), backend="toy-doubler")
    out = model(x=np.ones((2, 3), np.float32), y=np.zeros(3, np.float32))
    assert out["r"].tolist() == [[2.0] * 3] * 2


def test_backend_lacking_an_op_is_refused_with_the_op_named():
    class Narrow(_Doubler):
        name = "toy-narrow"
        capabilities = Capabilities(ops=frozenset({"Add"}))

    plugins.register_plugin(_plugin(Narrow()), "narrow")
    with pytest.raises(rammer.RammerError, match="cannot compile op.*Relu"):
        rammer.compile(add_relu_model(), backend="toy-narrow")


def test_unavailable_backend_says_why():
    plugins.register_plugin(_plugin(_Absent()), "absent")
    with pytest.raises(BackendUnavailableError, match="FooAccelerator"):
        rammer.compile(add_relu_model(), backend="toy-absent")
    assert plugins.default_backend_name() != "toy-absent"


def test_duplicate_backend_names_are_rejected_naming_both_plugins():
    plugins.register_plugin(_plugin(_Doubler()), "first")
    plugins.register_plugin(_plugin(_Doubler()), "second")
    with pytest.raises(PluginError, match="registered twice.*'first'.*'second'"):
        plugins.backends()


def test_duplicate_plugin_name_is_rejected():
    with pytest.raises(PluginError, match="already registered"):
        plugins.register_plugin(_plugin(), "reference")


def test_unknown_hooks_are_rejected():
    mod = types.SimpleNamespace(rammer_register_backendz=hookimpl(lambda register: None))
    with pytest.raises(PluginError, match="unknown hook.*rammer_register_backendz"):
        plugins.register_plugin(mod, "typo")


def test_invalid_backend_name_is_rejected():
    class Bad(_Doubler):
        name = "bad name; rm -rf"

    plugins.register_plugin(_plugin(Bad()), "bad")
    with pytest.raises(PluginError, match="invalid name"):
        plugins.backends()


def test_non_backend_objects_are_rejected():
    plugins.register_plugin(_plugin(object()), "junk")
    with pytest.raises(PluginError, match="not a rammer.backend.Backend"):
        plugins.backends()


def test_allow_list_environment_variable(monkeypatch):
    monkeypatch.setenv(plugins.ALLOW_ENV, "nothing-by-this-name")
    plugins.reset()
    assert plugins.backends() == {}
    with pytest.raises(BackendUnavailableError, match="no rammer backend is available"):
        plugins.default_backend_name()
    monkeypatch.setenv(plugins.ALLOW_ENV, "reference")
    plugins.reset()
    assert list(plugins.backends()) == ["reference"]


def test_default_backend_is_the_available_one_with_highest_priority():
    class Preferred(_Doubler):
        name = "toy-preferred"
        default_priority = 10_000

    plugins.register_plugin(_plugin(Preferred()), "preferred")
    assert plugins.default_backend_name() == "toy-preferred"
