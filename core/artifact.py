"""Saved compiled models: ``CompiledModel.save(path)`` and ``rammer.load_compiled(path)``.

The file (``.rammer``) is a zip archive of plain data, never pickle, every
member stored uncompressed:

* ``manifest.json``: the format (:data:`FORMAT`), rammer's version, the
  backend and its artifact format, the backend's compatibility facts of the
  machine that compiled it (for ``cpu``: the vector ISA its tiles were sized
  for), the input shapes and options the model was compiled with, and the
  size and digest of every other member: a SHA-256 for small ones, a CRC-32
  per 4 MiB block for large ones (the weights; :mod:`rammer.block_crc` says
  why);
* the backend's own files (for ``cpu``: the task tables, constants,
  schedules and the part of the graph the program needs, in its compile-cache
  entry format);
* ``model.onnx``, the model as it was given, only for a backend whose program
  needs the graph re-imported to run (``ArtifactParts.needs_model``; the
  ``cpu`` program does not, so its files hold the weights once).

Loading checks the format version, every small member's digest, and that this
machine has the same compatibility facts, and refuses with a clear error
otherwise.  Large members are not read here: the backend reads each one by
its offset in the archive straight into the memory that uses it, checking its
block CRCs as it goes (:class:`rammer.block_crc.BlockChecked`).  The backend
rebuilds its executable from the data, which it validates as it would a cache
entry (bounds of every index it will follow); the model is neither compiled
nor imported again.  The digests catch corruption, not an adversary (who can
rewrite the manifest); safety against hostile files comes from the format
being data the loader checks, not code it runs.  Files of the earlier format
(``rammer.compiled/1``, which also held the whole ONNX model) are refused with
a message saying to save the model again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from . import plugins
from .atomic_file import atomic_write
from .backend import Backend
from .block_crc import BLOCK, BlockChecked, CheckFailed, block_crcs
from .errors import ModelLoadError, RammerError
from .frontend import load
from .frontend.source import read_model
from .ir import Graph

if TYPE_CHECKING:  # pragma: no cover
    from .api import CompiledModel

__all__ = ["FORMAT", "save_compiled", "read_compiled", "ArtifactError", "Loaded"]

FORMAT = "rammer.compiled/2"
MANIFEST = "manifest.json"
MODEL = "model.onnx"
#: Members of at least this many bytes are checked by block CRCs and read by offset, not into memory.
LARGE = 1 << 20


class ArtifactError(ModelLoadError):
    """A saved compiled model that cannot be loaded here (and why)."""


def _digest(data: Any) -> str:
    return hashlib.sha256(data).hexdigest()


def _rammer_version() -> str:
    try:
        return importlib.metadata.version("rammer")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "unknown"


def _describe(data: Any) -> dict[str, Any]:
    size = memoryview(data).nbytes
    if size >= LARGE:
        return {"size": size, "crc32": block_crcs(data, BLOCK), "block": BLOCK}
    return {"size": size, "sha256": _digest(data)}


def save_compiled(model: CompiledModel, path: str) -> str:
    """Write ``model`` to ``path`` (atomically, with the mode the umask gives); returns ``path``."""
    be = model.backend
    parts = be.export_artifact(model.executable)
    if parts is None:
        raise RammerError(f"backend '{be.name}' cannot save compiled models; compile again where it is needed")
    files: dict[str, Any] = {}
    if parts.needs_model:
        if model.source is None:
            raise RammerError("this model was compiled from an IR graph, not an ONNX model; compile it from its "
                              "ONNX file, bytes or ModelProto to save it")
        proto, _ = read_model(model.source)
        files[MODEL] = proto.SerializeToString()
    for name, data in parts.files.items():
        if name in (MANIFEST, MODEL) or "/" in name or name.startswith("."):
            raise RammerError(f"backend '{be.name}' exported a file named {name!r}, which is reserved or unsafe")
        files[name] = data
    manifest = {
        "format": FORMAT, "rammer": _rammer_version(), "backend": be.name, "backend_format": parts.format,
        "compat": dict(parts.compat),
        "input_shapes": {k: [int(d) for d in v] for k, v in (model.input_shapes or {}).items()},
        # the dims the ONNX model declares (fixed or dynamic), for the wrong-shape hint of the loaded model
        "declared_inputs": model.declared_input_dims(),
        "options": {k: v for k, v in model.options.items() if isinstance(v, (str, int, float, bool)) or v is None},
        "files": {name: _describe(data) for name, data in files.items()},
    }
    with atomic_write(path, "the compiled model") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            view = memoryview(data).cast("B")
            with z.open(info, "w", force_zip64=view.nbytes >= 1 << 31) as member:
                for i in range(0, view.nbytes, 1 << 24):
                    member.write(view[i:i + (1 << 24)])
    return path


def _data_offset(path: str, info: zipfile.ZipInfo) -> int:
    """Where a stored member's bytes start in the archive (after its local header)."""
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise ArtifactError(f"the local header of {info.filename} is damaged")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len


def _read(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The manifest, and every member: small ones as checked bytes, large ones as
    :class:`BlockChecked` ranges of the archive (checked as the backend reads them)."""
    if not os.path.isfile(path):
        raise ArtifactError(f"compiled model '{path}' does not exist")
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            if MANIFEST not in names:
                raise ArtifactError(f"'{path}' is not a saved rammer model (no {MANIFEST})")
            manifest = json.loads(z.read(MANIFEST))
            if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
                raise ArtifactError(f"'{path}': {MANIFEST} is malformed")
            fmt = manifest.get("format")
            if fmt != FORMAT:
                raise ArtifactError(f"'{path}' is in format {fmt!r}; this rammer reads {FORMAT!r} (compile the model "
                                    f"and save it again with this version: rammer compile MODEL.onnx -o {path})")
            files: dict[str, Any] = {}
            for name, info in manifest["files"].items():
                if name not in names:
                    raise ArtifactError(f"'{path}' lacks {name}, which its manifest lists")
                if not isinstance(info, dict):
                    raise ArtifactError(f"'{path}': {MANIFEST} is malformed")
                member = z.getinfo(name)
                if "crc32" in info:
                    if member.compress_type != zipfile.ZIP_STORED or member.file_size != info.get("size"):
                        raise ArtifactError(f"'{path}': {name} is compressed or not of its listed size")
                    files[name] = BlockChecked.checked(path, _data_offset(path, member), info.get("size"),
                                                       info.get("crc32"), info.get("block"), None, name)
                    continue
                data = z.read(name)
                if len(data) != info.get("size") or _digest(data) != info.get("sha256"):
                    raise ArtifactError(f"'{path}': {name} does not match its digest (the file is corrupt)")
                files[name] = data
    except ArtifactError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(f"'{path}' is not a readable saved rammer model ({type(exc).__name__}: {exc})") from None
    return manifest, files


@dataclass(frozen=True)
class Loaded:
    """What a saved model holds, ready to wrap in a ``CompiledModel``."""

    backend: Backend
    graph: Graph
    executable: Any
    options: dict[str, Any]
    input_shapes: dict[str, list[int]] | None
    #: The ONNX model's bytes, when the file holds them (backends that need it re-imported).
    source: bytes | None
    #: The dims the ONNX model declares per input (ints where fixed, a name or None where dynamic).
    declared_inputs: dict[str, list] | None = None


def read_compiled(path: str, backend: str | None = None) -> Loaded:
    """The saved model at ``path``, checked and rebuilt by its backend without compiling it again."""
    manifest, files = _read(path)
    name = manifest.get("backend")
    if backend is not None and backend != name:
        raise ArtifactError(f"'{path}' was compiled for backend '{name}', not '{backend}'")
    be = plugins.get_backend(name)
    if manifest.get("backend_format") != be.artifact_format():
        raise ArtifactError(f"'{path}' holds a '{name}' program in format {manifest.get('backend_format')!r}; this "
                            f"version of the backend reads {be.artifact_format()!r}: compile the model again")
    here = be.artifact_compat()
    saved: Mapping[str, Any] = manifest.get("compat", {})
    differ = {k: (saved.get(k), here.get(k)) for k in set(saved) | set(here) if saved.get(k) != here.get(k)}
    if differ:
        what = "; ".join(f"{k}: saved {a!r}, here {b!r}" for k, (a, b) in sorted(differ.items()))
        raise ArtifactError(f"'{path}' was compiled for another kind of machine ({what}); compile the model "
                            f"again on this one")
    shapes = manifest.get("input_shapes") or None
    source = files.pop(MODEL, None)
    if isinstance(source, BlockChecked):
        try:
            source = source.read(MODEL)
        except (CheckFailed, OSError) as exc:
            raise ArtifactError(f"'{path}': {exc}") from None
    graph = load(source, shapes) if source is not None else None
    options = dict(manifest.get("options") or {})
    try:
        if graph is not None:  # a backend that re-imports the model reads its files as bytes
            files = {k: v.read(k) if isinstance(v, BlockChecked) else v for k, v in files.items()}
        executable = be.import_artifact(graph, files, options)
    except ArtifactError:
        raise
    except (CheckFailed, OSError, ModelLoadError) as exc:
        raise ArtifactError(f"'{path}': {exc}") from None
    return Loaded(be, cast("Graph", getattr(executable, "graph", graph)), executable, options, shapes, source,
                  manifest.get("declared_inputs"))


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of a saved model (for ``rammer inspect``-style tools and tests)."""
    return _read(path)[0]
