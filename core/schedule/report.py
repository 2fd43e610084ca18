"""The scheduler benchmark table of docs/benchmarks.md.

    python -m rammer.schedule.report [--vdevice v100] [MODEL ...]
    python -m rammer.schedule.report --presets a100,h100,mi250x,gc200 [MODEL ...]

The first form schedules each zoo model with ``wavefront``,
``wavefront-fastest`` and ``op-by-op``, verifies every schedule, simulates
it, and prints a Markdown table next to the Rammer paper's figures (V100,
batch 1).  The second prints wavefront / op-by-op makespans per preset.
"""

from __future__ import annotations

import argparse
import sys
import time

from ..frontend import load
from ..vdevice import get_preset
from . import build_problem, get_policy, simulate, verify

MODELS = ["lstm-tc", "seq2seq", "nasnet", "resnext", "alexnet", "deepspeech2"]
POLICIES = ["wavefront", "wavefront-fastest", "op-by-op"]

#: Rammer (OSDI'20) on a V100, batch 1: (Rammer ms, best baseline ms).
PAPER_MS = {
    "lstm-tc": (4.73, 9.51), "seq2seq": (3.66, 9.38), "nasnet": (1.74, 2.81),
    "resnext": (4.63, 10.52), "alexnet": (0.96, 0.94), "deepspeech2": (4.69, 6.75),
}


def measure(model: str, vdevice: str, check: bool = True) -> dict:
    """Figures of one model: per policy makespan, utilization, barriers,
    rTasks and scheduling time (kernel candidates + policy)."""
    from .. import zoo

    graph = load(zoo.build(model))
    start = time.perf_counter()
    problem = build_problem(graph, get_preset(vdevice))
    kernels_s = time.perf_counter() - start
    row: dict = {"model": model, "nodes": len(graph.nodes), "kernels_s": kernels_s}
    for name in POLICIES:
        start = time.perf_counter()
        schedule = get_policy(name).schedule(problem)
        row[f"{name}_s"] = time.perf_counter() - start
        if check:
            verify(schedule, graph)
        sim = simulate(schedule)
        row[name] = sim
    return row


def markdown(rows: list[dict]) -> str:
    head = ("| model | nodes | wavefront (ms) | wavefront-fastest (ms) | op-by-op (ms) | speed-up | "
            "utilization wf / obo | barriers wf / obo | rTasks wf | scheduling wf (s) | "
            "paper: Rammer / best baseline (ms) |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in rows:
        wf, fast, obo = r["wavefront"], r["wavefront-fastest"], r["op-by-op"]
        paper = PAPER_MS.get(r["model"])
        lines.append(
            f"| {r['model']} | {r['nodes']} | {wf.makespan_us / 1e3:.3f} | {fast.makespan_us / 1e3:.3f} | "
            f"{obo.makespan_us / 1e3:.3f} | {obo.makespan_us / wf.makespan_us:.2f}x | "
            f"{wf.utilization:.0%} / {obo.utilization:.0%} | {wf.barriers} / {obo.barriers} | {wf.rtasks} | "
            f"{r['kernels_s'] + r['wavefront_s']:.2f} | "
            + (f"{paper[0]} / {paper[1]} |" if paper else "- |"))
    return "\n".join(lines)


def preset_table(models: list[str], presets: list[str]) -> str:
    """wavefront / op-by-op simulated makespans (ms) of each model on each preset."""
    from .. import zoo

    lines = ["| model | " + " | ".join(presets) + " |", "|---|" + "---|" * len(presets)]
    for model in models:
        graph = load(zoo.build(model))
        cells = []
        for preset in presets:
            problem = build_problem(graph, get_preset(preset))
            wf, obo = (simulate(get_policy(p).schedule(problem)).makespan_us / 1e3 for p in ("wavefront", "op-by-op"))
            cells.append(f"{wf:.3g} / {obo:.3g} ({obo / wf:.1f}x)")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
        print(f"done {model}", file=sys.stderr)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rammer.schedule.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--vdevice", default="v100")
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--presets", metavar="P1,P2,...",
                        help="instead: a table of wavefront / op-by-op makespans per preset (not verified)")
    args = parser.parse_args(argv)
    if args.presets:
        print(preset_table(args.models, args.presets.split(",")))
        return 0
    rows = []
    for model in args.models:
        rows.append(measure(model, args.vdevice, check=not args.no_verify))
        print(f"done {model}", file=sys.stderr)
    print(markdown(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
