"""ruff over the repository and mypy over core/ (the package ``rammer``), with the configuration in pyproject.toml.

Both run as subprocesses from the repository root, exactly as a developer runs them (``python -m ruff check .``,
``python -m mypy``), and a finding fails the test with the tool's own report.  Both tools are pinned in the
``test`` extra; the tests skip, naming the tool, only where it is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(tool: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed (it is in the test extra: pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--output-format", "concise", ".", timeout=300)
    assert done.returncode == 0, (
        f"ruff check . found problems (the auto-fixable ones: python -m ruff check --fix .):\n"
        f"{done.stdout}{done.stderr}")


def test_every_per_file_ignore_still_silences_a_finding():
    """pyproject's per-file ignores are debts to pay, a list that only shrinks: a fixed one is removed."""
    done = _run("ruff", "check", "--config", "lint.per-file-ignores = {}", "--output-format", "json", ".",
                timeout=300)
    found: dict[str, set[str]] = {}
    for finding in json.loads(done.stdout):
        path = pathlib.Path(finding["filename"]).resolve().relative_to(ROOT).as_posix()
        found.setdefault(path, set()).add(finding["code"])
    ignores = _pyproject()["tool"]["ruff"]["lint"].get("per-file-ignores", {})
    stale = [f"{path}: {code}" for path, codes in ignores.items() for code in codes
             if code not in found.get(path, set())]
    assert not stale, f"per-file ignores in pyproject.toml that silence nothing any more (remove them): {stale}"


@pytest.mark.slow  # about a minute of CPU from a cold cache (.mypy_cache)
def test_mypy_finds_nothing_in_core():
    done = _run("mypy", timeout=1800)
    # mypy reaches core/ through the link typecheck/rammer; name the files as they are in the tree
    report = (done.stdout + done.stderr).replace("typecheck/rammer/", "core/")
    assert done.returncode == 0, f"mypy (configured in pyproject.toml) found problems in core/:\n{report}"


def test_mypy_sees_core_as_the_package_rammer_and_checks_the_contracts_strictly():
    link = ROOT / "typecheck" / "rammer"
    assert link.is_symlink() and link.resolve() == (ROOT / "core").resolve(), (
        "typecheck/rammer must be a symbolic link to ../core: mypy finds the package rammer by its folder name")
    config = _pyproject()["tool"]["mypy"]
    assert config["packages"] == ["rammer"] and config["mypy_path"] == "typecheck"
    strict = [o for o in config.get("overrides", []) if "rammer.ir" in o["module"]]
    assert strict and {"rammer.pipeline", "rammer.pipeline.*"} <= set(strict[0]["module"])
    # mypy 2.4 would apply `strict = true` from an override to every module, so the flags are spelled out
    assert "strict" not in strict[0] and strict[0]["disallow_untyped_defs"] and strict[0]["disallow_any_generics"]
