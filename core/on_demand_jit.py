"""numba's compiler on demand, for core code that is hot only on large inputs.

A function written once in numba's subset runs as plain Python on small inputs and is compiled
(with numba's on-disk cache) the first time an input is large enough to pay for it.  Importing
numba costs about 0.5 s of CPU: the cpu backend pays it anyway, but a GPU or IPU compile of a small
model would spend more on that import than on its whole schedule walk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["OnDemandJit"]


class OnDemandJit:
    """``fn`` called as Python, or compiled by numba when the caller says the input is large."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.py_func = fn
        self._compiled: Callable[..., Any] | None = None

    def __call__(self, *args: Any, large: bool) -> Any:
        if not large:
            return self.py_func(*args)
        if self._compiled is None:
            from numba import njit  # numba's import (~0.5 s) only once an input is large enough
            self._compiled = njit(cache=True, nogil=True)(self.py_func)
        return self._compiled(*args)
