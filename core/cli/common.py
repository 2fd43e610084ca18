"""Arguments and helpers shared by subcommands."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import RammerError


def add_model_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``MODEL`` or ``--zoo NAME``, plus ``--shape`` bindings for dynamic dims."""
    parser.add_argument("model", nargs="?", help="path of an .onnx model")
    parser.add_argument("--zoo", metavar="NAME", help="a model of the built-in zoo (`rammer zoo list`)")
    parser.add_argument("--seed", type=int, default=0, help="seed for zoo weights and random inputs (default 0)")
    parser.add_argument("--batch", type=int, default=None, help="batch size for zoo models (default 1)")
    parser.add_argument(
        "--shape", action="append", default=[], metavar="NAME=D0,D1,...",
        help="bind a dynamic input shape (repeatable)",
    )
    parser.set_defaults(_model_required=required)


def add_backend_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", "-b", default=None,
                        help="backend to compile for (default: the best available; `rammer backends` lists them)")


def add_strict_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-fallback", dest="strict", action="store_true",
                        help="fail instead of running nodes the backend cannot compile in numpy (strict=True)")


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise RammerError(f"--shape {item!r}: expected NAME=D0,D1,... with integer dims") from None
    return shapes


def model_source(args: argparse.Namespace) -> tuple[Any, str]:
    """The model to load (path or ModelProto) and a display name."""
    if args.zoo and args.model:
        raise RammerError("give either MODEL or --zoo NAME, not both")
    if args.zoo:
        from .. import zoo

        kwargs = {"seed": args.seed}
        if args.batch is not None:
            kwargs["batch"] = args.batch
        return zoo.build(args.zoo, **kwargs), args.zoo
    if not args.model:
        raise RammerError("no model given: pass MODEL (an .onnx file) or --zoo NAME")
    return args.model, os.path.basename(args.model)


def load_graph(args: argparse.Namespace):
    from ..frontend import load

    source, label = model_source(args)
    return load(source, parse_shapes(args.shape) or None), label


def table(rows: list[list[Any]], headers: list[str]) -> str:
    """A plain-text table (no dependency, aligned columns)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(out)


def fmt_us(seconds: float) -> str:
    us = seconds * 1e6
    if us < 1000:
        return f"{us:.1f} us"
    if us < 1e6:
        return f"{us / 1000:.3f} ms"
    return f"{us / 1e6:.3f} s"
