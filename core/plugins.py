"""The plugin host: one loader for backends, policies and rKernels.

:func:`plugin_manager` loads every entry point of the ``rammer.backends``
group once (it is idempotent), honouring the ``RAMMER_PLUGINS`` allow-list,
and validates the hooks they implement.  :func:`backends` collects the
registered backends by name.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import threading
from typing import Any

import pluggy

from . import hookspecs
from .backend import Backend
from .errors import BackendUnavailableError, PluginError

ENTRY_POINT_GROUP = "rammer.backends"
ALLOW_ENV = "RAMMER_PLUGINS"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")

_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None
_backends: dict[str, Backend] | None = None
_backend_origin: dict[str, str] = {}


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


def register_plugin(plugin: Any, name: str) -> None:
    """Register a plugin object directly (tests, notebooks, embedding apps)."""
    global _backends
    with _lock:
        pm = plugin_manager()
        if pm.get_plugin(name) is not None:
            raise PluginError(f"a plugin named '{name}' is already registered")
        _register(pm, plugin, name)
        _backends = None  # collect again, including the new plugin


def unregister_plugin(name: str) -> None:
    global _backends
    with _lock:
        pm = plugin_manager()
        plugin = pm.get_plugin(name)
        if plugin is not None:
            pm.unregister(plugin)
        _backends = None


def backends() -> dict[str, Backend]:
    """Every registered backend by name (available or not)."""
    global _backends
    with _lock:
        if _backends is not None:
            return dict(_backends)
        pm = plugin_manager()
        found: dict[str, Backend] = {}
        origin: dict[str, str] = {}
        for impl in pm.hook.rammer_register_backends.get_hookimpls():
            plugin_name = pm.get_name(impl.plugin) or "?"

            def register(backend: Backend, _plugin: str = plugin_name) -> None:
                if not isinstance(backend, Backend):
                    raise PluginError(
                        f"plugin '{_plugin}' registered {backend!r}, which is not a rammer.backend.Backend"
                    )
                if not _NAME_RE.match(backend.name or ""):
                    raise PluginError(
                        f"plugin '{_plugin}' registered a backend with invalid name {backend.name!r} "
                        "(use letters, digits, '_' and '-', starting with a letter)"
                    )
                if backend.name in found:
                    raise PluginError(
                        f"backend '{backend.name}' is registered twice: by plugin '{origin[backend.name]}' "
                        f"and by plugin '{_plugin}'; uninstall one or narrow {ALLOW_ENV}"
                    )
                found[backend.name] = backend
                origin[backend.name] = _plugin

            impl.function(register=register)
        _backends = found
        _backend_origin.clear()
        _backend_origin.update(origin)
        return dict(found)


def backend_origin(name: str) -> str:
    backends()
    return _backend_origin.get(name, "?")


def default_backend_name() -> str:
    """The available backend with the highest ``default_priority``."""
    candidates = [b for b in backends().values() if b.availability().ok]
    if not candidates:
        raise BackendUnavailableError("no rammer backend is available; run `rammer backends` to see why")
    return max(candidates, key=lambda b: (b.default_priority, b.name)).name


def get_backend(name: str | None, compile_only: bool = False) -> Backend:
    """The backend called ``name`` (the default one for None), checked available.  With
    ``compile_only`` (writing source with ``emit``), a backend that emits source is returned even
    where it cannot run (a GPU backend on a machine without the GPU): its programs still compile."""
    name = name or default_backend_name()
    table = backends()
    if name not in table:
        raise BackendUnavailableError(
            f"unknown backend '{name}'; registered backends: {', '.join(sorted(table)) or 'none'} "
            "(`rammer backends` lists them)"
        )
    backend = table[name]
    avail = backend.availability()
    if not avail.ok and not (compile_only and backend.capabilities.emits_source):
        raise BackendUnavailableError(f"backend '{name}' is not available here: {avail.reason}")
    return backend


def reset() -> None:
    """Forget loaded plugins (tests use this after changing RAMMER_PLUGINS)."""
    global _pm, _backends
    with _lock:
        _pm = None
        _backends = None
