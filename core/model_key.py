"""What identifies a compiled model without importing it: the model's bytes and how it is imported.

A backend's compile cache can be looked up before the ONNX frontend runs (a cache
hit then skips reading, checking, importing and rewriting the model) when its
key comes from cheap facts: a digest of the model's bytes (and of its external
data files), the input shapes it is bound to, the import limits and the ml
lowering strategy.  The frontend is deterministic given those, so equal facts
mean an equal graph.

Hashing a 100 MB file costs about 0.16 s with BLAKE2b, and 0.07 s with SHA-256 on
a CPU with SHA instructions (x86's SHA-NI, Arm's SHA2: AMD Zen, Intel since Ice
Lake; 0.33 s without them), so the digest is SHA-256 where the CPU says it has
them and BLAKE2b elsewhere (:func:`digest_algorithm`; the key names it, so keys
made on two kinds of CPU never meet).  Either is more than the whole rest of a
cache hit given the model as bytes, so the digest of a model
*file* is remembered in a small memo keyed by the file's path and its stat
stamp (size, mtime, ctime, inode, device), as git's index and ccache's direct
mode do.  ctime cannot be set from user space and changes on every write, so a
file whose stamp is unchanged has unchanged bytes, with one exception the memo
excludes: a file changed within the timestamp granularity of its last stat
("racy", in git's words).  A digest is remembered only for files whose mtime
and ctime are at least :data:`RACY_S` seconds old; younger files are hashed on
every compile.  A memo entry carries its own digest, so a damaged one is
ignored (and rewritten), never believed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import onnx
from onnx import external_data_helper

from .frontend.limits import Limits, resolve_limits
from .frontend.source import ModelSource

__all__ = ["model_key", "source_digest", "digest_algorithm", "RACY_S"]

#: Files changed less than this long ago (seconds) are not memoised (see the module's text).
RACY_S = 2.0
#: Read files in blocks of this many bytes while hashing them.
_BLOCK = 1 << 22


_ALGORITHM: list[str] = []


def _cpu_has_sha() -> bool:
    """Whether Linux reports SHA-256 instructions for this CPU (False where it cannot tell)."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            text = f.read(1 << 16)
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith((b"flags", b"Features")):
            found = set(line.partition(b":")[2].split())
            return b"sha_ni" in found or b"sha2" in found
    return False


def digest_algorithm() -> str:
    """The hashlib name of the model digest's algorithm on this machine (see the module's text)."""
    if not _ALGORITHM:
        _ALGORITHM.append("sha256" if _cpu_has_sha() else "blake2b")
    return _ALGORITHM[0]


def _new_hash() -> Any:
    name = digest_algorithm()
    return hashlib.sha256() if name == "sha256" else hashlib.blake2b(digest_size=32)


def _named(h: Any) -> str:
    """``h``'s digest, named by its algorithm (keys made with the two never meet)."""
    return f"{digest_algorithm()}:{h.hexdigest()}"


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _hash_file(path: str, h: Any) -> os.stat_result:
    """Feed ``path``'s bytes to ``h``; its stat as it was before the read (a change during the
    read shows as a different stamp next time)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        while True:
            block = f.read(_BLOCK)
            if not block:
                break
            h.update(block)
    return st


def _external_files(path: str) -> list[str]:
    """The external data files a model refers to (relative to its folder), sorted."""
    with open(path, "rb") as f:
        data = f.read()
    if b"location" not in data:  # no external data reference can be in the file
        return []
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:
        return []  # the frontend will say what is wrong with the file
    found: set[str] = set()
    for t in external_data_helper._get_all_tensors(model):
        if external_data_helper.uses_external_data(t):
            found.update(e.value for e in t.external_data if e.key == "location")
    return sorted(found)


def _memo_path(memo_dir: str, path: str) -> str:
    return os.path.join(memo_dir, hashlib.blake2b(path.encode(), digest_size=16).hexdigest() + ".json")


def _memo_body_digest(body: Mapping[str, Any]) -> str:
    return hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=16).hexdigest()


def _read_memo(memo_dir: str, path: str) -> str | None:
    """The remembered digest of ``path``, if its files' stamps are those remembered."""
    try:
        with open(_memo_path(memo_dir, path), "rb") as f:
            memo = json.loads(f.read(1 << 16))
        body = {k: v for k, v in memo.items() if k != "check"}
        if memo.get("check") != _memo_body_digest(body) or body.get("path") != path:
            return None
        folder = os.path.dirname(path)
        for name, stamp in body["files"]:
            if _stamp(os.stat(os.path.join(folder, name) if name else path)) != stamp:
                return None
        return str(body["digest"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _write_memo(memo_dir: str, path: str, digest: str, files: list[tuple[str, os.stat_result]]) -> None:
    now = time.time_ns()
    if any(now - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_S * 1e9 for _, st in files):
        return  # racy: a change within the stamp's granularity could go unseen
    body = {"path": path, "digest": digest, "files": [[name, _stamp(st)] for name, st in files]}
    data = json.dumps(dict(body, check=_memo_body_digest(body)), sort_keys=True).encode()
    try:
        os.makedirs(memo_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo_dir, prefix=".memo-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, _memo_path(memo_dir, path))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # the memo saves time only; without it the file is hashed again next time


def source_digest(source: ModelSource, memo_dir: str | None = None) -> str | None:
    """A digest of the model's bytes (and its external data files'); None for a source that is
    not a path, bytes or ModelProto, or a path that cannot be read (the frontend then says why)."""
    h = _new_hash()
    if isinstance(source, onnx.ModelProto):
        h.update(b"bytes:")  # as the same bytes given as a file or as bytes
        h.update(source.SerializeToString(deterministic=True))
        return _named(h)
    if isinstance(source, (bytes, bytearray, memoryview)):
        h.update(b"bytes:")
        h.update(source)
        return _named(h)
    if not isinstance(source, (str, os.PathLike)):
        return None
    try:
        path = os.path.realpath(os.fspath(source))
        if not os.path.isfile(path):
            return None
        if memo_dir:
            known = _read_memo(memo_dir, path)
            if known is not None:
                return known
        h.update(b"bytes:")
        files = [("", _hash_file(path, h))]
        folder = os.path.dirname(path)
        for name in _external_files(path):
            target = os.path.realpath(os.path.join(folder, name))
            if not os.path.isfile(target):
                return None  # the frontend names the missing file
            h.update(b"\0external:" + name.encode() + b"\0")
            files.append((name, _hash_file(target, h)))
    except (OSError, ValueError):
        return None
    digest = _named(h)
    if memo_dir:
        _write_memo(memo_dir, path, digest, files)
    return digest


def model_key(source: ModelSource, input_shapes: Mapping[str, Sequence[int]] | None,
              limits: Limits | Mapping[str, int] | None, import_options: Mapping[str, Any],
              memo_dir: str | None = None) -> str | None:
    """The key of the graph the frontend makes of ``source`` with these settings; None when the
    source cannot be keyed this way (the caller then imports it and keys the graph)."""
    digest = source_digest(source, memo_dir)
    if digest is None:
        return None
    try:
        facts = {
            "model": digest,
            "input_shapes": None if input_shapes is None else
            {str(k): [int(d) for d in v] for k, v in sorted(input_shapes.items())},
            "limits": asdict(resolve_limits(limits)),
            "import": {str(k): repr(v) for k, v in sorted(import_options.items())},
            "onnx": onnx.__version__,
        }
    except Exception:  # malformed shapes or limits: the frontend gives the error
        return None
    return hashlib.blake2b(json.dumps(facts, sort_keys=True).encode(), digest_size=20).hexdigest()
