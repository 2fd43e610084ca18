"""The plugin hooks of rammer (reference documentation).

A plugin is a module (or any object) with functions marked ``@hookimpl``
whose names match the specs below.  Plugins are found through the entry-point
group ``rammer.backends``; each entry point names a module::

    [project.entry-points."rammer.backends"]
    mybackend = "mypackage.rammer_plugin"

and that module implements one or more hooks::

    from rammer.hookspecs import hookimpl

    @hookimpl
    def rammer_register_backends(register):
        register(MyBackend())

Built-in backends are registered exactly the same way.  A hook function
whose name starts with ``rammer_`` but matches no spec is rejected when the
plugin is loaded.  The set of entry points that load can be narrowed with
the environment variable ``RAMMER_PLUGINS`` (comma-separated entry-point
names).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from .backend import Backend

PROJECT = "rammer"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def rammer_register_backends(register: Callable[[Backend], None]) -> None:
    """Register backends by calling ``register(backend)`` once per backend.

    ``backend`` is an instance of :class:`rammer.backend.Backend`.  Its
    ``name`` must be unique across all plugins and a valid identifier
    (letters, digits, ``_`` and ``-``); a duplicate is an error that names
    both plugins.  Registering must be cheap and must not fail when the
    backend's hardware or packages are absent: report that through
    ``Backend.availability()`` instead.
    """


@hookspec
def rammer_register_policies(register: Callable[[Any], None]) -> None:
    """Register scheduling policies (``--policy``) by calling ``register(policy)``.

    ``policy`` is an object with a unique ``name`` (letters, digits, ``_``,
    ``-``), a one-line ``description`` and a method
    ``schedule(problem: rammer.schedule.Problem) -> rammer.schedule.Schedule``
    (see :mod:`rammer.schedule.policies`; build the schedule with
    :class:`rammer.schedule.ScheduleBuilder`).  The built-in ``wavefront``,
    ``wavefront-fastest`` and ``op-by-op`` are registered through this hook
    by :mod:`rammer.schedule.builtin`.
    """


@hookspec
def rammer_register_rkernels(backend: str, register: Callable[[Any], None]) -> None:
    """Add rKernels for the backend named ``backend``.

    Called once per backend when its kernel table is built
    (``Backend.rkernel_families``), so third-party plugins can add kernels to
    existing backends.  ``register(kernel_family)`` takes an rKernel family
    as defined in :mod:`rammer.rtask`: an object with a ``name``, the
    ``op_types`` it handles (a frozenset, or None for any op) and
    ``candidates(node, graph, vdevice) -> list[RKernel]``.  Its candidates
    are offered next to the generic families' ones, and the scheduler
    picks among them by estimated (or profiled) ``duration_us``.
    """
