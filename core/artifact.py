"""Saved compiled models: ``CompiledModel.save(path)`` and ``rammer.load_compiled(path)``.

The file (``.rammer``) is a zip archive of plain data, never pickle:

* ``manifest.json``: the format (:data:`FORMAT`), rammer's version, the
  backend and its artifact format, the backend's compatibility facts of the
  machine that compiled it (for ``cpu``: the vector ISA its tiles were sized
  for), the input shapes and options the model was compiled with, and the
  size and SHA-256 of every other file;
* ``model.onnx``: the model as it was given (re-imported on load: the
  frontend and the backend's graph passes are deterministic, so the program
  matches the graph again);
* the backend's own files (for ``cpu``: the task tables, constants and
  schedules of its compile-cache entry format).

Loading checks the format version, every file's digest, and that this
machine has the same compatibility facts, and refuses with a clear error
otherwise.  Then the backend rebuilds its executable from the data, which it
validates as it would a cache entry (bounds of every index it will follow);
the model is not compiled again.  The digests catch corruption, not an
adversary (who can rewrite the manifest); safety against hostile files comes
from the format being data the loader checks, not code it runs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from . import plugins
from .atomic_file import atomic_write
from .backend import Backend
from .errors import ModelLoadError, RammerError
from .frontend import load
from .frontend.source import read_model
from .ir import Graph

if TYPE_CHECKING:  # pragma: no cover
    from .api import CompiledModel

__all__ = ["FORMAT", "save_compiled", "read_compiled", "ArtifactError", "Loaded"]

FORMAT = "rammer.compiled/1"
MANIFEST = "manifest.json"
MODEL = "model.onnx"


class ArtifactError(ModelLoadError):
    """A saved compiled model that cannot be loaded here (and why)."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rammer_version() -> str:
    try:
        return importlib.metadata.version("rammer")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "unknown"


def save_compiled(model: CompiledModel, path: str) -> str:
    """Write ``model`` to ``path`` (atomically); returns ``path``."""
    be = model.backend
    parts = be.export_artifact(model.executable)
    if parts is None:
        raise RammerError(f"backend '{be.name}' cannot save compiled models; compile again where it is needed")
    if model.source is None:
        raise RammerError("this model was compiled from an IR graph, not an ONNX model; compile it from its "
                          "ONNX file, bytes or ModelProto to save it")
    proto, _ = read_model(model.source)
    files: dict[str, bytes] = {MODEL: proto.SerializeToString()}
    for name, data in parts.files.items():
        if name in (MANIFEST, MODEL) or "/" in name or name.startswith("."):
            raise RammerError(f"backend '{be.name}' exported a file named {name!r}, which is reserved or unsafe")
        files[name] = data
    manifest = {
        "format": FORMAT, "rammer": _rammer_version(), "backend": be.name, "backend_format": parts.format,
        "compat": dict(parts.compat),
        "input_shapes": {k: [int(d) for d in v] for k, v in (model.input_shapes or {}).items()},
        "options": {k: v for k, v in model.options.items() if isinstance(v, (str, int, float, bool)) or v is None},
        "files": {name: {"size": len(data), "sha256": _digest(data)} for name, data in files.items()},
    }
    with atomic_write(path, "the compiled model") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        for name, data in files.items():
            z.writestr(name, data)
    return path


def _read(path: str) -> tuple[dict[str, Any], dict[str, bytes]]:
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
                raise ArtifactError(f"'{path}' is in format {fmt!r}; this rammer reads {FORMAT!r} (save it again "
                                    f"with this version)")
            files = {}
            for name, info in manifest["files"].items():
                if name not in names:
                    raise ArtifactError(f"'{path}' lacks {name}, which its manifest lists")
                data = z.read(name)
                if len(data) != info.get("size") or _digest(data) != info.get("sha256"):
                    raise ArtifactError(f"'{path}': {name} does not match its digest (the file is corrupt)")
                files[name] = data
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
    source: bytes


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
    graph = load(files[MODEL], shapes)
    options = dict(manifest.get("options") or {})
    executable = be.import_artifact(graph, {k: v for k, v in files.items() if k != MODEL}, options)
    return Loaded(be, getattr(executable, "graph", graph), executable, options, shapes, files[MODEL])


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of a saved model (for ``rammer inspect``-style tools and tests)."""
    return _read(path)[0]
