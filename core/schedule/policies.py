"""Scheduling policies: the interface and the registry.

A policy is an object with a ``name``, a one-line ``description`` and
``schedule(problem) -> Schedule``.  Policies are registered through the
``rammer_register_policies`` plugin hook; the built-in ones
(:mod:`rammer.schedule.builtin`) are registered the same way.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from .. import plugins
from ..errors import PluginError, RammerError
from . import builtin
from .problem import Problem
from .schedule import Schedule

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_BUILTIN_PLUGIN = "rammer-builtin-policies"


class Policy(Protocol):
    name: str
    description: str

    def schedule(self, problem: Problem) -> Schedule: ...


def _ensure_builtin() -> None:
    pm = plugins.plugin_manager()
    if not pm.is_registered(builtin) and pm.get_plugin(_BUILTIN_PLUGIN) is None:
        # Normally an entry point loads it; registering it here keeps the
        # built-in policies when RAMMER_PLUGINS narrows the entry points.
        plugins.register_plugin(builtin, _BUILTIN_PLUGIN)


def policies() -> dict[str, Any]:
    """Every registered policy by name."""
    _ensure_builtin()
    pm = plugins.plugin_manager()
    found: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for impl in pm.hook.rammer_register_policies.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or "?"

        def register(policy: Any, _plugin: str = plugin_name) -> None:
            name = getattr(policy, "name", None)
            if not isinstance(name, str) or not _NAME_RE.match(name) or not callable(getattr(policy, "schedule", None)):
                raise PluginError(f"plugin '{_plugin}' registered {policy!r}, which is not a scheduling policy "
                                  "(it needs a valid `name` and a `schedule(problem)` method)")
            if name in found:
                raise PluginError(f"policy '{name}' is registered twice: by plugin '{origin[name]}' and by "
                                  f"plugin '{_plugin}'")
            found[name] = policy
            origin[name] = _plugin

        impl.function(register=register)
    return found


def get_policy(name: str) -> Any:
    table = policies()
    if name not in table:
        raise RammerError(f"unknown scheduling policy '{name}'; known policies: {', '.join(sorted(table))}")
    return table[name]
