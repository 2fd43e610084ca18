"""Every command shown in the README and docs/ runs as documented.

Commands are taken from fenced code blocks (lines starting with ``rammer``,
``$ rammer``, ``python -m rammer...`` or ``python ci/...``; ``&&`` chains are
split).  ``rammer`` commands run in-process through the CLI's ``main`` in a
scratch folder that sees the repository's ``ci/`` (outputs such as ``--out``
or ``--plot docs/...`` land in the scratch folder, never in the checkout);
timed commands run with one timed run and no warm-up, which changes what is
measured but not what is checked (every bench cell is still compared with the
reference backend).  Scripts under ``ci/`` that benchmark for minutes are
checked to exist and to parse their arguments (``--help``), and their heavy
runs are listed in the benchmark docs, not timed in tests.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rammer.cli import main
from rammer.time_limits import scaled_limit

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Commands that serve until stopped: checked for their flags only.
_LONG_RUNNING = ("serve",)

#: Options that make a documented timing command cheap in a test.
_CHEAP = {"--repeat": "1", "--warmup": "0"}


def _commands() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL):
            joined = re.sub(r"\\\n\s*", " ", block)  # continuation lines
            for line in joined.splitlines():
                line = line.strip()
                if line.startswith("$ "):
                    line = line[2:]
                for part in (p.strip() for p in line.split("&&")):
                    part = re.sub(r"\s+#.*$", "", part)
                    if not re.match(r"^(rammer |python -m rammer|python ci/\w+\.py)", part):
                        continue
                    words = part.split()
                    if len(words) > 1 and words[1].endswith(":"):
                        continue  # a line of output ("rammer conformance: ..."), not a command
                    if re.search(r"\b[A-Z]{4,}\b|\[--", part):
                        continue  # a synopsis with placeholders (MODEL, NAME, [--opt])
                    found.append((doc.name, part))
    return found


COMMANDS = _commands()


def test_docs_have_commands():
    assert len(COMMANDS) >= 10, COMMANDS


def _cheap(argv: list[str]) -> list[str]:
    if not argv or argv[0] not in ("run", "bench") or (len(argv) > 1 and argv[1] == "merge"):
        return argv
    out = list(argv)
    for flag, value in _CHEAP.items():
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("doc,command", COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_documented_command_runs(doc, command, tmp_path, monkeypatch, capsys):
    argv = shlex.split(command)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ci").symlink_to(ROOT / "ci")
    (tmp_path / "docs").mkdir()
    if argv[0] == "rammer":
        args = _cheap(argv[1:])
        if args[0] in _LONG_RUNNING:
            # A server runs until stopped (tests/serve runs one); here the documented flags must parse.
            from rammer.cli import build_parser

            build_parser().parse_args(args)
            return
        placeholders = [a for a in args if a.endswith((".onnx", ".rammer")) and not (tmp_path / a).exists()]
        if placeholders:
            pytest.skip(f"the command names a file of the reader's ({placeholders[0]}); its flags are checked by "
                        f"the command's own tests")
        if "--backends" in args:
            from rammer import plugins

            named = args[args.index("--backends") + 1].split(",")
            missing = [b for b in named if b in ("toy",) and b not in plugins.backends()]
            if missing:
                pytest.skip(f"backend {missing} is the doc's example plugin (its own test: test_conformance.py)")
        if args[:2] == ["bench", "merge"]:
            # merge joins the results of the documented bench runs: make two small ones first.
            for name in {Path(a).parent.name for a in args if a.endswith("results.json")}:
                assert main(["bench", "--models", "lstm-tc-small", "--backends", "reference", "--repeat", "1",
                             "--warmup", "0", "--no-charts", "--machine-name", name, "--out", name]) == 0
        rc = main(args)
        out = capsys.readouterr()
        assert rc == 0, f"{command!r} exited {rc}: {out.err[-2000:]}"
        return
    if argv[:2] == ["python", "-m"]:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
        done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=scaled_limit(600),
                              env=env)
        assert done.returncode == 0, f"{command!r}: {done.stderr[-2000:]}"
        return
    script = ROOT / argv[1]
    assert script.is_file(), f"{doc} names {argv[1]}, which does not exist"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                          timeout=scaled_limit(120))
    assert done.returncode == 0, f"{argv[1]} --help: {done.stderr[-2000:]}"
    # The documented flags exist.
    for flag in (a for a in argv[2:] if a.startswith("--")):
        assert flag.split("=")[0] in done.stdout, f"{argv[1]} has no option {flag} (documented in {doc})"
