"""Large files checked block by block as they are read into the memory that uses them.

The weights of a model are most of the bytes a compile cache entry or a saved
model holds.  Verifying them with SHA-256 costs 0.33 s per 100 MB on this
project's machines (no SHA instructions), more than a whole cache hit may take;
a CRC-32 per block costs 0.04 s and catches what these digests are for:
corruption (torn writes, truncation, bit flips, a file edited in place), with a
miss probability of 2**-32 per damaged block and none for bursts up to 32 bits.
They are not a defence against an adversary, who could rewrite the manifest
that lists them as easily.  Each block is checked on the bytes as they landed
in the destination, so what is checked is exactly what is used, even if the
file changes while it is read.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["BLOCK", "block_crcs", "BlockChecked", "CheckFailed"]

#: Bytes per CRC-32.
BLOCK = 1 << 22


class CheckFailed(ValueError):
    """The bytes read do not match their CRCs (or the file is not what it should be)."""


def block_crcs(data: Any, block: int = BLOCK) -> list[int]:
    """The CRC-32 of every ``block`` bytes of ``data`` (bytes or a contiguous array)."""
    view = memoryview(data).cast("B")
    return [zlib.crc32(view[i:i + block]) for i in range(0, len(view), block)]


@dataclass(frozen=True)
class BlockChecked:
    """``size`` bytes of the file ``path`` from ``offset``, with the CRC-32 of each block."""

    path: str
    offset: int
    size: int
    crcs: tuple[int, ...]
    block: int = BLOCK
    #: The file must be exactly this long (None: at least offset + size, e.g. inside an archive).
    file_size: int | None = None

    @staticmethod
    def checked(path: str, offset: int, size: Any, crcs: Any, block: Any, file_size: int | None,
                what: str) -> BlockChecked:
        """One from a manifest's values, which must be consistent."""
        if (not isinstance(size, int) or size < 0 or not isinstance(crcs, Sequence) or not isinstance(block, int)
                or block <= 0 or len(crcs) != -(-size // block) or not all(isinstance(c, int) for c in crcs)):
            raise CheckFailed(f"the manifest gives no size and block CRCs for {what}")
        return BlockChecked(path, offset, size, tuple(crcs), block, file_size)

    def read_into(self, out: np.ndarray, what: str) -> None:
        """Read the bytes into ``out`` (``size`` bytes, C-contiguous), checking every block."""
        if out.nbytes != self.size:
            raise CheckFailed(f"{what} holds {self.size} bytes where {out.nbytes} are expected")
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise CheckFailed(f"{what} is not a regular file")
            if self.file_size is not None and st.st_size != self.file_size:
                raise CheckFailed(f"{what} has {st.st_size} bytes, the manifest says {self.file_size}")
            if st.st_size < self.offset + self.size:
                raise CheckFailed(f"{what} is truncated")
            view = out.data.cast("B")
            for k, crc in enumerate(self.crcs):
                lo = k * self.block
                hi = min(lo + self.block, self.size)
                done = lo
                while done < hi:
                    n = os.preadv(fd, [view[done:hi]], self.offset + done)
                    if n <= 0:
                        raise CheckFailed(f"{what} changed while it was read")
                    done += n
                if zlib.crc32(view[lo:hi]) != crc:
                    raise CheckFailed(f"{what} does not match its CRC-32 in the manifest (block {k})")
        finally:
            os.close(fd)

    def read(self, what: str) -> bytes:
        out = np.empty(self.size, np.uint8)
        self.read_into(out, what)
        return out.tobytes()
