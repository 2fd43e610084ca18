"""``rammer schedule``: build, verify and simulate an rTask schedule."""

from __future__ import annotations

import argparse
import time

from ..errors import RammerError
from .common import add_backend_arg, add_model_args, fmt_us, load_graph, table

BASELINE = "op-by-op"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "schedule", help="schedule a model's rTasks on a vDevice and simulate it against op-by-op",
        description="Build a static rTask schedule with a policy, verify it, and print its simulated makespan, "
                    "utilization and barrier count next to the op-by-op baseline.",
    )
    add_model_args(p, required=False)
    add_backend_arg(p)
    p.add_argument("--vdevice", default=None, metavar="PRESET",
                   help="vDevice preset or .json file (default: the backend's first preset; --list shows them)")
    p.add_argument("--policy", default="wavefront", help="scheduling policy (default wavefront; --list shows them)")
    p.add_argument("--json", metavar="OUT", help="write the schedule, with simulated figures, to this JSON file")
    p.add_argument("--plot", metavar="OUT", help="draw a Gantt chart (vEU x time) of both schedules to this image")
    p.add_argument("--color-by", choices=["op", "op_type"], default="op_type",
                   help="Gantt colours: per op type, with a legend (default), or per op")
    p.add_argument("--no-verify", action="store_true", help="skip verifying the schedule")
    p.add_argument("--list", action="store_true", help="list vDevice presets and policies, then exit")
    p.set_defaults(func=run)


def _list() -> int:
    from ..schedule import policies
    from ..vdevice import PRESETS, get_preset

    rows = [[name, get_preset(name).num_veus, get_preset(name).kind, data.get("description", "")]
            for name, data in PRESETS.items()]
    print(table(rows, ["vdevice", "vEUs", "kind", "description"]))
    print()
    rows = [[name, getattr(p, "description", "")] for name, p in sorted(policies().items())]
    print(table(rows, ["policy", "description"]))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()
    from .. import plugins
    from ..schedule import build_problem, get_policy, simulate, verify

    policy = get_policy(args.policy)
    baseline = get_policy(BASELINE) if args.policy != BASELINE else None
    graph, label = load_graph(args)
    backend = plugins.get_backend(args.backend)
    vdevice = backend.vdevice(args.vdevice) if args.vdevice else backend.vdevice()
    start = time.perf_counter()
    problem = build_problem(graph, vdevice, backend)
    kernels_s = time.perf_counter() - start
    print(f"model {label}: {len(graph.nodes)} nodes; backend {backend.name}; vDevice {vdevice.summary()}")
    print(f"rKernel candidates: {sum(len(r.kernels) for r in problem.rops)} for {len(problem.rops)} ops "
          f"({kernels_s:.2f} s)")
    results = []
    for pol in [policy] + ([baseline] if baseline else []):
        start = time.perf_counter()
        schedule = pol.schedule(problem)
        took = time.perf_counter() - start
        if pol is policy and not args.no_verify:
            verify(schedule, graph)
        results.append((schedule, simulate(schedule), took))
    rows = []
    for schedule, sim, took in results:
        launches = sim.kernel_launches if schedule.options.get("launch_per_op") else 1
        rows.append([schedule.policy, fmt_us(sim.makespan_us * 1e-6), f"{sim.utilization:.1%}", sim.barriers,
                     sim.rtasks, launches, f"{took:.2f} s"])
    print(table(rows, ["policy", "makespan", "utilization", "barriers", "rTasks", "launches", "scheduled in"]))
    if baseline:
        ours, base = results[0][1].makespan_us, results[1][1].makespan_us
        if ours > 0:
            print(f"simulated speed-up of {policy.name} over {BASELINE}: {base / ours:.2f}x")
    if not args.no_verify:
        print(f"verified: every rTask once, dependencies ordered, no deadlock, resources fit ({policy.name})")
    if args.json:
        schedule, sim, _ = results[0]
        try:
            schedule.to_json(args.json, sim.summary())
        except OSError as exc:
            raise RammerError(f"cannot write {args.json}: {exc.strerror}") from None
        print(f"wrote {args.json}")
    if args.plot:
        from ..schedule.plot import plot_gantt

        try:
            written = plot_gantt([(s, r) for s, r, _ in results], args.plot,
                       title=f"{label} on {vdevice.name} ({vdevice.num_veus} vEUs)", color_by=args.color_by)
        except OSError as exc:
            raise RammerError(f"cannot write {args.plot}: {exc.strerror}") from None
        print(f"wrote {written}")
    return 0
