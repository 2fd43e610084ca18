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


# -- install lines, the test command, machine paths ------------------------------------------------------------

#: Files that still tell users to ``pip install 'rammer[...]'`` (PyPI's ``rammer`` is an unrelated package), left
#: to the helpers who own them; this list only shrinks (the test fails when a listed file is fixed).
_REGISTRY_INSTALL_HINTS_LEFT: set[str] = set()
#: ``pip install rammer``, ``'rammer[serve]'``, ``rammer==0.1``: rammer from a package registry; and an unquoted
#: ``pip install -e .[x]``, which zsh refuses ("no matches found").
_BAD_INSTALL = re.compile(r"""\brammer\[|pip install\s+(?:-\S+\s+)*(?:['"]?rammer(?:\b|$)(?!\.)|\.\[)""")
#: ``.[a,b]``: extras of the checkout (``pip install -e ".[test,torch]"``).
_EXTRAS = re.compile(r"""(?:^|[\s'"])\.\[([A-Za-z0-9_,\- ]+)\]""")


def _repo_text_files() -> list[Path]:
    keep = (".py", ".md", ".sh", ".toml", ".txt", ".cfg")
    files = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in keep or p == ROOT / ".ci" / "run"]
    skip = (".git", "build", ".eggs", "node_modules", "__pycache__")
    return [p for p in files
            if not any(part in skip or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)]


def test_no_install_line_takes_rammer_from_a_package_registry():
    """The installs are from the checkout (``pip install -e ".[serve]"``): PyPI's ``rammer`` is another project."""
    assert _BAD_INSTALL.search("pip install 'rammer[serve]'") and _BAD_INSTALL.search("pip install -U rammer")
    assert _BAD_INSTALL.search("pip install -e .[torch]") and not _BAD_INSTALL.search('pip install -e ".[torch]"')
    assert not _BAD_INSTALL.search("pip install -e . && rammer run") and not _BAD_INSTALL.search("pip install rammerx")
    bad, fixed = [], []
    for path in _repo_text_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "tests/test_docs_commands.py":
            continue
        hits = [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
                if _BAD_INSTALL.search(line)]
        if rel in _REGISTRY_INSTALL_HINTS_LEFT:
            fixed += [] if hits else [rel]
        else:
            bad += hits
    assert not bad, "install from the checkout, quoted (pip install -e \".[extra]\"), not from PyPI:\n" + "\n".join(bad)
    assert not fixed, f"these no longer name rammer from a registry: remove them from the list above: {fixed}"


def _extras() -> set[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["project"]["optional-dependencies"])


def test_every_extra_an_install_line_names_exists():
    extras = _extras()
    named = []
    for path in _repo_text_files():
        if path.name == "test_docs_commands.py":
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for group in _EXTRAS.findall(line):
                named += [(path.relative_to(ROOT).as_posix(), n, e.strip()) for e in group.split(",")]
    assert len(named) >= 5, named  # the README's, docs/ml.md's, the skip reasons'
    missing = [f"{f}:{n}: .[{e}]" for f, n, e in named if "$" not in e and e not in extras]
    assert not missing, f"extras not in pyproject.toml ({sorted(extras)}):\n" + "\n".join(missing)


def _readme_setup_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    assert block, "the README starts with a bash block of the set-up commands"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip()]


def test_ci_runs_exactly_the_readme_test_command():
    test_command = next(c for c in _readme_setup_commands() if "pytest" in c)
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.startswith(("#", "set ", "cd "))]
    assert ci == [test_command]


def test_the_readme_gives_the_test_command_duration_and_a_quick_subset():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"takes about \d+ minutes", text), "the README says how long the test command takes"
    quick = re.search(r'python -m pytest -m "([^"]+)"', text)
    assert quick, "the README names a quick subset (python -m pytest -m \"not slow\")"
    markers = re.findall(r"\b(?:not\s+)?(\w+)", quick.group(1))
    with open(ROOT / "pyproject.toml", "rb") as f:
        declared = f.read().decode()
    for marker in set(markers) - {"not", "and", "or"}:
        assert re.search(rf'markers = \[[^\]]*"{marker}:', declared), f"marker {marker!r} is not declared"
    assert "download.pytorch.org/whl/cpu" in text, "the README says how to get the CPU build of torch elsewhere"


#: Folders of one machine: a doc names a path of the repository (or ``~``) instead.
_MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:work|root|home|Users|mnt|opt|srv|scratch)/\S*")
#: A scratch folder: fine in an example command, never in prose (it is a place on the writer's machine there).
_SCRATCH_PATH = re.compile(r"(?<![\w.~/-])/tmp/\S*")


def _prose_and_code(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    prose, code, in_code = [], [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        (code if in_code else prose).append((n, line))
    return prose, code


def test_docs_name_no_path_of_the_machine_they_were_written_on():
    """README and docs/ name repository paths: a home, work or /opt folder anywhere, or /tmp outside an example
    command in a fenced block, is a path of the machine the doc was written on."""
    bad = []
    for doc in DOCS:
        prose, code = _prose_and_code(doc.read_text(encoding="utf-8"))
        bad += [f"{doc.name}:{n}: {m}" for n, line in prose + code for m in _MACHINE_PATH.findall(line)]
        bad += [f"{doc.name}:{n}: {m}" for n, line in prose for m in _SCRATCH_PATH.findall(line)]
    assert not bad, "\n".join(bad)


def test_the_machine_path_rule_catches_what_it_should():
    prose, code = _prose_and_code("see /work/shared/notes/ipu.md and ~/.cache/rammer\n```\ncp x /tmp/y\n```\n"
                                  "or /tmp/z, `docs/ipu.md`, https://example.org/home/x, /usr/bin/time\n")
    assert [m for _, ln in prose for m in _MACHINE_PATH.findall(ln)] == ["/work/shared/notes/ipu.md"]
    assert [m for _, ln in prose for m in _SCRATCH_PATH.findall(ln)] == ["/tmp/z,"]
    assert [m for _, ln in code for m in _SCRATCH_PATH.findall(ln)] == ["/tmp/y"]
