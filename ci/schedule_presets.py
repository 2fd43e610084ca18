"""Every full-size zoo model and torch.onnx export, scheduled on every device preset, wavefront and op-by-op.

    python ci/schedule_presets.py [--presets v100,a100,h100,mi250x,gc200,cortex-m7] [--torch] [--json F]

For each model and preset it does what ``rammer schedule --vdevice P`` does: it picks the rKernels of an
installed scheduling backend whose device kind matches the preset (the core rKernel families when there is
none), builds the scheduling problem, schedules it with the ``wavefront`` and ``op-by-op`` policies, verifies
both schedules (every rTask once, dependencies ordered, no deadlock, resources fit) and simulates them.  It
prints one row per model and preset with both makespans, and exits 1 if a schedule fails to build or verify,
or if, on a device with more than one vEU, a model with inter-operator parallelism (a wave holding ops that
do not depend on each other) gets a wavefront makespan that is not below op-by-op's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_sets import ZOO, graphs  # noqa: E402

PRESETS = "v100,a100,h100,mi250x,gc200,cortex-m7"


def _has_inter_op_parallelism(graph) -> bool:
    """Whether some depth of the DAG holds two ops: they depend on neither each other, so one wave can run both."""
    from rammer.schedule import op_predecessors

    preds = op_predecessors(graph)
    depth: list[int] = []
    for i in range(len(preds)):
        depth.append(1 + max((depth[p] for p in preds[i]), default=-1))
    by_depth: dict[int, int] = {}
    for d in depth:
        by_depth[d] = by_depth.get(d, 0) + 1
    return any(n > 1 for n in by_depth.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=ZOO)
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument("--torch", action="store_true", help="add the torch.onnx exports of tests/torch_models.py")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    from rammer.cli.schedule import backend_and_vdevice
    from rammer.errors import RammerError
    from rammer.schedule import build_problem, get_policy, simulate, verify

    rows, failures = [], []
    print("| model | preset | rKernels of | rTasks (wavefront) | wavefront us | op-by-op us | op-by-op / wavefront | "
          "inter-op parallelism | seconds |", flush=True)
    print("|---|---|---|---:|---:|---:|---:|---|---:|", flush=True)
    for name, graph in graphs(args.models, args.torch):
        parallel = _has_inter_op_parallelism(graph)
        for preset in args.presets.split(","):
            t0 = time.perf_counter()
            try:
                backend, vdevice = backend_and_vdevice(None, preset)
                problem = build_problem(graph, vdevice, backend)
                result = {}
                for policy in ("wavefront", "op-by-op"):
                    schedule = get_policy(policy).schedule(problem)
                    verify(schedule, graph)
                    result[policy] = (schedule.num_rtasks, simulate(schedule).makespan_us)
            except RammerError as exc:
                failures.append(f"{name} on {preset}: {exc}")
                print(f"| {name} | {preset} | FAILED: {str(exc).splitlines()[0]} |||||||", flush=True)
                continue
            wave, base = result["wavefront"][1], result["op-by-op"][1]
            row = {"model": name, "preset": preset, "kernels": backend.name if backend else "core",
                   "rtasks": result["wavefront"][0], "wavefront_us": wave, "op_by_op_us": base,
                   "parallel": parallel, "seconds": time.perf_counter() - t0}
            rows.append(row)
            if parallel and vdevice.num_veus > 1 and not wave < base:
                failures.append(f"{name} on {preset}: wavefront {wave:.1f} us is not below op-by-op {base:.1f} us")
            print(f"| {name} | {preset} | {row['kernels']} | {row['rtasks']} | {wave:.1f} | {base:.1f} | "
                  f"{base / wave:.2f}x | {'yes' if parallel else 'no'} | {row['seconds']:.1f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    for line in failures:
        print("FAIL:", line)
    print(f"{len(rows)} model x preset pairs scheduled and verified with both policies; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
