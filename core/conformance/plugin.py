"""pytest plugin of the backend conformance suite.

Registered through the ``pytest11`` entry point, so it is loaded by every
pytest run in an environment where rammer is installed.  It therefore does
nothing unless asked: it adds the ``--backend`` option (``--rammer-backend``
too, for projects where another plugin already owns ``--backend``), imports
nothing from rammer until a backend is named, and collects the checks
(``check_*.py`` in this package) only then::

    pytest --pyargs rammer.conformance --backend NAME [-rs]

The checks import by their package name (``rammer.conformance.check_...``),
never by file path, so an editable install does not load rammer twice.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

_PACKAGE = __name__.rpartition(".")[0]  # "rammer.conformance"
_HERE = Path(__file__).resolve().parent
_TARGET_KEY = pytest.StashKey[Any]()
_NOTHING_KEY = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rammer conformance", "rammer backend conformance suite")
    group.addoption("--rammer-backend", dest="rammer_backend", default=None, metavar="NAME",
                    help="check the rammer backend NAME (pytest --pyargs rammer.conformance --backend NAME)")
    group.addoption("--rammer-checks", dest="rammer_checks", default=None, metavar="A,B",
                    help="run only these checks (node_cases, zoo, feeds, repeat, schedules, cache, source)")
    if _option_taken(parser, "--backend"):
        return  # another plugin owns --backend; --rammer-backend still works
    try:
        group.addoption("--backend", dest="rammer_backend", default=None, metavar="NAME",
                        help="same as --rammer-backend")
    except (ValueError, argparse.ArgumentError):
        pass


def _option_taken(parser: pytest.Parser, name: str) -> bool:
    """Whether a plugin registered before this one already added ``name``."""
    groups = list(getattr(parser, "_groups", [])) + [getattr(parser, "_anonymous", None)]
    for group in groups:
        for option in getattr(group, "options", []):
            try:
                if name in option.names():
                    return True
            except Exception:  # an option object of another pytest version: fall back to try/except
                continue
    return False


def backend_option(config: pytest.Config) -> str | None:
    return config.getoption("rammer_backend", default=None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rammer_conformance: a check of the rammer backend conformance suite")


def get_target(config: pytest.Config) -> Any:
    """The backend under test (a :class:`rammer.conformance.target.Target`), loaded on first use."""
    if _TARGET_KEY not in config.stash:
        name = backend_option(config)
        if not name:
            raise pytest.UsageError("rammer.conformance: give the backend to check with --backend NAME")
        from .target import make_target

        config.stash[_TARGET_KEY] = make_target(name)
    return config.stash[_TARGET_KEY]


def selected_checks(config: pytest.Config) -> list[Path]:
    """The check modules to run: all, or those named by --rammer-checks."""
    files = sorted(p for p in _HERE.iterdir() if p.name.startswith("check_") and p.suffix == ".py")
    wanted = config.getoption("rammer_checks", default=None)
    if not wanted:
        return files
    by_name = {p.stem[len("check_"):]: p for p in files}
    names = [w.strip() for w in wanted.split(",") if w.strip()]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise pytest.UsageError(f"rammer.conformance: unknown check(s) {', '.join(unknown)} in --rammer-checks "
                                f"(known: {', '.join(by_name)})")
    return [by_name[n] for n in sorted(set(names))]


def pytest_sessionstart(session: pytest.Session) -> None:
    # Validate before collecting: an unknown backend or check is a usage error.
    if backend_option(session.config):
        get_target(session.config)
        selected_checks(session.config)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not backend_option(config):
        return None
    t = get_target(config)
    state = "available" if t.available else f"NOT available here ({t.why_unavailable}): compile-only checks"
    return [f"rammer conformance: backend '{t.name}' from plugin '{t.plugin}', {state}",
            f"  capabilities: {t.caps.summary()}; rtol={t.caps.rtol:g} atol={t.caps.atol:g}"]


class _CheckModule(pytest.Module):
    """A check module, imported by its package name rather than its path."""

    def _getobj(self) -> Any:
        return importlib.import_module(f"{_PACKAGE}.{self.path.stem}")


class _ConformanceDir(pytest.Directory):
    """This package's folder: its ``check_*.py`` modules when a backend is given, else nothing."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        if not backend_option(self.config):
            self.config.stash[_NOTHING_KEY] = True
            return []
        get_target(self.config)  # an unknown backend is a usage error before anything runs
        files = selected_checks(self.config)
        # Plain asserts in the checks explain themselves, as in any test module.
        names = [f"{_PACKAGE}.{p.stem}" for p in files]
        pytest.register_assert_rewrite(*(n for n in names if n not in sys.modules))
        return [_CheckModule.from_parent(self, path=p) for p in files]


def _is_here(path: Path) -> bool:
    try:
        return os.path.samefile(path, _HERE)
    except OSError:
        return False


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if _is_here(path):
        return _ConformanceDir.from_parent(parent, path=path)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_here(Path(str(item.path)).parent):
            item.add_marker(pytest.mark.rammer_conformance)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if config.stash.get(_NOTHING_KEY, False):
        terminalreporter.write_line(
            "rammer.conformance: no backend given, so nothing was checked; "
            "run pytest --pyargs rammer.conformance --backend NAME"
        )


@pytest.fixture(scope="session")
def conformance_target(request: pytest.FixtureRequest) -> Any:
    """The backend under test (:class:`rammer.conformance.target.Target`)."""
    return get_target(request.config)
