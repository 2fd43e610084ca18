"""``rammer compile``: compile a model for a backend; optionally emit its code and report.

    rammer compile model.onnx --backend cpu --report
    rammer compile --zoo lstm-tc --backend cpu --emit out/ --veus 2

``--report`` prints what the backend did with the model (for the ``cpu``
backend: which ops fell back to the reference implementation and why, the
fused groups, rTasks, barriers and the arena's peak size).  ``--emit DIR``
asks the backend to write its generated source, schedule JSON and report.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from .. import plugins
from ..api import compile as compile_model
from ..backend import Backend
from ..errors import RammerError
from .common import (
    add_backend_arg,
    add_model_args,
    add_strict_arg,
    add_tree_strategy_arg,
    input_shapes,
    model_source,
    table,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compile", help="compile a model for a backend; --report, --emit DIR",
                       description="Compile a model and report how the backend compiled it.")
    add_model_args(p)
    add_backend_arg(p)
    add_strict_arg(p)
    add_tree_strategy_arg(p)
    p.add_argument("--emit", metavar="DIR", help="write the generated source, schedule JSON and report to DIR")
    p.add_argument("--report", action="store_true", help="print the compile report (fallbacks and why, fusion, arena)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-o", "--output", metavar="MODEL.rammer",
                   help="save the compiled model (load it with rammer.load_compiled or `rammer run MODEL.rammer`)")
    p.add_argument("--veus", type=int, default=None, help="vEUs (worker threads) for scheduling backends")
    p.add_argument("--policy", default=None, help="scheduling policy for scheduling backends (default wavefront)")
    p.add_argument("--vdevice", default=None, metavar="PRESET",
                   help="vDevice preset to schedule for, on backends that take one (e.g. cuda: a100, v100, h100)")
    p.add_argument("--mode", default=None,
                   help="execution mode, on backends that have several (GPU: persistent, wave; default: the "
                        "backend's for its device, persistent on a GPU, wave on a CPU OpenCL device such as PoCL)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the compile cache")
    p.set_defaults(func=run)


def _options(args: argparse.Namespace, backend: Any) -> dict[str, Any]:
    caps = backend.capabilities
    options: dict[str, Any] = {}
    wanted = {"emit": args.emit, "veus": args.veus, "policy": args.policy, "vdevice": args.vdevice,
              "mode": args.mode}
    for key, value in wanted.items():
        if value is None:
            continue
        if key in ("vdevice", "mode") and (caps.options is None or key not in caps.options):
            raise RammerError(f"backend '{backend.name}' has no --{key} option")
        if key == "emit" and not caps.emits_source:
            raise RammerError(f"backend '{backend.name}' does not emit source (--emit)")
        if key in ("veus", "policy") and not caps.schedules:
            raise RammerError(f"backend '{backend.name}' does not schedule rTasks (--{key})")
        options[key] = value
    if args.no_cache and caps.compile_cache:
        options["cache"] = False
    return options


def run(args: argparse.Namespace) -> int:
    source, label = model_source(args)
    backend = plugins.get_backend(args.backend, compile_only=bool(args.emit))
    options = _options(args, backend)
    if args.output:
        if type(backend).export_artifact is Backend.export_artifact:
            raise RammerError(f"backend '{backend.name}' cannot save compiled models (-o)")
        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder):
            raise RammerError(f"-o {args.output}: folder '{folder}' does not exist")
    start = time.perf_counter()
    if args.tree_strategy:
        options["tree_strategy"] = args.tree_strategy
    model = compile_model(source, backend=backend.name, input_shapes=input_shapes(args, source),
                          strict=args.strict, **options)
    seconds = time.perf_counter() - start
    graph = model.graph
    if args.output:
        model.save(args.output)
        print(f"saved the compiled model to {args.output} (rammer.load_compiled, or rammer run {args.output})")
    report = dict(getattr(model.executable, "report", None) or {})
    report.setdefault("model", label)
    report["backend"] = backend.name
    report["compile_seconds_total"] = round(seconds, 4)
    cache = getattr(model.executable, "cache_status", None)
    if cache:
        report["cache"] = cache
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    print(f"compiled {label} ({len(graph.nodes)} nodes) for backend '{backend.name}' in {seconds:.3f} s"
          + (f" (cache: {cache})" if cache else ""))
    if args.emit:
        print(f"wrote generated source, schedule and report to {args.emit}")
    if args.report:
        _print_report(report)
    return 0


#: Report entries that are data for tools (traces), not for reading.
_NOT_PRINTED = ("trace_map",)


def _print_report(report: dict[str, Any]) -> None:
    report = {k: v for k, v in report.items() if k not in _NOT_PRINTED}
    fallbacks = report.get("fallbacks")
    if fallbacks is not None:
        if fallbacks:
            print(f"{len(fallbacks)} node(s) fall back to the reference implementation:")
            rows = [[f["node"], f["op"], f["reason"]] for f in fallbacks]
            print(table(rows, ["node", "op", "why"]))
        elif report.get("control_flow"):
            print("no fallback: every node runs compiled, control flow on the host (listed below)")
        else:
            print("no fallback: every node runs compiled")
    scalars = [(k, v) for k, v in report.items() if k not in ("fallbacks", "model", "backend") and
               not isinstance(v, (dict, list))]
    for key, value in scalars:
        print(f"  {key}: {value}")
    for key, value in report.items():
        if isinstance(value, dict):
            print(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in value.items()))
        elif isinstance(value, list) and key not in ("fallbacks",) and len(value) <= 20:
            print(f"  {key}: {', '.join(map(str, value))}")
