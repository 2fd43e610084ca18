"""A C translation unit in the kernel IR: plain callable functions and file-scope arrays.

The kernel IR (``kernel_ir.py``) describes GPU-style kernels; a program for a small target without
threads (a microcontroller, a host library) also needs ordinary functions that return a value and
call each other, constant tables at file scope (flash on a microcontroller) and static scratch.
This module adds those, rendered by the same renderer and dialect tables (``render.py``,
``dialects.py``):

- :class:`Function`: ``[static] [noinline] ret name(params) { body }``; statements and expressions
  are the kernel IR's plus :class:`Return`, :class:`Continue`, :class:`Switch`, :class:`Unused`,
  :class:`PointerDecl`, :class:`Addr` (``&name`` or ``&name[index]``) and :class:`PointerCast` (``(T *)x``).
  Calls are ``kernel_ir.Invoke`` (a statement) or :class:`CallFn` (an expression with a value).
- :class:`GlobalArray`: ``[static] [const] T name[size] [= {values}];``.
- :func:`render_unit`: the items in order, preceded by the dialect's definitions the items need
  (e.g. C99's ``RAMMER_NOINLINE`` macro); :func:`render_prototype` for a header.

Identifiers come from the code generator (checked as in ``render.py``); names from a model reach
the text only through :mod:`rammer.codegen.names` (``Comment`` statements, ``comment`` fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import kernel_ir as ir
from .dialects import Dialect
from .names import comment_text
from .render import _ident, _Renderer

__all__ = ["Addr", "PointerCast", "CallFn", "Return", "Continue", "Switch", "Unused", "PointerDecl", "Function",
           "GlobalArray", "Verbatim", "render_function", "render_global", "render_prototype", "render_unit"]


@dataclass(frozen=True)
class Addr:
    """``&name`` (``index`` None) or ``&name[index]``."""

    name: str
    index: ir.Expr | None = None


@dataclass(frozen=True)
class PointerCast:
    """``(T *)a`` (``const T *`` with ``const``)."""

    dtype: str
    a: ir.Expr
    const: bool = False


@dataclass(frozen=True)
class CallFn:
    """``func(args...)`` as an expression: a call of a :class:`Function` of the unit."""

    func: str
    args: tuple[ir.Expr, ...]


@dataclass(frozen=True)
class Return:
    value: ir.Expr | None = None


@dataclass(frozen=True)
class Continue:
    """``continue;`` in the innermost ``For``."""


@dataclass(frozen=True)
class PointerDecl:
    """``[const] T *name = init;`` (``const`` qualifies the pointed-to values), a local pointer."""

    dtype: str
    name: str
    init: ir.Expr
    const: bool = False


@dataclass(frozen=True)
class Switch:
    """``switch (value) { case k: body; break; ... default: body; }`` (integer case labels)."""

    value: ir.Expr
    cases: tuple[tuple[int, tuple], ...]
    default: tuple = ()


@dataclass(frozen=True)
class Unused:
    """``(void)name;``: a parameter the body may not read (no -Wunused-parameter warning)."""

    name: str


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[ir.Param, ...]
    body: tuple
    #: The return type (a kernel IR dtype), None for void.
    returns: str | None = None
    static: bool = False
    #: Never inlined (e.g. so that a profiler can attribute work to it).
    noinline: bool = False
    #: Pointer parameters are ``restrict``.
    restrict: bool = False
    comment: str = ""


@dataclass(frozen=True)
class GlobalArray:
    name: str
    dtype: str
    size: int
    #: Initial values (integers), None for a zero-initialised array.
    values: tuple[int, ...] | None = None
    const: bool = False
    static: bool = True
    comment: str = ""
    #: An array of pointers to ``dtype`` (``const`` then qualifies the pointed-to values).
    pointer: bool = False


@dataclass(frozen=True)
class Verbatim:
    """Text the generator wrote itself (hand-written kernels not yet in the IR); emitted as is."""

    text: str


Item = Function | GlobalArray | Verbatim


class _UnitRenderer(_Renderer):
    def expr(self, e) -> str:
        if isinstance(e, Addr):
            if e.index is None:
                return f"(&{_ident(e.name)})"
            return f"(&{_ident(e.name)}[{self.expr(e.index)}])"
        if isinstance(e, PointerCast):
            return f"(({self.t('const') if e.const else ''}{self.t('type.' + e.dtype)} *){self.expr(e.a)})"
        if isinstance(e, CallFn):
            return f"{_ident(e.func)}({', '.join(self.expr(a) for a in e.args)})"
        return super().expr(e)

    def stmt(self, s, depth: int) -> list[str]:
        pad = "    " * depth
        if isinstance(s, Return):
            return [f"{pad}return;" if s.value is None else f"{pad}return {self.expr(s.value)};"]
        if isinstance(s, Continue):
            return [f"{pad}continue;"]
        if isinstance(s, PointerDecl):
            return [f"{pad}{self.t('const') if s.const else ''}{self.t('type.' + s.dtype)} *{_ident(s.name)} = "
                    f"{self.expr(s.init)};"]
        if isinstance(s, Switch):
            lines = [f"{pad}switch ({self.expr(s.value)}) {{"]
            for label, body in s.cases:
                lines += [f"{pad}case {int(label)}: {{", *self.stmts(body, depth + 1), f"{pad}    break;", f"{pad}}}"]
            lines += [f"{pad}default: {{", *self.stmts(s.default, depth + 1), f"{pad}    break;", f"{pad}}}",
                      f"{pad}}}"]
            return lines
        if isinstance(s, Unused):
            return [f"{pad}(void){_ident(s.name)};"]
        return super().stmt(s, depth)

    def head(self, f: Function) -> str:
        params = []
        for p in f.params:
            if p.pointer:
                q = f"{self.t('restrict')} " if f.restrict else ""
                params.append(f"{self.t('const') if p.const else ''}{self.t('type.' + p.dtype)} *{q}{_ident(p.name)}")
            else:
                params.append(f"{self.t('type.' + p.dtype)} {_ident(p.name)}")
        ret = "void" if f.returns is None else self.t("type." + f.returns)
        prefix = (self.t("fn.static") if f.static else "") + (self.t("fn.noinline") if f.noinline else "")
        return f"{prefix}{ret} {_ident(f.name)}({', '.join(params) or 'void'})"

    def function(self, f: Function) -> str:
        lines = [f"/* {comment_text(f.comment, 200)} */"] if f.comment else []
        lines.append(self.head(f))
        lines.append("{")
        lines += self.stmts(f.body, 1)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def global_array(self, g: GlobalArray, per_line: int = 24) -> str:
        if g.size < 1:
            raise ValueError(f"array {g.name!r} must have at least one element")
        decl = (f"{self.t('fn.static') if g.static else ''}{self.t('const') if g.const else ''}"
                f"{self.t('type.' + g.dtype)} {'*' if g.pointer else ''}{_ident(g.name)}[{int(g.size)}]")
        lines = [f"/* {comment_text(g.comment, 200)} */"] if g.comment else []
        if g.values is None:
            lines.append(decl + ";")
        else:
            if len(g.values) != g.size:
                raise ValueError(f"array {g.name!r}: {len(g.values)} values for {g.size} elements")
            flat = [str(int(x)) for x in g.values]
            rows = [", ".join(flat[i:i + per_line]) for i in range(0, len(flat), per_line)]
            lines.append(decl + " = {\n    " + ",\n    ".join(rows) + "\n};")
        return "\n".join(lines) + "\n"


def render_function(f: Function, dialect: Dialect) -> str:
    return _UnitRenderer(dialect, False).function(f)


def render_global(g: GlobalArray, dialect: Dialect) -> str:
    return _UnitRenderer(dialect, False).global_array(g)


def render_prototype(f: Function, dialect: Dialect) -> str:
    """The declaration of ``f`` (for a header), without the noinline attribute."""
    plain = Function(f.name, f.params, (), f.returns, f.static, False, f.restrict)
    return _UnitRenderer(dialect, False).head(plain) + ";\n"


def render_unit(items: Sequence[Item], dialect: Dialect) -> str:
    """The items in order, after the dialect definitions they use (no includes: the caller's)."""
    r = _UnitRenderer(dialect, False)
    parts = []
    if any(isinstance(i, Function) and i.noinline for i in items):
        parts.append(r.t("fn.noinline_def"))
    for item in items:
        if isinstance(item, Function):
            parts.append(r.function(item))
        elif isinstance(item, GlobalArray):
            parts.append(r.global_array(item))
        elif isinstance(item, Verbatim):
            parts.append(item.text)
        else:
            raise TypeError(f"not a unit item: {item!r}")
    return "".join(parts)
