"""The plugin manager: one pluggy ``PluginManager`` holding every rammer plugin.

:func:`plugin_manager` loads every entry point of the ``rammer.backends`` group once (it is
idempotent), honouring the ``RAMMER_PLUGINS`` allow-list, and validates the hooks they implement.
This module knows nothing of what the hooks register, so :mod:`rammer.backend` (a backend's
rKernel families come through a hook) and :mod:`rammer.plugins` (the registered backends by name)
both build on it without importing each other.  :func:`generation` changes whenever the set of
plugins does, so what is collected from the hooks can be cached against it.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
from typing import Any

import pluggy

from . import hookspecs
from .errors import PluginError

ENTRY_POINT_GROUP = "rammer.backends"
ALLOW_ENV = "RAMMER_PLUGINS"

_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None
#: Bumped on every change of the plugin set (register, unregister, reset).
_generation = 0


def _allowed() -> set[str] | None:
    raw = os.environ.get(ALLOW_ENV)
    if raw is None:
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


def plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, loading entry points on first use."""
    global _pm
    with _lock:
        if _pm is not None:
            return _pm
        pm = pluggy.PluginManager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        allowed = _allowed()
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if allowed is not None and ep.name not in allowed:
                continue
            if pm.get_plugin(ep.name) is not None:
                continue  # the same distribution seen twice on sys.path
            try:
                module = ep.load()
            except Exception as exc:  # a broken third-party plugin must not hide the others' errors
                raise PluginError(
                    f"plugin '{ep.name}' ({ep.value}) failed to import: {type(exc).__name__}: {exc}. "
                    f"Fix or uninstall it, or leave it out with {ALLOW_ENV}=<names>."
                ) from exc
            _register(pm, module, ep.name)
        _pm = pm
        return pm


def _register(pm: pluggy.PluginManager, plugin: Any, name: str) -> None:
    unknown = [
        attr
        for attr in dir(plugin)
        if attr.startswith("rammer_") and callable(getattr(plugin, attr)) and not hasattr(hookspecs, attr)
    ]
    if unknown:
        raise PluginError(
            f"plugin '{name}' implements unknown hook(s) {', '.join(unknown)}; "
            f"known hooks: {', '.join(h for h in dir(hookspecs) if h.startswith('rammer_'))}"
        )
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except (ValueError, pluggy.PluginValidationError) as exc:
        raise PluginError(f"plugin '{name}' could not be registered: {exc}") from exc


def generation() -> int:
    """A number that changes whenever a plugin is registered or unregistered, or the manager reset."""
    return _generation


def register_plugin(plugin: Any, name: str) -> None:
    """Register a plugin object directly (tests, notebooks, embedding apps)."""
    global _generation
    with _lock:
        pm = plugin_manager()
        if pm.get_plugin(name) is not None:
            raise PluginError(f"a plugin named '{name}' is already registered")
        _register(pm, plugin, name)
        _generation += 1  # collect again, including the new plugin


def unregister_plugin(name: str) -> None:
    global _generation
    with _lock:
        pm = plugin_manager()
        plugin = pm.get_plugin(name)
        if plugin is not None:
            pm.unregister(plugin)
        _generation += 1


def reset() -> None:
    """Forget loaded plugins (tests use this after changing RAMMER_PLUGINS)."""
    global _pm, _generation
    with _lock:
        _pm = None
        _generation += 1
