"""``rammer schedule``: build, verify and simulate an rTask schedule."""

from __future__ import annotations

import argparse
import time

from .. import plugins
from ..backend import Backend
from ..errors import RammerError
from ..schedule import build_problem, get_policy, policies, simulate, verify
from ..schedule.plot import plot_gantt
from ..vdevice import PRESETS, VDevice, get_preset
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
                   help="vDevice preset or .json file (default: the backend's first preset; --list shows them). "
                        "Without --backend, the rKernels come from an installed backend for that kind of device, "
                        "or from the core's families when there is none")
    p.add_argument("--policy", default="wavefront", help="scheduling policy (default wavefront; --list shows them)")
    p.add_argument("--json", metavar="OUT", help="write the schedule, with simulated figures, to this JSON file")
    p.add_argument("--plot", metavar="OUT", help="draw a Gantt chart (vEU x time) of both schedules to this image")
    p.add_argument("--color-by", choices=["op", "op_type"], default="op_type",
                   help="Gantt colours: per op type, with a legend (default), or per op")
    p.add_argument("--no-verify", action="store_true", help="skip verifying the schedule")
    p.add_argument("--list", action="store_true", help="list vDevice presets and policies, then exit")
    p.set_defaults(func=run)


def _list() -> int:
    rows = [[name, get_preset(name).num_veus, get_preset(name).kind, data.get("description", "")]
            for name, data in PRESETS.items()]
    print(table(rows, ["vdevice", "vEUs", "kind", "description"]))
    print()
    rows = [[name, getattr(p, "description", "")] for name, p in sorted(policies().items())]
    print(table(rows, ["policy", "description"]))
    return 0


def backend_and_vdevice(backend_name: str | None, preset: str | None) -> tuple[Backend | None, VDevice]:
    """The backend whose rKernels schedule the model, and the vDevice.  A named backend uses its
    own vDevice (and refuses a preset of another device kind); with only a preset, the available
    scheduling backend for that kind of device with the highest priority, else the core's
    families (backend None)."""
    if backend_name is not None or preset is None:
        backend = plugins.get_backend(backend_name)
        return backend, backend.vdevice(preset) if preset else backend.vdevice()
    vdevice = get_preset(preset)
    matching = [b for b in plugins.backends().values()
                if b.capabilities.schedules and b.capabilities.device == vdevice.kind and b.availability().ok]
    if not matching:
        return None, vdevice
    backend = max(matching, key=lambda b: (b.default_priority, b.name))
    return backend, backend.vdevice(preset)


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list()

    policy = get_policy(args.policy)
    baseline = get_policy(BASELINE) if args.policy != BASELINE else None
    graph, label = load_graph(args)
    backend, vdevice = backend_and_vdevice(args.backend, args.vdevice)
    start = time.perf_counter()
    problem = build_problem(graph, vdevice, backend)
    kernels_s = time.perf_counter() - start
    source = f"backend {backend.name}" if backend is not None else "the core rKernel families"
    print(f"model {label}: {len(graph.nodes)} nodes; {source}; vDevice {vdevice.summary()}")
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
        try:
            written = plot_gantt([(s, r) for s, r, _ in results], args.plot,
                       title=f"{label} on {vdevice.name} ({vdevice.num_veus} vEUs)", color_by=args.color_by)
        except OSError as exc:
            raise RammerError(f"cannot write {args.plot}: {exc.strerror}") from None
        print(f"wrote {written}")
    return 0
