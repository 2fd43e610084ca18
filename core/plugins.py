"""The registered backends by name, from the plugin manager (:mod:`rammer.plugin_host`).

:func:`backends` collects the backends every plugin registers (checked: a
:class:`~rammer.backend.Backend`, a valid name, no name twice) and caches them
until the set of plugins changes; :func:`get_backend` picks one and checks it is
available.  The loader itself (:func:`plugin_manager`, :func:`register_plugin`,
:func:`reset`...) lives in :mod:`rammer.plugin_host` and is re-exported here.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import threading

import pluggy

from .backend import Backend
from .errors import BackendUnavailableError, PluginError
from .plugin_host import (
    ALLOW_ENV,
    ENTRY_POINT_GROUP,
    generation,
    plugin_manager,
    register_plugin,
    reset,
    unregister_plugin,
)

__all__ = ["ALLOW_ENV", "ENTRY_POINT_GROUP", "backend_origin", "backends", "default_backend_name", "get_backend",
           "plugin_manager", "register_plugin", "reset", "unregister_plugin"]

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")

_lock = threading.RLock()
#: The backends collected from the hooks, with the plugin manager and generation they came from.
_backends: tuple[pluggy.PluginManager, int, dict[str, Backend]] | None = None
_backend_origin: dict[str, str] = {}


def backends() -> dict[str, Backend]:
    """Every registered backend by name (available or not)."""
    global _backends
    with _lock:
        pm, gen = plugin_manager(), generation()
        if _backends is not None and _backends[0] is pm and _backends[1] == gen:
            return dict(_backends[2])
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
        _backends = (pm, gen, found)
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
    named = _backend_of_its_own_plugin(name)
    table = {name: named} if named is not None else backends()
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


#: Backends got from the entry point of their own name alone (see _backend_of_its_own_plugin).
_own_plugin: dict[str, Backend] = {}


def _backend_of_its_own_plugin(name: str) -> Backend | None:
    """Backend ``name`` from the plugin (entry point) of the same name alone, while no plugin has
    been registered, unregistered or reset at run time (``generation() == 0``); None otherwise,
    and then :func:`backends` loads every plugin.

    Loading every plugin imports every backend's compiler (the ``cuda`` plugin's alone took
    0.3-0.5 s), which a process that gets a ``cpu`` model from the compile cache never uses.  What
    this skips is the check that no other plugin registers a backend of the same name; listing
    the backends (``rammer backends``, :func:`backends`) still makes it."""
    if generation() != 0:
        return None
    with _lock:
        found = _own_plugin.get(name)
        if found is not None:
            return found
        allowed = os.environ.get(ALLOW_ENV)
        if allowed is not None and name not in {p.strip() for p in allowed.split(",")}:
            return None
        # rammer's own plugins first: listing every installed distribution's entry points took
        # 0.05-0.17 s (hundreds of distributions)
        try:
            own = importlib.metadata.distribution("rammer").entry_points
        except importlib.metadata.PackageNotFoundError:
            own = importlib.metadata.EntryPoints(())
        points = [ep for ep in own if ep.group == ENTRY_POINT_GROUP and ep.name == name]
        if not points:
            points = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if len({ep.value for ep in points}) != 1:
            return None
        try:
            module = points[0].load()
        except Exception:  # backends() reports it, naming the plugin
            return None
        hook = getattr(module, "rammer_register_backends", None)
        if hook is None:
            return None
        registered: list[Backend] = []
        hook(register=registered.append)
        for backend in registered:
            if isinstance(backend, Backend) and backend.name == name:
                _own_plugin[name] = backend
                return backend
        return None
