"""Compile progress: drawn on a terminal only, through stages a backend reports."""

from __future__ import annotations

import io

from helpers import make_model
from onnx import TensorProto, helper

import rammer
from rammer import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _model():
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                      [("x", TensorProto.FLOAT, [4, 4])], [("y", TensorProto.FLOAT, [4, 4])], name="prog")


def test_cpu_compile_reports_stages_on_a_terminal(monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    tty = _Tty()
    with progress.compile_progress("prog", stream=tty):
        rammer.compile(_model(), backend="cpu", cache=False)
    text = tty.getvalue()
    for stage in ("lowering", "scheduling", "planning memory", "compiling kernels"):
        assert stage in text
    assert text.endswith("\r")  # the line is erased at the end


def test_silent_when_not_a_terminal(monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    out = io.StringIO()
    with progress.compile_progress("prog", stream=out):
        progress.stage("lowering")
        progress.step(1, 2, "k")
    assert out.getvalue() == ""
    progress.stage("outside any compile")  # no scope: nothing happens, nothing fails
