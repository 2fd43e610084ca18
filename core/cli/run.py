"""``rammer run``: compile a model, run it, print outputs and latency."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, cast

import numpy as np

import rammer

from ..atomic_file import atomic_write
from ..bench.timing import Timing, time_calls
from ..errors import FeedError, RammerError
from .common import (
    add_backend_arg,
    add_model_args,
    add_strict_arg,
    add_tree_strategy_arg,
    fmt_us,
    input_shapes,
    model_source,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="compile and run a model; print outputs and latency",
                       description="Compile a model, run it once (its outputs are printed), then --warmup untimed "
                                   "runs and --repeat timed runs back to back, timed by the function `rammer bench` "
                                   "uses (rammer.bench.timing). `rammer bench` with several backends alternates "
                                   "them run by run, so each run follows another backend's (its caches and, "
                                   "without --settle, its spinning threads): a small model's figures there are "
                                   "higher; `rammer bench --backends B` alone measures what `rammer run -b B` does.")
    add_model_args(p)
    add_backend_arg(p)
    add_strict_arg(p)
    add_tree_strategy_arg(p)
    p.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                   help="feed an input from a .npy file, or from a .npz file's array NAME (or its only array); "
                        "repeatable; others are random")
    p.add_argument("--output", "-o", metavar="OUT.npz", help="save the outputs")
    p.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs after the first, checked run (default 1)")
    p.add_argument("--settle", action="store_true",
                   help="wait for idle cores before each timed run (as `rammer bench --settle`); "
                        "default: back to back")
    p.add_argument("--json", action="store_true", help="print outputs' summaries and the timing as JSON")
    p.add_argument("--profile", metavar="TRACE.json",
                   help="also time one run rTask by rTask and write a Chrome trace (chrome://tracing, Perfetto); "
                        "prints the ops that took longest")
    p.set_defaults(func=run)


def _load_inputs(items: list[str]) -> dict[str, np.ndarray]:
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise FeedError(f"--input {item!r}: expected NAME=FILE.npy")
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise FeedError(f"--input {name}: cannot read '{path}' as a .npy array ({exc})") from None
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                keys = list(loaded.files)
                if name in keys:
                    feeds[name] = loaded[name]
                elif len(keys) == 1:
                    feeds[name] = loaded[keys[0]]
                else:
                    raise FeedError(f"--input {name}: '{path}' holds arrays {keys} and none is named '{name}'; "
                                    f"save the input under its name (np.savez(f, {name}=x)) or use a .npy file")
        else:
            feeds[name] = loaded
    return feeds


def _check_folder(option: str, path: str) -> None:
    """Fail before compiling and running when an output file's folder does not exist."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise RammerError(f"{option} {path}: folder '{folder}' does not exist")


def _summary(arr: np.ndarray) -> str:
    head = np.array2string(arr.reshape(-1)[:4], precision=5, separator=", ")
    if arr.size and arr.dtype.kind in "fiub":
        a = arr.astype(np.float64)
        return f"min {a.min():.5g} max {a.max():.5g} mean {a.mean():.5g} first {head}"
    return f"first {head}"


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write atomically: a reader never sees a half-written file."""
    with atomic_write(path, "the outputs") as f:
        np.savez(f, **cast("dict[str, Any]", arrays))  # numpy's stub types **kwds as its own options


def format_timing(timing: Timing) -> str:
    """One line: what ``rammer bench`` reports for a cell, in the same words."""
    return (f"latency: mean {fmt_us(timing.mean_s)} ± {fmt_us(timing.std_s)}, p50 {fmt_us(timing.p50_s)}, "
            f"p90 {fmt_us(timing.p90_s)}, p99 {fmt_us(timing.p99_s)}, min {fmt_us(timing.min_s)}, "
            f"max {fmt_us(timing.max_s)} over {timing.runs} runs after {timing.warmup} warm-up(s), "
            + ("each on idle cores (--settle)" if timing.settled else "back to back"))


def run(args: argparse.Namespace) -> int:
    if args.repeat < 1:
        raise RammerError("--repeat must be at least 1")
    if args.warmup < 0:
        raise RammerError("--warmup must be 0 or more")
    source, label = model_source(args)
    # Output folders and input files are checked before the (possibly long) compile and run.
    if args.output:
        _check_folder("-o", args.output)
    if args.profile:
        _check_folder("--profile", args.profile)
    given = _load_inputs(args.input)
    t0 = time.perf_counter()
    if isinstance(source, str) and source.endswith(".rammer"):
        if args.shape or args.batch is not None:
            raise RammerError(f"{'--shape' if args.shape else '--batch'} does not apply to a compiled .rammer "
                              f"model: it runs at the shapes it was compiled for")
        model = rammer.load_compiled(source, backend=args.backend, strict=args.strict)  # saved by `rammer compile -o`
    else:
        extra = {"tree_strategy": args.tree_strategy} if args.tree_strategy else {}
        model = rammer.compile(source, backend=args.backend, input_shapes=input_shapes(args, source),
                               strict=args.strict, **extra)
    compile_s = time.perf_counter() - t0
    feeds = model.random_feeds(args.seed, names=[t.name for t in model.inputs if t.name not in given])
    feeds.update(given)
    if args.profile and getattr(model.executable, "trace_run", None) is None:
        raise RammerError(f"--profile: backend '{model.backend.name}' cannot time its runs rTask by rTask; "
                          f"profile on a backend that schedules rTasks (e.g. --backend cpu)")
    outputs = model.run(feeds)  # the checked run, whose outputs we print
    timing = time_calls(lambda: model.run(feeds), args.repeat, args.warmup, args.settle)
    if args.json:
        doc = {"model": label, "backend": model.backend.name, "nodes": len(model.graph.nodes),
               "compile_s": compile_s, "timing": timing.as_dict(),
               "outputs": {t.name: {"dtype": str(outputs[t.name].dtype), "shape": list(outputs[t.name].shape)}
                           for t in model.outputs}}
        print(json.dumps(doc, indent=2))
    else:
        print(f"model {label} on backend '{model.backend.name}' ({len(model.graph.nodes)} nodes), "
              f"compiled in {compile_s:.2f} s")
        for t in model.outputs:
            arr = outputs[t.name]
            print(f"  output {t.name}: {arr.dtype}{list(arr.shape)} {_summary(arr)}")
        print(format_timing(timing))
    if args.profile:
        prof = model.profile(feeds, args.profile)
        if not args.json:
            print(prof.table())
    if args.output:
        save_npz(args.output, outputs)
        print(f"outputs saved to {args.output}")
    return 0
