"""C translation units in the kernel IR (functions that return and call, file-scope arrays):
rendered with the C99 dialect, compiled with -std=c99 -Wall -Wextra -Werror -pedantic and run."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from rammer.codegen import kernel_ir as ir
from rammer.codegen.cunit import (
    Addr,
    CallFn,
    Continue,
    Function,
    GlobalArray,
    PointerCast,
    Return,
    Verbatim,
    render_prototype,
    render_unit,
)
from rammer.codegen.dialects import DIALECTS

C, V = ir.c, ir.v


def _unit():
    table = GlobalArray("tbl", "int16", 4, (-300, 7, 1000, -1), const=True, comment="a */ table")
    scratch = GlobalArray("words", "int32", 2)
    # int32 add_pos(const int16 *t, int n): sum of the positive entries (continue skips the others)
    add_pos = Function("add_pos", (ir.Param("t", "int16", True, True), ir.Param("n", "int")), (
        ir.Decl("int32", "s", C(0)),
        ir.For("i", C(0), V("n"), C(1), (
            ir.If(ir.BinOp("<", ir.Load("t", V("i")), C(0)), (Continue(),)),
            ir.Assign("s", ir.BinOp("+", V("s"), ir.Cast("int32", ir.Load("t", V("i"))))))),
        Return(V("s"))), returns="int32", static=True, noinline=True)
    run = Function("unit_run", (ir.Param("out", "int8", True), ir.Param("k", "int")), (
        ir.If(ir.BinOp("<", V("k"), C(0)), (Return(C(-1)),)),
        ir.Store("words", C(0), CallFn("add_pos", (V("tbl"), C(4)))),
        ir.Store("words", C(1), CallFn("add_pos", (Addr("tbl", C(1)), C(3)))),
        ir.Decl("int32", "b", ir.BinOp(">>", ir.Load("words", C(0)), V("k"))),
        ir.Store("out", C(0), ir.Cast("int8", ir.BinOp("&", V("b"), C(0x7F)))),
        ir.Invoke("memcpy", (ir.BinOp("+", V("out"), C(1)), PointerCast("int8", Addr("words", C(1)), const=True),
                             C(4))),
        Return(C(0))), returns="int", noinline=True)
    return [Verbatim("#include <stdint.h>\n#include <string.h>\n"), table, scratch, add_pos, run], run


def test_unit_text():
    items, run = _unit()
    text = render_unit(items, DIALECTS["c99"])
    assert "static const int16_t tbl[4] = {\n    -300, 7, 1000, -1\n};" in text
    assert "static int32_t words[2];" in text
    assert "static RAMMER_NOINLINE int32_t add_pos(const int16_t *t, int n)" in text
    assert "#define RAMMER_NOINLINE __attribute__((noinline))" in text
    assert "continue;" in text and "(&tbl[1])" in text and "((const int8_t *)(&words[1]))" in text
    assert "a */ table" not in text
    assert render_prototype(run, DIALECTS["c99"]) == "int unit_run(int8_t *out, int k);\n"
    # the same unit in OpenCL's spelling of the types
    assert "static const short tbl[4]" in render_unit(items[1:], DIALECTS["opencl"])


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")
def test_unit_compiles_warning_free_and_runs(tmp_path):
    items, _ = _unit()
    src = tmp_path / "unit.c"
    src.write_text(render_unit(items, DIALECTS["c99"]))
    lib = tmp_path / "unit.so"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-shared", "-fPIC",
                    str(src), "-o", str(lib)], check=True, capture_output=True)
    f = ctypes.CDLL(os.fspath(lib)).unit_run
    out = (ctypes.c_int8 * 5)()
    assert f(out, 1) == 0
    assert out[0] == (1007 >> 1) & 0x7F and bytes(out)[1:5] == (1007).to_bytes(4, "little")
    assert f(out, -1) == -1
