"""``rammer backends``: the registered backends and whether they run here."""

from __future__ import annotations

import argparse
import json

from .. import plugins
from .common import table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("backends", help="list backends, their availability and capabilities")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows, data = [], []
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
                     avail.reason or "-", be.capabilities.summary()])
        data.append({"name": name, "description": be.description, "available": avail.ok, "why_not": avail.reason,
                     "plugin": plugins.backend_origin(name), "default": name == default,
                     "capabilities": be.capabilities.as_dict()})
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(table(rows, ["backend", "available", "why not", "capabilities"]))
    return 0
