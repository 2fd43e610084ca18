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
import os
import sys
import traceback
from collections.abc import Iterator

from .. import __version__
from ..errors import RammerError

#: Subcommand modules, in help order.  A module that is not there yet is skipped.
_COMMANDS = ["backends", "run", "inspect", "compile", "schedule", "zoo", "bench", "serve"]


def build_parser() -> argparse.ArgumentParser:
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
    # --debug is accepted after the subcommand too (`rammer run m.onnx --debug`); SUPPRESS keeps a
    # subparser from resetting a --debug given before the subcommand.
    for subparser in set(sub.choices.values()):
        if "--debug" not in subparser._option_string_actions:
            subparser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                   help="show tracebacks of errors")
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


def shadowing_paths(folder: str | None = None) -> list[str]:
    """Files and folders in ``folder`` (the current one) that a Python script run there would
    import as ``rammer`` instead of the installed package: ``import rammer`` then gets them, and
    ``rammer.compile`` fails with an AttributeError that does not say why.  Nothing in the real
    package can run once a shadow wins, so the CLI names them up front."""
    folder = folder or os.getcwd()
    real = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = []
    for name in ("rammer", "rammer.py"):
        path = os.path.join(folder, name)
        if os.path.exists(path) and os.path.realpath(path) != real:
            found.append(path)
    return found


def _warn_if_shadowed() -> None:
    for path in shadowing_paths():
        kind = "folder" if os.path.isdir(path) else "file"
        print(f"rammer: warning: the {kind} '{path}' has the package's name: Python scripts run from this folder "
              f"import it instead of rammer ('import rammer' then fails with AttributeError: module 'rammer' has "
              f"no attribute ...); rename it", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    _warn_if_shadowed()
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
