"""Writing results: ``results.json`` (everything), ``results.csv`` (one row per
cell) and ``results.md`` (tables that paste into docs).

The results document::

    {"schema": "rammer-bench/1", "config": {...}, "baseline": "onnxruntime",
     "machines": {NAME: {cpu_model, physical_cores, gpus, versions, ...}},
     "runners": {NAME: {kind, description, available, reason, rtol, atol}},
     "cells": [{model, batch, backend, kind, machine, status, reason,
                median_s, min_s, max_s, runs, compile_s, max_abs_err,
                rtol, atol, speedup}, ...]}

``status`` is one of ``ok`` (timed), ``wrong`` (outputs differ from the
reference: never timed), ``n/a`` (the runner is unavailable, with the
reason), ``error`` (compile or run failed: the first line of the message)
and ``unchecked`` (the reference itself could not run the model, so
nothing was timed).  ``speedup`` is the baseline's median over the cell's,
on the same machine: above 1 is faster than the baseline.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from typing import Any

from ..errors import RammerError
from .machine import describe
from .matrix import SCHEMA

CSV_COLUMNS = ["model", "batch", "backend", "kind", "machine", "status", "median_ms", "min_ms", "max_ms",
               "mean_ms", "std_ms", "p90_ms", "p99_ms",
               "runs", "speedup", "compile_s", "max_abs_err", "rtol", "atol", "reason"]


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms" if seconds * 1e3 >= 100 else f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3g} s"


def fmt_speedup(x: float) -> str:
    """2.80x, 0.21x, 0.0034x: two decimals, or two significant digits when tiny."""
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.2g}x"


def series(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(backend, machine) columns in first-seen order."""
    return list(dict.fromkeys((c["backend"], c["machine"]) for c in doc["cells"]))


def series_label(doc: dict[str, Any], backend: str, machine: str) -> str:
    return f"{backend} @ {machine}" if len(doc.get("machines", {})) > 1 else backend


def rows(doc: dict[str, Any]) -> list[tuple[str, int]]:
    return list(dict.fromkeys((c["model"], c["batch"]) for c in doc["cells"]))


def cell_index(doc: dict[str, Any]) -> dict[tuple[str, int, str, str], dict[str, Any]]:
    return {(c["model"], c["batch"], c["backend"], c["machine"]): c for c in doc["cells"]}


def short_cell(cell: dict[str, Any] | None, baseline: str | None) -> str:
    """What a summary-table cell shows."""
    if cell is None:
        return ""
    status = cell["status"]
    sim = (cell.get("device_metrics") or {}).get("simulated_latency_s")
    if status == "ok" and isinstance(sim, (int, float)):
        return f"{fmt_time(sim)} (simulated)"
    if status == "approx":
        return f"{fmt_time(cell['median_s'])} (quantized, err {cell.get('max_abs_err') or 0:.2g})"
    if status == "ok":
        text = fmt_time(cell["median_s"])
        if cell["backend"] == baseline:
            return f"{text} (baseline)"
        if cell.get("speedup") is not None:
            return f"{text} ({fmt_speedup(cell['speedup'])})"
        return text
    if status == "wrong":
        err = cell.get("max_abs_err")
        return "WRONG" + (f" (err {err:.2g})" if err is not None else "")
    return status


def _atomic_write(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".bench-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, allow_nan=False) + "\n"


def to_csv(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for c in doc["cells"]:
        ms = {k: (None if c.get(k + "_s") is None else round(c[k + "_s"] * 1e3, 6))
              for k in ("median", "min", "max", "mean", "std", "p90", "p99")}
        w.writerow([c["model"], c["batch"], c["backend"], c["kind"], c["machine"], c["status"],
                    ms["median"], ms["min"], ms["max"], ms["mean"], ms["std"], ms["p90"], ms["p99"], c["runs"],
                    None if c.get("speedup") is None else round(c["speedup"], 4),
                    None if c.get("compile_s") is None else round(c["compile_s"], 4),
                    None if c.get("max_abs_err") is None else f"{c['max_abs_err']:.3g}",
                    c["rtol"], c["atol"], c["reason"]])
    return buf.getvalue()


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: list[str], body: list[list[str]], align: list[str]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in body]
    return out


def summary_table(doc: dict[str, Any]) -> list[str]:
    """Models down, backends across: median latency and speedup over the baseline."""
    cols = series(doc)
    idx = cell_index(doc)
    baseline = doc.get("baseline")
    headers = ["model", "batch"] + [series_label(doc, b, m) for b, m in cols]
    body = [[model, str(batch)] + [short_cell(idx.get((model, batch, b, m)), baseline) for b, m in cols]
            for model, batch in rows(doc)]
    return _md_table(headers, body, ["l", "r"] + ["r"] * len(cols))


def details_table(doc: dict[str, Any]) -> list[str]:
    headers = ["model", "batch", "backend", "machine", "status", "median", "min", "max", "mean ± std", "p90",
               "p99", "runs", "speedup", "compile", "max abs err", "device metrics", "note"]
    body = []
    for c in doc["cells"]:
        body.append([c["model"], str(c["batch"]), c["backend"], c["machine"], c["status"],
                     fmt_time(c["median_s"]), fmt_time(c["min_s"]), fmt_time(c["max_s"]),
                     "-" if c.get("mean_s") is None else f"{fmt_time(c['mean_s'])} ± {fmt_time(c.get('std_s') or 0)}",
                     fmt_time(c.get("p90_s")), fmt_time(c.get("p99_s")), str(c["runs"]),
                     "-" if c.get("speedup") is None else fmt_speedup(c["speedup"]),
                     "-" if c.get("compile_s") is None else f"{c['compile_s']:.2f} s",
                     "-" if c.get("max_abs_err") is None else f"{c['max_abs_err']:.2g}",
                     ", ".join(f"{k}={v}" for k, v in (c.get("device_metrics") or {}).items()) or "-",
                     c["reason"] or ""])
    return _md_table(headers, body, ["l", "r", "l", "l", "l"] + ["r"] * 10 + ["l", "l"])


def machines_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    for name, facts in doc.get("machines", {}).items():
        v = facts.get("versions", {})
        pkgs = ", ".join(f"{k} {v[k]}" for k in ("rammer", "numpy", "numba", "onnxruntime", "torch", "cupy")
                         if v.get(k))
        lines.append(f"- `{name}`: {describe(facts)}; Python {facts.get('python')}; {pkgs}")
    return lines


def to_markdown(doc: dict[str, Any], title: str = "Benchmark results") -> str:
    cfg = doc.get("config", {})
    baseline = doc.get("baseline")
    threads = cfg.get("threads") or "library defaults"
    lines = [f"## {title}", ""]
    lines.append("Machines:")
    lines += machines_lines(doc)
    lines.append("")
    if "repeat" in cfg:
        lines.append(f"Median latency of {cfg['repeat']} timed runs after {cfg.get('warmup', 0)} warm-up run(s) "
                     f"(threads: {threads}); runners alternate run by run"
                     + (", each run starting on idle cores (--settle: the previous runner's spinning threads "
                        "waited out)." if cfg.get("settle", False) else ", back to back (the default; --settle "
                        "waits for idle cores before each run)."))
    lines.append("Every result was checked against the `reference` backend before it was timed: "
                 "`WRONG` means outputs outside the runner's tolerance, `n/a` an unavailable runner, "
                 "`error` a failure to compile or run (see the details table).")
    if baseline:
        lines.append(f"In brackets: speedup over `{baseline}` on the same machine (above 1 is faster).")
    lines += [""] + summary_table(doc) + ["", "<details><summary>Details (min, max, compile time, "
                                                "errors, reasons)</summary>", ""]
    lines += details_table(doc) + ["", "</details>", ""]
    return "\n".join(lines)


def write_all(doc: dict[str, Any], out_dir: str) -> dict[str, str]:
    """Write results.json, results.csv and results.md into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"json": os.path.join(out_dir, "results.json"), "csv": os.path.join(out_dir, "results.csv"),
             "md": os.path.join(out_dir, "results.md")}
    _atomic_write(paths["json"], to_json(doc))
    _atomic_write(paths["csv"], to_csv(doc))
    _atomic_write(paths["md"], to_markdown(doc))
    return paths


def load_results(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise RammerError(f"cannot read '{path}': {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise RammerError(f"'{path}' is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise RammerError(f"'{path}' is not a rammer bench results.json (schema {SCHEMA})")
    return doc
