"""Arguments and helpers shared by subcommands."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from .. import zoo
from ..errors import RammerError
from ..frontend import load
from ..frontend.inputs import declared_dims
from ..frontend.source import read_model


def add_model_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``MODEL`` or ``--zoo NAME``, plus ``--shape`` bindings for dynamic dims."""
    parser.add_argument("model", nargs="?", help="path of an .onnx model")
    parser.add_argument("--zoo", metavar="NAME", help="a model of the built-in zoo (`rammer zoo list`)")
    parser.add_argument("--seed", type=int, default=0, help="seed for zoo weights and random inputs (default 0)")
    parser.add_argument("--batch", type=int, default=None,
                        help="batch size: zoo models are built at it (default 1); for an .onnx file, "
                             "every input's dim 0 is bound to it")
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


def add_tree_strategy_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tree-strategy", default=None,
                        choices=["auto", "off", "tree_kernel", "gemm", "tree_traversal", "perfect_tree_traversal"],
                        help="how ai.onnx.ml tree ensembles become tensor ops (default: the tree rKernel on cpu, "
                             "elsewhere chosen from a measured table; docs/ml.md)")


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
        if any(d < 0 for d in shapes[name]):
            raise RammerError(f"--shape {item!r}: dims must be 0 or more")
    return shapes


def input_shapes(args: argparse.Namespace, source: Any) -> dict[str, tuple[int, ...]] | None:
    """The ``input_shapes`` of ``--shape``, plus ``--batch`` as dim 0 of every other input of an
    .onnx file (a zoo model is already built at ``--batch``)."""
    shapes = parse_shapes(args.shape)
    if args.batch is None or args.zoo:
        return shapes or None
    if args.batch < 1:
        raise RammerError(f"--batch {args.batch}: the batch size must be at least 1")

    if isinstance(source, str) and source.endswith(".rammer"):
        raise RammerError("--batch does not apply to a compiled .rammer model (it was compiled for fixed shapes)")
    proto, _ = read_model(source)
    constants = {t.name for t in proto.graph.initializer}
    bound: list[str] = []
    fixed: list[str] = []
    for vi in proto.graph.input:
        if vi.name in constants or vi.name in shapes:
            continue
        dims = declared_dims(vi)
        if not dims or isinstance(dims[0], int):
            fixed.append(f"{vi.name}{dims if dims else '(no shape)'}")
            continue  # not batched (a fixed dim 0), or nothing declared to bind
        if not all(isinstance(d, int) for d in dims[1:]):
            shown = ",".join(str(d) if isinstance(d, int) else "?" for d in dims)
            raise RammerError(f"--batch binds dim 0 of input '{vi.name}' ({shown}); its other dynamic dims need "
                              f"--shape {vi.name}={args.batch},...")
        shapes[vi.name] = (args.batch, *dims[1:])  # type: ignore[arg-type]
        bound.append(vi.name)
    if not bound:
        raise RammerError(f"--batch {args.batch}: no input of the model has a dynamic dim 0 to bind it to "
                          f"(inputs: {', '.join(fixed) or 'none'}); drop --batch, or use --shape NAME=D0,D1,...")
    return shapes or None


def model_source(args: argparse.Namespace) -> tuple[Any, str]:
    """The model to load (path or ModelProto) and a display name."""
    if args.zoo and args.model:
        raise RammerError("give either MODEL or --zoo NAME, not both")
    if args.zoo:
        kwargs = {"seed": args.seed}
        if args.batch is not None:
            kwargs["batch"] = args.batch
        return zoo.build(args.zoo, **kwargs), args.zoo
    if not args.model:
        raise RammerError("no model given: pass MODEL (an .onnx file) or --zoo NAME")
    return args.model, os.path.basename(args.model)


def load_graph(args: argparse.Namespace):
    source, label = model_source(args)
    return load(source, input_shapes(args, source)), label


def table(rows: list[list[Any]], headers: list[str], width: int | None = None) -> str:
    """A plain-text table (no dependency, aligned columns).  With ``width``, the last column
    wraps (at spaces, ``,`` and ``;``) so that no line is wider than ``width``."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if width is not None and headers:
        room = width - sum(w + 2 for w in widths[:-1])
        widths[-1] = max(len(headers[-1]), min(widths[-1], room))
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    for r in cells:
        last = wrap(r[-1], widths[-1]) if width is not None and r else [r[-1]] if r else []
        for k, piece in enumerate(last or [""]):
            lead = r[:-1] if k == 0 else [""] * (len(r) - 1)
            out.append("  ".join(c.ljust(w) for c, w in zip(lead + [piece], widths)).rstrip())
    return "\n".join(out)


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken after spaces, ``,`` or ``;``
    (a word longer than a line is cut); later lines start with ``indent``."""
    width = max(width, len(indent) + 8)
    words = re.findall(r"[^\s,;]*[,;]?\s*", text)
    lines: list[str] = []
    line = ""
    for word in (w for w in words if w):
        if line.strip() and len((line + word).rstrip()) > width:
            lines.append(line.rstrip())
            line = indent
        line += word
        while len(line.rstrip()) > width:  # one word longer than a line
            lines.append(line[:width])
            line = indent + line[width:]
    if line.strip():
        lines.append(line.rstrip())
    return lines


def fmt_us(seconds: float) -> str:
    us = seconds * 1e6
    if us < 1000:
        return f"{us:.1f} us"
    if us < 1e6:
        return f"{us / 1000:.3f} ms"
    return f"{us / 1e6:.3f} s"
