"""Writing a file so that no reader ever sees it half-written: a temporary file in the same folder,
then ``os.replace``.  On any failure the temporary file is removed and nothing is left behind.
The file gets the mode a plain ``open(path, "w")`` would give it (0o666 less the umask), not the
0o600 of the temporary file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import IO

from .errors import RammerError

__all__ = ["atomic_write"]


def _umask() -> int:
    """The process's umask (read by setting it, so set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str, what: str, binary: bool = True) -> Iterator[IO]:
    """An open file whose contents become ``path`` when the block ends without an exception.

    ``what`` names the file in the error raised when its folder does not exist."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise RammerError(f"cannot write {what} to '{path}': folder '{folder}' does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp", prefix=".rammer-")
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
