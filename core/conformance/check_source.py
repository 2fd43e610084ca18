"""Generated source compiles with the backend's declared compiler.

Only for backends that declare ``capabilities.emits_source``.  The contract:
the executable exposes what it generated as ``executable.source`` (one
string) or ``executable.sources`` (file name -> text).  The source is
compiled with ``capabilities.source_compiler`` when that program is on PATH
(else the check skips, saying so); Python source is compiled with Python
itself.  ``capabilities.extra["source_compile_args"]`` may give the command
line, with ``{compiler}``, ``{src}`` and ``{out}`` placeholders.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..time_limits import scaled_limit
from .target import Target
from .tiny import tiny_graph

_SUFFIX = {"python": ".py", "c": ".c", "c++": ".cpp", "cpp": ".cpp", "cuda": ".cu", "hip": ".hip",
           "opencl": ".cl", "metal": ".metal"}
_DEFAULT_ARGS = ["{compiler}", "-c", "{src}", "-o", "{out}"]


def _sources(executable: Any) -> dict[str, str]:
    many = getattr(executable, "sources", None)
    if many:
        return {str(k): str(v) for k, v in dict(many).items()}
    one = getattr(executable, "source", None)
    return {"generated": str(one)} if one else {}


def test_generated_source_compiles(conformance_target: Target, tmp_path: Path) -> None:
    target = conformance_target
    language = target.caps.emits_source
    if not language:
        pytest.skip("the backend does not declare capabilities.emits_source")
    compiled = target.compile(tiny_graph(target))
    sources = _sources(compiled.executable)
    assert sources, (f"backend '{target.name}' declares emits_source={language!r} but its executable "
                     f"({type(compiled.executable).__name__}) has neither .source nor .sources")
    compiler = target.caps.source_compiler
    if language == "python" and not compiler:
        for name, text in sources.items():
            compile(text, name, "exec")  # a SyntaxError fails the check with the line
        return
    if not compiler:
        pytest.skip(f"the backend emits {language} but declares no capabilities.source_compiler")
    if shutil.which(compiler) is None:
        pytest.skip(f"the declared source compiler '{compiler}' is not on PATH here")
    args = list(target.caps.extra.get("source_compile_args", _DEFAULT_ARGS))
    suffix = _SUFFIX.get(language.lower(), ".src")
    for i, (name, text) in enumerate(sources.items()):
        src = tmp_path / f"src{i}{suffix if not Path(name).suffix else Path(name).suffix}"
        src.write_text(text)
        out = tmp_path / f"src{i}.o"
        cmd = [a.format(compiler=compiler, src=src, out=out) for a in args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=scaled_limit(600), check=False)
        assert proc.returncode == 0, (f"{' '.join(cmd)} failed on the generated '{name}' "
                                      f"(exit {proc.returncode}):\n{(proc.stderr or proc.stdout)[-3000:]}")
