"""Matrix definitions: TOML files (``ci/bench-matrix.toml``) and model keywords.

A matrix file has one table per named matrix::

    [matrix.standard]
    models = ["lstm-tc", "nasnet"]          # zoo names, .onnx paths, or "zoo" / "zoo-small"
    backends = ["reference", "cpu", "onnxruntime", "torch"]
    batch = [1]
    repeat = 10
    baseline = "onnxruntime"

Command-line options override the file's values.
"""

from __future__ import annotations

import os
from typing import Any

import tomllib

from .. import zoo
from ..errors import RammerError

#: Keys a matrix table may have, and their types.
_KEYS: dict[str, type] = {
    "models": list, "backends": list, "batch": list, "repeat": int, "warmup": int,
    "threads": int, "baseline": str, "seed": int, "description": str, "settle": bool,
}

#: Model keywords: every full-size zoo model, or every ``-small`` one.
ALL_FULL = "zoo"
ALL_SMALL = "zoo-small"


def load_matrix(path: str, name: str | None) -> dict[str, Any]:
    """The matrix table ``name`` of the TOML file ``path`` (its only one when None)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise RammerError(f"cannot read matrix file '{path}': {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RammerError(f"matrix file '{path}' is not valid TOML: {exc}") from None
    tables = doc.get("matrix")
    if not isinstance(tables, dict) or not tables:
        raise RammerError(f"matrix file '{path}' has no [matrix.NAME] table")
    if name is None:
        if len(tables) != 1:
            raise RammerError(f"matrix file '{path}' defines {', '.join(tables)}; choose one with --matrix NAME")
        name = next(iter(tables))
    if name not in tables:
        raise RammerError(f"matrix file '{path}' has no matrix '{name}' (it has: {', '.join(tables)})")
    table = tables[name]
    for key, value in table.items():
        if key not in _KEYS:
            raise RammerError(f"matrix '{name}' in '{path}': unknown key '{key}' (known: {', '.join(_KEYS)})")
        if not isinstance(value, _KEYS[key]) or (isinstance(value, bool) and _KEYS[key] is not bool):
            raise RammerError(f"matrix '{name}' in '{path}': '{key}' must be a {_KEYS[key].__name__}")
    # Model paths in the file are relative to the file, like any config.
    base = os.path.dirname(os.path.abspath(path))
    models = [m if not m.endswith(".onnx") or os.path.isabs(m) else os.path.join(base, m)
              for m in table.get("models", [])]
    return {**table, "models": models, "name": name}


def expand_models(names: list[str]) -> list[str]:
    """Replace the keywords ``zoo`` and ``zoo-small``; check that every other name exists."""

    entries = zoo.list_models()
    known = {e.name for e in entries}
    out: list[str] = []
    for name in names:
        if name == ALL_FULL:
            out += [e.name for e in entries if not e.small]
        elif name == ALL_SMALL:
            out += [e.name for e in entries if e.small]
        elif name in known or os.path.isfile(name):
            out.append(name)
        else:
            raise RammerError(
                f"model '{name}' is neither a zoo model nor an existing file "
                f"(zoo: {', '.join(sorted(known))}; keywords: {ALL_FULL}, {ALL_SMALL})"
            )
    # Keep the first occurrence of each, in order.
    return list(dict.fromkeys(out))


def split_list(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def split_ints(text: str, what: str) -> list[int]:
    try:
        return [int(p) for p in split_list(text)]
    except ValueError:
        raise RammerError(f"{what}: expected comma-separated integers, got {text!r}") from None
