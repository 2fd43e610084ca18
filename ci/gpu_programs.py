"""Whole-model GPU programs per preset, checked without a GPU: built, race-checked, compiled by the vendor
compiler, sized against the device's co-resident blocks, and simulated.

    python ci/gpu_programs.py [--models lstm-tc,...] [--presets v100,a100,h100,mi250x] [--torch] [--json F]

For each model and preset (v100/a100/h100 through the ``cuda`` backend, mi250x through ``rocm``) it compiles
the persistent program (the core wavefront schedule on that preset, verified; block programs race-checked),
builds the CUDA text with nvcc for the preset's architecture (sm_70/80/90) or the HIP text with hipcc for
gfx90a, reads registers and shared memory per block from the compiler, computes the co-resident grid (a
persistent grid larger than it is refused), and simulates the wavefront and op-by-op schedules.  One row per
model and preset; exit 1 if anything fails.  Models the GPU backends refuse (an op without an rKernel) are
listed with the reason, not counted as failures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_sets import ZOO, graphs  # noqa: E402

BACKEND_OF = {"v100": "cuda", "a100": "cuda", "h100": "cuda", "mi250x": "rocm"}


def _row(name: str, graph, preset: str) -> dict:
    from rammer import plugins
    from rammer.backends.gpu.compiler import compile_program
    from rammer.errors import UnsupportedOpError
    from rammer.schedule import build_problem, get_policy, simulate

    be = plugins.backends()[BACKEND_OF[preset]]
    row: dict = {"model": name, "preset": preset, "backend": be.name}
    t = time.perf_counter()
    try:
        prepared = be.prepare_graph(graph).graph
        prog = compile_program(prepared, be, be.vdevice(preset), mode="persistent")
    except UnsupportedOpError as exc:
        row["refused"] = str(exc)[:160]
        return row
    from importlib import import_module

    runtime = import_module(f"rammer.backends.{be.name}.runtime")
    exe = runtime.make_executable(prog)
    row["compile_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    occ = exe.occupancy(preset)  # vendor compiler build + co-residency check (raises when the grid is too big)
    row["build_s"] = round(time.perf_counter() - t, 2)
    problem = build_problem(prepared, be.vdevice(preset), be)
    op_by_op = simulate(get_policy("op-by-op").schedule(problem)).makespan_us
    row.update(ops=len(prepared.nodes), rtasks=prog.report["rtasks"], blocks=prog.blocks,
               segments=int(dict(prog.kernels[-1].meta).get("segments", 0)), signals=prog.report["signals"],
               arch=occ["arch"], registers=occ["registers"], shared_bytes=occ["shared_bytes"],
               co_resident=occ["co_resident"], binary_bytes=occ["binary_bytes"],
               wavefront_us=round(simulate(prog.schedule).makespan_us, 1), op_by_op_us=round(op_by_op, 1))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=ZOO)
    parser.add_argument("--presets", default="v100,a100,h100,mi250x")
    parser.add_argument("--torch", action="store_true", help="also the torch.onnx exports of the test suite")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    presets = [p for p in args.presets.split(",") if p]
    unknown = [p for p in presets if p not in BACKEND_OF]
    if unknown:
        parser.error(f"unknown GPU preset(s) {unknown}; choose from {', '.join(BACKEND_OF)}")
    rows, failed = [], 0
    head = (f"{'model':18} {'preset':7} {'ops':>5} {'rtasks':>7} {'blocks':>6} {'segs':>6} {'arch':7} {'regs':>4} "
            f"{'smem':>6} {'resident':>8} {'build s':>7} {'wavefront us':>12} {'op-by-op us':>11}")
    print(head, flush=True)
    for name, graph in graphs(args.models, args.torch):
        for preset in presets:
            try:
                row = _row(name, graph, preset)
            except Exception as exc:  # a failure is a finding: report it and go on
                row = {"model": name, "preset": preset, "error": f"{type(exc).__name__}: {exc}"[:300]}
                failed += 1
            rows.append(row)
            if "error" in row or "refused" in row:
                print(f"{name:18} {preset:7} {'ERROR' if 'error' in row else 'refused'}: "
                      f"{row.get('error') or row.get('refused')}", flush=True)
                continue
            print(f"{name:18} {preset:7} {row['ops']:>5} {row['rtasks']:>7} {row['blocks']:>6} {row['segments']:>6} "
                  f"{row['arch']:7} {row['registers']:>4} {row['shared_bytes']:>6} {row['co_resident']:>8} "
                  f"{row['build_s']:>7} {row['wavefront_us']:>12} {row['op_by_op_us']:>11}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    built = sum(1 for r in rows if "registers" in r)
    print(f"{built} programs built and sized, {sum(1 for r in rows if 'refused' in r)} refused by the backends, "
          f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
