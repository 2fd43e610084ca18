"""The memory-ordering check the CPU emulation cannot make: in the PTX of the persistent kernel,
the signal (``atomicAdd(&counters[b], 1)``) must follow a device-scope fence in its basic block
(the block's writes are visible before the counter moves), and the wait loop must be followed by
a fence before the next block barrier (reads after the wait see the producer's writes).

``nvcc -arch=sm_90 -ptx`` builds the PTX without a GPU; :func:`signal_fence_problems` reads it.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

from rammer.errors import RammerError

__all__ = ["ptx_of", "signal_fence_problems"]

_FENCE = re.compile(r"^\s*(membar\.gl|fence\.(sc|acq_rel)\.gpu)\s*;")
_SIGNAL = re.compile(r"^\s*(atom|red)\.global\.add\.[us]32\s+(%r\d+,\s*)?\[[^\]]+\],\s*1;")
_POLL = re.compile(r"^\s*atom\.global\.add\.[us]32\s+%r\d+,\s*\[[^\]]+\],\s*0;")
_LABEL = re.compile(r"^\$?\w+:")
_BRANCH = re.compile(r"^\s*(@%p\d+\s+)?bra(\.uni)?\s")
_BARRIER = re.compile(r"^\s*(bar\.sync|barrier\.sync)")


def ptx_of(source: str, arch: str = "sm_90") -> str:
    """The PTX nvcc makes of ``source`` (raises :class:`RammerError` when nvcc fails or is absent)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "program.cu"), os.path.join(tmp, "program.ptx")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        try:
            proc = subprocess.run(["nvcc", f"-arch={arch}", "-ptx", src, "-o", out], capture_output=True, text=True,
                                  timeout=600)
        except FileNotFoundError as exc:
            raise RammerError("nvcc is not on PATH (the PTX check needs the CUDA toolkit)") from exc
        if proc.returncode != 0:
            raise RammerError(f"nvcc -ptx failed:\n{proc.stderr[-3000:]}")
        with open(out, encoding="utf-8") as f:
            return f.read()


def _entry_lines(ptx: str, kernel: str) -> list[str]:
    start = ptx.find(f".entry {kernel}(")
    if start < 0:
        raise RammerError(f"no .entry {kernel} in the PTX")
    body = ptx[start:]
    end = body.find("\n}\n")
    return body[:end if end >= 0 else len(body)].splitlines()


def signal_fence_problems(ptx: str, kernel: str = "rammer_main") -> list[str]:
    """What is wrong with the fences around the signal and the waits of ``kernel`` ([] when right)."""
    lines = _entry_lines(ptx, kernel)
    problems: list[str] = []
    signals = [i for i, line in enumerate(lines) if _SIGNAL.match(line)]
    if not signals:
        problems.append("no signal (atomic add of 1 on a global counter) in the kernel")
    for i in signals:
        j = i - 1
        while j >= 0 and not (_FENCE.match(lines[j]) or _LABEL.match(lines[j]) or _BRANCH.match(lines[j])):
            j -= 1
        if j < 0 or not _FENCE.match(lines[j]):
            problems.append(f"the signal at PTX line {i + 1} ({lines[i].strip()}) has no membar.gl/fence before it "
                            f"in its basic block")
    polls = [i for i, line in enumerate(lines) if _POLL.match(line)]
    for i in polls:
        j = i + 1
        while j < len(lines) and not (_FENCE.match(lines[j]) or _BARRIER.match(lines[j])):
            j += 1
        if j >= len(lines) or not _FENCE.match(lines[j]):
            problems.append(f"the wait at PTX line {i + 1} is not followed by a fence before the next barrier")
    return problems
