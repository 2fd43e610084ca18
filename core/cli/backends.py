"""``rammer backends``: the registered backends and whether they run here."""

from __future__ import annotations

import argparse
import json

from .. import plugins
from .common import table, wrap

#: The widest line the table and its notes print (fits a 100-column terminal).
WIDTH = 100


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backends", help="list backends, their availability and capabilities",
                       description="The registered backends: whether each runs here and its capabilities, then "
                                   "why the unavailable ones cannot run and notes on the available ones "
                                   f"(what they run on). Lines fit {WIDTH} columns.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows, data = [], []
    why_not: list[tuple[str, str]] = []
    notes: list[tuple[str, str]] = []
    table_ = plugins.backends()
    default = None
    try:
        default = plugins.default_backend_name()
    except Exception:
        pass
    for name in sorted(table_):
        be = table_[name]
        avail = be.availability()
        rows.append([name + (" (default)" if name == default else ""), "yes" if avail.ok else "no",
                     be.capabilities.summary()])
        if avail.reason:
            # An available backend's reason says what it runs on (a simulator, a device name): a note.
            (notes if avail.ok else why_not).append((name, avail.reason))
        data.append({"name": name, "description": be.description, "available": avail.ok,
                     "why_not": "" if avail.ok else avail.reason, "note": avail.reason if avail.ok else "",
                     "plugin": plugins.backend_origin(name), "default": name == default,
                     "capabilities": be.capabilities.as_dict()})
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(table(rows, ["backend", "available", "capabilities"], width=WIDTH))
    for title, entries in (("why not", why_not), ("notes", notes)):
        if not entries:
            continue
        print(f"\n{title}:")
        pad = max(len(n) for n, _ in entries) + 4
        for name, text in entries:
            lines = wrap(text, WIDTH - pad)
            print(f"  {name.ljust(pad - 2)}{lines[0]}")
            for line in lines[1:]:
                print(" " * pad + line)
    return 0
