"""`rammer zoo`: list the benchmark models and export them as ONNX files."""

from __future__ import annotations

import argparse
import sys

from rammer import zoo


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``zoo`` command (``list``, ``export``) to the rammer CLI."""
    parser = subparsers.add_parser(
        "zoo",
        help="the benchmark models of the Rammer evaluation",
        description="Build the Rammer (OSDI'20) benchmark models in code, with seeded "
        "random weights, and list or export them as ONNX (opset 17) files.",
    )
    commands = parser.add_subparsers(dest="zoo_command", metavar="COMMAND", required=True)

    listing = commands.add_parser(
        "list", help="list the models with node and parameter counts",
        description="List the zoo models. Counting nodes and parameters builds every "
        "model (a few seconds); --no-stats skips that.",
    )
    listing.add_argument(
        "--no-stats", action="store_true", help="only names and descriptions (instant)"
    )
    listing.set_defaults(func=cmd_list)

    export = commands.add_parser(
        "export", help="write one model to an ONNX file",
        description="Build a zoo model and write it atomically to OUT.",
    )
    export.add_argument("name", metavar="NAME", help="model name (see `rammer zoo list`)")
    export.add_argument("out", metavar="OUT.onnx", help="file to write")
    export.add_argument(
        "--seed", type=_non_negative_int, default=0, help="weight seed (default 0)"
    )
    export.add_argument(
        "--batch", type=_positive_int, default=1, help="batch size (default 1)"
    )
    export.set_defaults(func=cmd_export)


def _non_negative_int(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _format_count(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.2f}M"
    if n >= 10_000:
        return f"{n / 1e3:.1f}k"
    return str(n)


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        out = [c.rjust(w) if i in right else c.ljust(w)
               for i, (c, w) in enumerate(zip(cells, widths))]
        return "  ".join(out).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def cmd_list(args: argparse.Namespace) -> int:
    rows = []
    for entry in zoo.list_models():
        row = [entry.name, entry.description]
        if not args.no_stats:
            model = entry.build()
            row += [str(len(model.graph.node)), _format_count(zoo.count_parameters(model))]
        rows.append(row)
    header = ["name", "description"] + ([] if args.no_stats else ["nodes", "parameters"])
    print(_table(header, rows, right={2, 3}))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    try:
        model = zoo.export(args.name, args.out, seed=args.seed, batch=args.batch)
    except OSError as exc:
        print(f"rammer zoo export: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(
        f"wrote {args.out}: {args.name} (seed {args.seed}, batch {args.batch}), "
        f"{len(model.graph.node)} nodes, {_format_count(zoo.count_parameters(model))} parameters"
    )
    return 0
