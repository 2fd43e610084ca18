"""Gantt charts of simulated schedules (matplotlib, imported lazily)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..errors import RammerError
from .schedule import Schedule
from .simulate import SimResult


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is a test/bench extra
        raise RammerError("plotting needs matplotlib: pip install matplotlib") from None
    return plt


def plot_gantt(items: Sequence[tuple[Schedule, SimResult]], path: str, title: str = "",
               color_by: str = "op_type") -> str:
    """Draw one Gantt panel (vEU x time) per ``(schedule, simulation)`` and
    save the figure to ``path``.

    rTasks are coloured per op type (``"op_type"``, the default, with a
    legend) or per operator (``color_by="op"``; neighbouring ops get different
    colours); barrier rTasks are thin dark bars.  Every panel has the same
    time axis (the longest makespan), so panels compare at a glance, and vEU
    ticks are whole numbers.  A ``path`` without an extension gets ``.png``;
    returns the path written.
    """
    if not os.path.splitext(path)[1]:
        path += ".png"
    if color_by not in ("op", "op_type"):
        raise RammerError(f"color_by must be 'op' or 'op_type', not {color_by!r}")
    plt = _pyplot()
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    height = max(2.5, min(8.0, 0.06 * max(len(s.programs) for s, _ in items) + 1.5))
    fig, axes = plt.subplots(len(items), 1, figsize=(12, height * len(items)), squeeze=False, sharex=True)
    longest = max([sim.makespan_us for _, sim in items] + [1e-9])
    cmap = plt.get_cmap("tab20")
    for ax, (schedule, sim) in zip(axes[:, 0], items):
        n = schedule.num_rtasks
        veu = np.empty(n, dtype=np.int64)
        for v, prog in enumerate(schedule.programs):
            ids = np.asarray(prog, dtype=np.int64)
            veu[ids[ids < n]] = v
        op = schedule.rtask_op
        if color_by == "op":
            key = op % 20
            legend = []
        else:
            types = sorted({o.op_type for o in schedule.ops})
            index = {t: i for i, t in enumerate(types)}
            key = np.array([index[schedule.ops[o].op_type] for o in range(len(schedule.ops))], dtype=np.int64)[op] % 20
            legend = [Patch(color=cmap(index[t] % 20), label=t) for t in types[:20]]
        x0, x1 = sim.start_us, sim.finish_us
        boxes = np.stack([np.stack([x0, veu - 0.4], 1), np.stack([x1, veu - 0.4], 1),
                          np.stack([x1, veu + 0.4], 1), np.stack([x0, veu + 0.4], 1)], 1)
        ax.add_collection(PolyCollection(list(boxes), facecolors=cmap(key), edgecolors="none"))
        if sim.barrier_spans.size:
            b = sim.barrier_spans
            # A thin bar over the barrier's own cost; its waiting shows as a gap.
            x0b = np.maximum(b[:, 1], b[:, 2] - schedule.barrier_cost_us)
            bars = np.stack([np.stack([x0b, b[:, 0] - 0.12], 1), np.stack([b[:, 2], b[:, 0] - 0.12], 1),
                             np.stack([b[:, 2], b[:, 0] + 0.12], 1), np.stack([x0b, b[:, 0] + 0.12], 1)], 1)
            ax.add_collection(PolyCollection(list(bars), facecolors="0.15", edgecolors="none"))
        ax.set_xlim(0, longest)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-0.5, len(schedule.programs) - 0.5)
        ax.invert_yaxis()
        ax.set_ylabel("vEU")
        ax.set_title(f"{schedule.policy}: makespan {sim.makespan_us / 1000:.3f} ms, utilization "
                     f"{sim.utilization:.0%}, {sim.barriers} barriers, {sim.rtasks} rTasks", fontsize=10)
        if legend and ax is axes[0, 0]:  # one legend, outside the plot, for every panel
            ax.legend(handles=legend + [Patch(color="0.15", label="barrier")], loc="upper left",
                      bbox_to_anchor=(1.005, 1.0), fontsize=7, ncol=1 if len(legend) < 12 else 2, frameon=False)
    axes[-1, 0].set_xlabel("time (us)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
