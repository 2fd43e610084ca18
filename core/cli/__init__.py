"""The ``rammer`` command line.

Each subcommand lives in its own module with a ``register(subparsers)``
function that adds its parser and sets ``func`` (Namespace -> exit code).
Errors a user can fix (:class:`RammerError`) print one line and exit non-zero;
``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
import traceback
from typing import Iterator

from ..errors import RammerError

#: Subcommand modules, in help order.  A module that is not there yet is skipped.
_COMMANDS = ["backends", "run", "inspect", "compile", "schedule", "zoo", "bench", "serve"]


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="rammer",
        description="rammer: compile ONNX models into holistic rTask schedules for CPUs, GPUs, IPUs and MCUs.",
    )
    parser.add_argument("--version", action="version", version=f"rammer {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            continue
        module.register(sub)
    return parser


class _LowerLevelFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        record.levelname = record.levelname.lower()
        return super().format(record)


@contextlib.contextmanager
def _log_to_stderr(level: int) -> Iterator[None]:
    """While the command runs, the ``rammer`` logger's records go to stderr as
    ``rammer: warning: ...``; the logger is left as it was afterwards (``main`` may
    be called in-process, by tests or by other programs)."""
    log = logging.getLogger("rammer")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LowerLevelFormatter("rammer: %(levelname)s: %(message)s"))
    saved = (log.level, log.propagate)
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(level)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with _log_to_stderr(logging.DEBUG if args.debug else logging.WARNING):
            return int(args.func(args) or 0)
    except RammerError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"rammer: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("rammer: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
