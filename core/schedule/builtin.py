"""The built-in scheduling policies, registered through the plugin hook like
any third-party policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..hookspecs import hookimpl
from .opbyop import OpByOpPolicy
from .wavefront import WavefrontPolicy


@hookimpl
def rammer_register_policies(register: Callable[[Any], None]) -> None:
    register(WavefrontPolicy())
    register(WavefrontPolicy(fastest_only=True))
    register(OpByOpPolicy())
