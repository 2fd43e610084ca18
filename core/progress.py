"""Progress of long compiles, on a terminal.

A first compile can take tens of seconds (a backend's kernels are
JIT-compiled once, then cached).  ``rammer.compile`` opens a
:func:`compile_progress` scope; a backend reports what it is doing with
:func:`stage` and :func:`step`, without knowing whether anyone listens.
The line is drawn on stderr only when it is a terminal and the compile has
already taken :data:`SHOW_AFTER_S` (a cached compile stays silent), and is
erased at the end; elsewhere (logs, CI, notebooks) nothing is printed and the
stages go to the ``rammer`` logger at debug level.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TextIO

__all__ = ["compile_progress", "stage", "step", "SHOW_AFTER_S"]

#: Seconds before the line first appears.
SHOW_AFTER_S = 0.5
_WIDTH = 24
_log = logging.getLogger("rammer")


class _Line:
    def __init__(self, what: str, stream: TextIO, enabled: bool):
        self.what = what
        self.stream = stream
        self.enabled = enabled
        self.start = time.perf_counter()
        self.stage = ""
        self.shown = 0
        self.drawn = False

    def update(self, stage: str | None = None, done: int | None = None, total: int | None = None,
               label: str = "") -> None:
        if stage is not None:
            self.stage = stage
            _log.debug("compiling %s: %s", self.what, stage)
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        if elapsed < SHOW_AFTER_S:
            return
        bar = ""
        if done is not None and total:
            filled = int(round(_WIDTH * min(done, total) / total))
            bar = f" [{'#' * filled}{'.' * (_WIDTH - filled)}] {done}/{total}"
        line = f"rammer: compiling {self.what}: {self.stage}{bar} {label} {elapsed:.0f}s"[:118]
        pad = " " * max(0, self.shown - len(line))
        self.stream.write("\r" + line + pad)
        self.stream.flush()
        self.shown = len(line)
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()


_current: ContextVar[_Line | None] = ContextVar("rammer_compile_progress", default=None)


@contextlib.contextmanager
def compile_progress(what: str, enabled: bool | None = None, stream: TextIO | None = None) -> Iterator[None]:
    """Report the stages of compiling ``what`` while the block runs (see the module docstring).
    Inside another scope (a caller that draws its own line) the outer one is kept."""
    if _current.get() is not None:
        yield
        return
    out = stream if stream is not None else sys.stderr
    if enabled is None:
        enabled = bool(getattr(out, "isatty", lambda: False)())
    line = _Line(what, out, enabled)
    token = _current.set(line)
    try:
        yield
    finally:
        _current.reset(token)
        line.close()


def stage(name: str) -> None:
    """The compile entered stage ``name`` ("lowering", "scheduling", "compiling kernels"...)."""
    line = _current.get()
    if line is not None:
        line.update(stage=name)


def step(done: int, total: int, label: str = "") -> None:
    """``done`` of ``total`` units of the current stage are finished."""
    line = _current.get()
    if line is not None:
        line.update(done=done, total=total, label=label)
