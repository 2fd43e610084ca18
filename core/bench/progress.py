"""A one-line progress bar on stderr (no dependency).

It draws only when stderr is a terminal, so logs and CI output stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None, width: int = 28):
        self.total = max(int(total), 1)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.width = width
        self.start = time.perf_counter()
        self._last_len = 0

    def advance(self, steps: int = 1, label: str = "") -> None:
        self.done = min(self.total, self.done + steps)
        self.show(label)

    def show(self, label: str = "") -> None:
        if not self.enabled:
            return
        frac = self.done / self.total
        filled = int(round(frac * self.width))
        elapsed = time.perf_counter() - self.start
        eta = ""
        if 0 < self.done < self.total:
            eta = f" eta {elapsed / self.done * (self.total - self.done):4.0f}s"
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {elapsed:4.0f}s{eta} {label}"
        line = line[:110]
        pad = max(0, self._last_len - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._last_len = len(line)

    def close(self) -> None:
        if self.enabled and self._last_len:
            self.stream.write("\r" + " " * self._last_len + "\r")
            self.stream.flush()
            self._last_len = 0

    def __enter__(self) -> Progress:
        self.show()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
