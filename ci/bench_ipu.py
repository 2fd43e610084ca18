"""Simulated IPU figures for the zoo models on a Graphcore preset (default GC200).

    python ci/bench_ipu.py [--models alexnet,resnext] [--vdevice gc200] [--budget 300] [--json out.json]

For each model: the wavefront schedule lowered with merged supersteps, the
wavefront schedule with Rammer/NNFusion's one wave per compute set, and the
op-by-op schedule (one op per compute set).  Figures come from the ipu
backend's cost model (see docs/ipu.md), not from an IPU: latency, supersteps,
exchange bytes, tile and vEU utilisation, peak tile SRAM; or the does-not-fit
error.  Lowering only (no numpy execution), so full-size models are practical.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

import rammer
import rammer.plugins
from rammer import zoo
from rammer.errors import RammerError
from rammer.frontend import load
from rammer.schedule import build_problem, get_policy

CONFIGS = (("wavefront", "merged"), ("wavefront", "compute-set"), ("op-by-op", "compute-set"))


def _backend():
    if "ipu" not in rammer.plugins.backends():
        import rammer.backends.ipu as ipu

        rammer.plugins.register_plugin(ipu, "rammer-ipu-bench")
    return rammer.plugins.get_backend("ipu")


def _alarm(signum, frame):  # noqa: ARG001
    raise TimeoutError


def bench_model(name: str, vdevice: str, budget_s: int) -> list[dict]:
    from rammer.backends.ipu.codegen import lower

    backend = _backend()
    rows = []
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(budget_s)
    try:
        graph = load(zoo.build(name))
        graph = backend.prepare_graph(graph).graph
        problem = build_problem(graph, backend.vdevice(vdevice), backend)
        schedules = {}
        for policy, mode in CONFIGS:
            t0 = time.perf_counter()
            row = {"model": name, "policy": policy, "mode": mode}
            try:
                if policy not in schedules:
                    schedules[policy] = get_policy(policy).schedule(problem)
                r = lower(schedules[policy], graph, mode).report()
                row.update({k: r[k] for k in ("latency_us", "supersteps", "exchange_bytes", "tile_utilisation",
                                              "veu_utilisation", "tile_peak_bytes", "compute_us", "exchange_us",
                                              "sync_us")})
            except RammerError as exc:
                row["error"] = str(exc)
            row["lower_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
    except TimeoutError:
        rows.append({"model": name, "error": f"over the {budget_s} s budget of this script"})
    finally:
        signal.alarm(0)
    return rows


def table(rows: list[dict]) -> str:
    out = ["| model | schedule | supersteps | simulated latency (us) | exchange (MB) | tile util. | vEU util. "
           "| peak tile SRAM (KiB) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cfg = f"{r.get('policy', '-')} / {r.get('mode', '-')}"
        if "error" in r:
            out.append(f"| {r['model']} | {cfg} | - | - | - | - | - | {r['error'][:160]} |")
        else:
            out.append(f"| {r['model']} | {cfg} | {r['supersteps']} | {r['latency_us']:.1f} | "
                       f"{r['exchange_bytes'] / 1e6:.2f} | {r['tile_utilisation']:.3f} | {r['veu_utilisation']:.4f} | "
                       f"{r['tile_peak_bytes'] / 1024:.0f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    full = [e.name for e in zoo.list_models() if not e.name.endswith("-small")]
    ap.add_argument("--models", default=",".join(full))
    ap.add_argument("--vdevice", default="gc200")
    ap.add_argument("--budget", type=int, default=300, help="seconds per model")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        new = bench_model(name, args.vdevice, args.budget)
        rows.extend(new)
        print("\n".join(table(new).splitlines()[2:]), file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
