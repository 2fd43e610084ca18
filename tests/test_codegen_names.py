"""Hostile model names never change the meaning of emitted source.

Graph, node and tensor names carrying code (triple quotes, backslashes,
newlines, ``*/``, format braces, unusual unicode, very long text) are compiled
with ``--emit``; the emitted ``program.py`` must byte-compile, run without
executing anything the names carry, and keep every name exactly as a value.
"""

from __future__ import annotations

import json
import os
import py_compile
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.cpu.runtime import HostStep
from rammer.cli import main
from rammer.codegen.names import c_string, comment_text, identifier, py_string
from rammer.errors import RammerError
from rammer.time_limits import scaled_limit

MARKER = "PWNED_MARKER"


def _payloads(marker: str) -> list[str]:
    """Names that would run ``touch marker`` if pasted into source unescaped, one per way out."""
    code = f"__import__('pathlib').Path({marker!r}).touch()"
    return [
        f'"""; {code}; """',                      # out of a triple-quoted docstring
        f"'''; {code}; '''",
        f"\\\"\"\"\n{code}\n\"\"\"\\",             # backslash before the quotes, newlines
        f"x'; {code}; '",                         # out of a one-quoted literal
        f'x"); {code}; print("',
        f"*/ {code} /* \\",                       # C comment terminators, trailing backslash
        f"{{kernels}} {{{{ }}}} %s {code}",       # format-string fields
        f"\u202e\u2028\u00e9\U0001d518 {code}\r\n#",  # bidi override, line separator, astral plane
        "\\N{BULLET} \\x00 \\u0041 " + code,      # escape sequences as literal text
        "long-" + "\u00e9\"\\" * 3000 + code,     # very long
    ]


def _hostile_model(marker: str) -> tuple[onnx.ModelProto, list[str], list[str]]:
    p = _payloads(marker)
    x, w, h, y, z = p[2], p[3], p[4], p[8], p[9]
    weights = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), w)
    nodes = [helper.make_node("Gemm", [x, w], [h], name=p[5]),
             helper.make_node("Relu", [h], [y], name=p[6]),
             helper.make_node("Neg", [h], [z], name=p[7])]
    graph = helper.make_graph(nodes, p[0], [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info(z, TensorProto.FLOAT, [2, 4])], [weights])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), [x], [y, z]


def _fallback_model(marker: str) -> onnx.ModelProto:
    """A model with a host step: its fallback reason reaches STEPS in program.py."""
    p = _payloads(marker)
    nodes = [helper.make_node("Relu", [p[1]], [p[3]], name=p[0]),
             helper.make_node("Cast", [p[3]], [p[4]], to=TensorProto.DOUBLE, name=p[2])]
    graph = helper.make_graph(nodes, p[5], [helper.make_tensor_value_info(p[1], TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(p[4], TensorProto.DOUBLE, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAMMER_CACHE_DIR", str(tmp_path / "cache"))


def _check_emitted(out: Path, workdir: Path) -> dict:
    """py_compile accepts program.py, importing it runs nothing, JSON files parse; its globals."""
    source = out / "program.py"
    py_compile.compile(str(source), cfile=str(workdir / "program.pyc"), doraise=True)
    checked = subprocess.run([sys.executable, "-m", "py_compile", str(source)], capture_output=True, text=True,
                             timeout=scaled_limit(120), cwd=workdir)
    assert checked.returncode == 0, checked.stderr
    for path in out.glob("*.json"):
        json.loads(path.read_text(encoding="utf-8"))
    assert not list(out.glob(".rammer-emit-*")) and not list(out.parent.glob(".rammer-emit-*"))
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        ns = runpy.run_path(str(source), run_name="not_main")  # module level only: constants
    finally:
        os.chdir(cwd)
    assert not (workdir / MARKER).exists(), "importing the emitted program ran code from a model name"
    return ns


def test_hostile_names_emit_a_program_that_runs_and_keeps_names_as_data(tmp_path, private_cache):
    m, inputs, outputs = _hostile_model(MARKER)
    path = tmp_path / "hostile.onnx"
    onnx.save(m, path)
    out = tmp_path / "emit"
    assert main(["compile", str(path), "--backend", "cpu", "--emit", str(out)]) == 0
    ns = _check_emitted(out, tmp_path)
    assert ns["MODEL"] == m.graph.name
    assert list(ns["INPUTS"]) == inputs and list(ns["OUTPUTS"]) == outputs
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["model"] == m.graph.name
    # the docstring holds only sanitized text
    doc = ns["__doc__"]
    assert '"' not in doc and "\\" not in doc and comment_text(m.graph.name) in doc
    run = subprocess.run([sys.executable, str(out / "program.py")], capture_output=True, text=True,
                         timeout=scaled_limit(300), cwd=tmp_path, env=dict(os.environ, NUMBA_NUM_THREADS="2"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert not (tmp_path / MARKER).exists(), "running the emitted program ran code from a model name"
    # it printed both outputs, and computed the model: Relu(h) and -h share h
    lines = [ln for ln in run.stdout.splitlines() if " mean " in ln]
    assert len(lines) == 2
    means = [float(ln.split(" mean ")[1].split()[0]) for ln in lines]
    want = rammer.compile(m, backend="reference")
    feeds = {inputs[0]: np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    ref = want(feeds)
    np.testing.assert_allclose(means, [float(ref[o].mean()) for o in outputs], rtol=1e-4, atol=1e-5)


def test_hostile_names_in_fallback_reasons_stay_literals(tmp_path, private_cache):
    m = _fallback_model(MARKER)
    out = tmp_path / "emit"
    model = rammer.compile(m, backend="cpu", emit=str(out))
    ns = _check_emitted(out, tmp_path)
    assert ns["MODEL"] == m.graph.name
    hosts = [s for s in ns["STEPS"] if "host" in s]
    assert hosts and hosts == [{"host": s.node_index, "reason": s.reason}
                               for s in model.executable.program.steps if isinstance(s, HostStep)]
    run = subprocess.run([sys.executable, str(out / "program.py")], capture_output=True, text=True,
                         timeout=scaled_limit(300), cwd=tmp_path, env=dict(os.environ, NUMBA_NUM_THREADS="2"))
    assert "needs the reference implementation" in run.stderr, run.stderr[-3000:]
    assert not (tmp_path / MARKER).exists()


def test_executable_source_compiles_for_every_payload_as_graph_name(tmp_path, private_cache, monkeypatch):
    """The in-memory source too (what ``executable.source`` returns), one payload at a time."""
    monkeypatch.chdir(tmp_path)
    m, _, _ = _hostile_model(MARKER)
    for name in _payloads(MARKER):
        m.graph.name = name
        source = rammer.compile(m, backend="cpu").executable.source
        code = compile(source, "program.py", "exec")
        ns: dict = {"__name__": "not_main", "__file__": "program.py"}
        exec(code, ns)  # module level: imports and constants only
        assert ns["MODEL"] == name
    assert not Path(MARKER).exists()


def test_emit_is_atomic(tmp_path, private_cache, monkeypatch):
    """An error while writing leaves no half-written file and no temporary folder."""
    from rammer.backends.cpu import emit as emit_mod

    m, _, _ = _hostile_model(MARKER)
    out = tmp_path / "emit"
    out.mkdir()
    (out / "program.py").write_text("old\n")
    real = emit_mod._write
    calls = []

    def failing(path: str, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 3:
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(emit_mod, "_write", failing)
    with pytest.raises(RammerError, match="--emit"):
        rammer.compile(m, backend="cpu", emit=str(out))
    assert sorted(p.name for p in out.iterdir()) == ["program.py"]
    assert (out / "program.py").read_text() == "old\n"
    fresh = tmp_path / "fresh"
    with pytest.raises(RammerError):
        calls.clear()
        rammer.compile(m, backend="cpu", emit=str(fresh))
    assert not fresh.exists() and not list(tmp_path.glob(".rammer-emit-*"))
    monkeypatch.setattr(emit_mod, "_write", real)
    (out / "schedule3.json").write_text("{}")  # from an earlier emit with more segments
    (out / "notes.txt").write_text("mine")
    rammer.compile(m, backend="cpu", emit=str(out))
    assert "MODEL = " in (out / "program.py").read_text(encoding="utf-8")
    assert sorted(p.name for p in out.iterdir()) == ["consts.bin", "notes.txt", "program.py", "report.json",
                                                    "schedule.json", "tables.npz"]


def test_names_module_escapes():
    """The escaping functions the emitters rely on."""
    for name in _payloads(MARKER):
        assert eval(py_string(name)) == name  # noqa: S307 - a literal, checked to be one
        text = comment_text(name)
        assert "\n" not in text and "*/" not in text and '"' not in text and "\\" not in text
        assert len(text) <= 80
        lit = c_string(name)
        assert lit.startswith('"') and lit.endswith('"') and "\n" not in lit and '"' not in lit[1:-1]
        ident = identifier("t", 3, name)
        assert ident.isidentifier() and ident.startswith("t3")
