"""Joining results from several machines into one cross-hardware matrix.

Each cell keeps the machine it was measured on; the columns of the joined
tables and charts are "backend @ machine".  Speedups are recomputed against
the baseline measured on the *same* machine, since a ratio across machines
mixes the hardware with the software being compared.
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import RammerError
from .matrix import SCHEMA, add_speedups


def merge_results(docs: list[tuple[str, dict[str, Any]]], baseline: str | None = None,
                  warn: Any = None) -> dict[str, Any]:
    """Merge ``(source path, results document)`` pairs, later ones winning on identical cells."""
    if not docs:
        raise RammerError("nothing to merge: give one or more results.json files")
    machines: dict[str, dict[str, Any]] = {}
    runners: dict[str, dict[str, Any]] = {}
    cells: dict[tuple[str, int, str, str], dict[str, Any]] = {}
    sources = []
    baselines = []
    for path, doc in docs:
        for name, facts in doc.get("machines", {}).items():
            if name in machines and machines[name].get("cpu_model") != facts.get("cpu_model"):
                raise RammerError(
                    f"two different machines are both called '{name}' ({path} and an earlier file); "
                    "rerun one of them with --machine-name NAME"
                )
            machines.setdefault(name, facts)
        for name, info in doc.get("runners", {}).items():
            runners.setdefault(name, info)
        for cell in doc.get("cells", []):
            key = (cell["model"], cell["batch"], cell["backend"], cell["machine"])
            if key in cells and warn:
                warn(f"{path}: replaces the earlier result for {key[0]} batch {key[1]} on "
                     f"{key[2]} @ {key[3]}")
            cells[key] = copy.deepcopy(cell)
        sources.append({"path": path, "config": doc.get("config", {}), "elapsed_s": doc.get("elapsed_s")})
        if doc.get("baseline"):
            baselines.append(doc["baseline"])
    if baseline is None:
        distinct = list(dict.fromkeys(baselines))
        if len(distinct) > 1:
            raise RammerError(f"the files use different baselines ({', '.join(distinct)}); choose one with --baseline")
        baseline = distinct[0] if distinct else None
    merged_cells = list(cells.values())
    if baseline is not None and not any(c["backend"] == baseline for c in merged_cells):
        raise RammerError(f"baseline '{baseline}' appears in none of the files")
    add_speedups(merged_cells, baseline)
    return {
        "schema": SCHEMA,
        "config": {"merged_from": sources},
        "baseline": baseline,
        "machines": machines,
        "runners": runners,
        "cells": merged_cells,
    }
