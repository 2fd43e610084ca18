"""PNG charts of a results document: latency per model and backend, and
speedup over the baseline.

Horizontal grouped bars (one group per model and batch, one colour per
backend) keep long model names readable; latency uses a log axis because
backends differ by orders of magnitude.  A cell without a time says why
(``n/a``, ``WRONG``, ``error``) where its bar would be, so a missing bar is
never mistaken for a fast one.
"""

from __future__ import annotations

import os
from typing import Any

from .machine import describe
from .report import cell_index, fmt_speedup, fmt_time, rows, series, series_label

_STATUS_TEXT = {"wrong": "WRONG", "n/a": "n/a", "error": "error", "unchecked": "unchecked", "pending": "?"}


def _pyplot() -> Any:
    import matplotlib  # deferred: optional, only for charts

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt  # deferred: optional, only for charts

    return plt


def _subtitle(doc: dict[str, Any]) -> str:
    machines = doc.get("machines", {})
    if len(machines) == 1:
        name, facts = next(iter(machines.items()))
        return f"{name}: {describe(facts)}"
    return f"{len(machines)} machines: " + ", ".join(machines)


def _layout(n_rows: int, n_series: int) -> tuple[float, float]:
    """Bar height and figure height (inches) for a readable chart."""
    bar = 0.8 / max(n_series, 1)
    height = 1.6 + n_rows * max(0.9, 0.28 * n_series + 0.25)
    return bar, height


def _grouped_bars(doc: dict[str, Any], cols: list[tuple[str, str]], value_of: Any, xlabel: str, title: str,
                  path: str, log_base: float, ref_line: float | None, fmt: Any, tick_unit: str) -> str:
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator  # deferred: optional, only for charts

    # One colour per column across both charts, so a backend looks the same in each.
    palette = plt.get_cmap("tab10").colors
    colour_of = {c: palette[i % len(palette)] for i, c in enumerate(series(doc))}
    idx = cell_index(doc)
    row_keys = rows(doc)
    bar, height = _layout(len(row_keys), len(cols))
    fig, ax = plt.subplots(figsize=(10, height))
    values = [v for r in row_keys for b, m in cols
              if (v := value_of(idx.get((r[0], r[1], b, m)))) is not None]
    lo = min(values) if values else 1.0
    if ref_line is not None:
        lo = min(lo, ref_line)  # keep the reference line in view
    for j, (backend, machine) in enumerate(cols):
        for i, (model, batch) in enumerate(row_keys):
            cell = idx.get((model, batch, backend, machine))
            y = i + (j - (len(cols) - 1) / 2) * bar
            value = value_of(cell)
            label = series_label(doc, backend, machine) if i == 0 else None
            color = colour_of[(backend, machine)]
            if value is None:
                # Keep the legend entry even when the first row has no value.
                ax.barh(y, 0, height=bar * 0.9, color=color, label=label)
                if cell is not None:
                    why = _STATUS_TEXT.get(cell["status"], cell["status"]) if cell["status"] != "ok" else "-"
                    ax.text(lo / (log_base ** 0.9), y, f" {why} ({backend})", va="center", fontsize=7,
                            color="#b00020" if cell["status"] in ("wrong", "error") else "#555555")
                continue
            err, right = None, value
            if cell is not None and cell.get("min_s") is not None and value_of is _latency_ms:
                err = [[value - cell["min_s"] * 1e3], [cell["max_s"] * 1e3 - value]]
                right = cell["max_s"] * 1e3  # the label goes past the whisker, not over it
            ax.barh(y, value, height=bar * 0.9, color=color, label=label, xerr=err,
                    error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333333"})
            ax.text(right * log_base ** 0.03, y, fmt(value), va="center", fontsize=7)
    if values:  # with no positive value (every cell n/a) a log axis has nothing to scale
        ax.set_xscale("log", base=log_base)
    if values:
        whiskers = [c["max_s"] * 1e3 for c in idx.values() if value_of is _latency_ms and c.get("max_s")]
        hi = max(values + whiskers + ([ref_line] if ref_line is not None else []))
        ax.set_xlim(lo / log_base, hi * log_base ** 1.2)
        # Plain numbers on the axis (0.1, 1, 10 ms; 0.25x, 1x, 4x), not powers.
        ax.xaxis.set_major_locator(LogLocator(base=log_base))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick(v) + tick_unit))
    if ref_line is not None:
        ax.axvline(ref_line, color="#333333", linewidth=1, linestyle="--")
    ax.set_yticks(range(len(row_keys)))
    ax.set_yticklabels([f"{m}\nbatch {b}" for m, b in row_keys], fontsize=9)
    ax.invert_yaxis()  # first model on top, as in the tables
    ax.set_xlabel(xlabel)
    ax.set_title(f"{title}\n{_subtitle(doc)}", fontsize=10)
    ax.grid(axis="x", which="major", alpha=0.3)
    ax.legend(loc="best", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tick(v: float) -> str:
    """0.01, 0.12, 1, 10, 100, 1000: plain numbers, two significant digits below 1."""
    if v >= 10:
        return f"{v:,.0f}"
    return f"{v:g}" if v >= 1 else f"{v:.2g}"


def _latency_ms(cell: dict[str, Any] | None) -> float | None:
    if cell is None or cell["status"] != "ok" or not cell.get("median_s"):
        return None
    return cell["median_s"] * 1e3


def _speedup(cell: dict[str, Any] | None) -> float | None:
    if cell is None or cell["status"] != "ok":
        return None
    return cell.get("speedup")


def _fmt_ms(v: float) -> str:
    return fmt_time(v / 1e3)


def write_charts(doc: dict[str, Any], out_dir: str) -> list[str]:
    """Write latency.png and speedup.png into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    cols = series(doc)
    paths = [_grouped_bars(doc, cols, _latency_ms, "median latency (ms, log scale; whiskers: min to max)",
                           "Latency per model and backend (shorter is faster)",
                           os.path.join(out_dir, "latency.png"), 10.0, None, _fmt_ms, "")]
    baseline = doc.get("baseline")
    others = [c for c in cols if c[0] != baseline]
    if baseline and others:
        paths.append(_grouped_bars(doc, others, _speedup,
                                   f"speedup over {baseline} on the same machine (log scale; right of the "
                                   "dashed line is faster)",
                                   f"Speedup over {baseline} (longer is faster)",
                                   os.path.join(out_dir, "speedup.png"), 2.0, 1.0, fmt_speedup, "x"))
    return paths
