"""``rammer run``: compile a model, run it, print outputs and latency."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from ..errors import FeedError, RammerError
from .common import add_backend_arg, add_model_args, add_strict_arg, fmt_us, model_source, parse_shapes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="compile and run a model; print outputs and latency")
    add_model_args(p)
    add_backend_arg(p)
    add_strict_arg(p)
    p.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy",
                   help="feed an input from a .npy file (repeatable); others are random")
    p.add_argument("--output", "-o", metavar="OUT.npz", help="save the outputs")
    p.add_argument("--repeat", type=int, default=10, help="timed runs after one warm-up (default 10)")
    p.set_defaults(func=run)


def _load_inputs(items: list[str]) -> dict[str, np.ndarray]:
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise FeedError(f"--input {item!r}: expected NAME=FILE.npy")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise FeedError(f"--input {name}: cannot read '{path}' as a .npy array ({exc})") from None
    return feeds


def _summary(arr: np.ndarray) -> str:
    head = np.array2string(arr.reshape(-1)[:4], precision=5, separator=", ")
    if arr.size and arr.dtype.kind in "fiub":
        a = arr.astype(np.float64)
        return f"min {a.min():.5g} max {a.max():.5g} mean {a.mean():.5g} first {head}"
    return f"first {head}"


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write atomically: a reader never sees a half-written file."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run(args: argparse.Namespace) -> int:
    import rammer

    if args.repeat < 1:
        raise RammerError("--repeat must be at least 1")
    source, label = model_source(args)
    t0 = time.perf_counter()
    model = rammer.compile(source, backend=args.backend, input_shapes=parse_shapes(args.shape) or None,
                           strict=args.strict)
    compile_s = time.perf_counter() - t0
    feeds = model.random_feeds(args.seed)
    feeds.update(_load_inputs(args.input))
    outputs = model.run(feeds)  # warm-up, and the outputs we print
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        model.run(feeds)
        times.append(time.perf_counter() - t)
    print(f"model {label} on backend '{model.backend.name}' ({len(model.graph.nodes)} nodes), "
          f"compiled in {compile_s:.2f} s")
    for t in model.outputs:
        arr = outputs[t.name]
        print(f"  output {t.name}: {arr.dtype}{list(arr.shape)} {_summary(arr)}")
    print(f"latency: median {fmt_us(statistics.median(times))}, min {fmt_us(min(times))}, "
          f"max {fmt_us(max(times))} over {args.repeat} runs")
    if args.output:
        save_npz(args.output, outputs)
        print(f"outputs saved to {args.output}")
    return 0
