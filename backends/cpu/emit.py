"""``--emit DIR``: the generated driver, the schedules as JSON and the report.

Emitting is all-or-nothing: every file is first written whole into a fresh
hidden folder.  When ``DIR`` does not exist yet that folder is renamed to
``DIR``; otherwise each file replaces its namesake in ``DIR`` by an atomic
rename, so ``DIR`` never holds a half-written file, and on any error nothing
in it has changed (or, past the first rename, only whole new files did).

Model names reach these files only as JSON strings (``json.dumps`` escapes
them) and, in ``program.py``, through :mod:`rammer.codegen.names` (see
:func:`.codegen.program_source`).
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
from typing import Any

import numpy as np

from rammer.errors import CompileError

from .compiled import CompiledSegment

_SCHEDULE = re.compile(r"schedule\d*\.json")


def emitted_files(compiled: Any) -> dict[str, bytes]:
    """The files ``--emit`` writes (name -> contents)."""
    files: dict[str, bytes] = {"program.py": compiled.source.encode("utf-8")}
    for k, sched in enumerate(compiled.schedules):
        name = f"schedule{k}.json" if len(compiled.schedules) > 1 else "schedule.json"
        files[name] = json.dumps(sched.to_dict(), separators=(",", ":")).encode()
    files["report.json"] = json.dumps(compiled.program.report, indent=2, default=str).encode()
    p = compiled.program
    arrays = {"T": p.T, "X": p.X, "R": p.R}
    for k, seg in enumerate(s for s in p.steps if isinstance(s, CompiledSegment)):
        arrays[f"starts{k}"] = seg.starts
        arrays[f"ends{k}"] = seg.ends
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    files["tables.npz"] = buf.getvalue()
    files["consts.bin"] = np.ascontiguousarray(p.const_blob, dtype=np.uint8).tobytes()
    return files


def _write(path: str, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def emit(folder: str, compiled: Any) -> list[str]:
    """Write the generated program, one schedule JSON per segment, the task tables, constants
    and report into ``folder``; returns the paths written."""
    files = emitted_files(compiled)  # everything is generated before anything is written
    try:
        return _publish(folder, files)
    except OSError as exc:
        raise CompileError(f"--emit could not write to {folder} ({type(exc).__name__}: {exc}); no file there is "
                           "half-written; choose a writable folder with free space") from None


def _publish(folder: str, files: dict[str, bytes]) -> list[str]:
    folder = os.path.abspath(folder)
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    fresh = not os.path.lexists(folder)
    tmp = os.path.join(folder if not fresh else parent,
                       f".rammer-emit-{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(tmp)
    try:
        for name, data in files.items():
            _write(os.path.join(tmp, name), data)
        if fresh:
            try:
                os.rename(tmp, folder)
                tmp = ""
            except OSError:
                if not os.path.isdir(folder):
                    raise
                fresh = False  # someone made the folder meanwhile: replace file by file
        if not fresh:
            for name in files:
                os.replace(os.path.join(tmp, name), os.path.join(folder, name))
            # schedule JSON of an earlier emit with another number of segments would mislead
            for old in os.listdir(folder):
                if _SCHEDULE.fullmatch(old) and old not in files:
                    os.unlink(os.path.join(folder, old))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return [os.path.join(folder, name) for name in files]
