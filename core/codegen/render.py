"""One C-style renderer for the kernel IR, parameterised by a dialect table.

``render_kernel(kernel, dialect)`` and ``render_module(kernels, dialect)``
produce deterministic source text.  Identifiers in the IR are chosen by code
generators, never taken from a model (they are checked); model names reach
the text only as sanitized comments (:func:`rammer.codegen.names.comment_text`).

``mark=True`` wraps every spelling the dialect table contributed, with its
named operands, in control characters; :func:`neutral` turns such text into
the same text with each spelling replaced by its neutral key.  Two dialects'
marked renderings of one kernel give identical neutral texts exactly when
they differ only in their tables: the test that lets OpenCL execution stand
for the CUDA text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import kernel_ir as ir
from .dialects import Dialect
from .names import comment_text

__all__ = ["render_kernel", "render_module", "neutral"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BIN = {"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||", "&", "|", "^", "<<", ">>"}
# Markers of mark=True output: \x01key\x02 spelled text \x03, operands inside as \x04name\x06value\x05.
_OPEN, _MID, _CLOSE, _ARG, _ARGSEP, _ARGEND = "\x01", "\x02", "\x03", "\x04", "\x06", "\x05"


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"{name!r} is not an identifier (generated code takes identifiers from the code "
                         f"generator, never from a model)")
    return name


class _Renderer:
    def __init__(self, dialect: Dialect, mark: bool):
        self.d = dialect
        self.mark = mark

    def t(self, key: str, **operands: str) -> str:
        if not self.mark:
            return self.d.spell(key, **operands)
        wrapped = {k: f"{_ARG}{k}{_ARGSEP}{v}{_ARGEND}" for k, v in operands.items()}
        return f"{_OPEN}{key}{_MID}{self.d.spell(key, **wrapped)}{_CLOSE}"

    # -- expressions ----------------------------------------------------------------
    def expr(self, e: ir.Expr) -> str:
        if isinstance(e, ir.Const):
            if e.dtype == "float":
                return self.t("literal.float", value=repr(float(e.value)))
            if e.dtype == "bool":
                return "1" if e.value else "0"
            return str(int(e.value))
        if isinstance(e, ir.Var):
            return _ident(e.name)
        if isinstance(e, ir.Special):
            return self.t(f"special.{e.what}")
        if isinstance(e, ir.BinOp):
            if e.op not in _BIN:
                raise ValueError(f"unknown binary operator {e.op!r}")
            return f"({self.expr(e.a)} {e.op} {self.expr(e.b)})"
        if isinstance(e, ir.UnOp):
            if e.op not in ("-", "!"):
                raise ValueError(f"unknown unary operator {e.op!r}")
            return f"({e.op}{self.expr(e.a)})"
        if isinstance(e, ir.Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"
        if isinstance(e, ir.Cast):
            return f"(({self.t('type.' + e.dtype)}){self.expr(e.a)})"
        if isinstance(e, ir.Call):
            return self.t(f"math.{e.func}", **dict(zip(("x", "y"), (self.expr(a) for a in e.args))))
        if isinstance(e, ir.Load):
            return f"{_ident(e.buffer)}[{self.expr(e.index)}]"
        raise TypeError(f"not an IR expression: {e!r}")

    # -- statements -----------------------------------------------------------------
    def stmts(self, body: Sequence[ir.Stmt], depth: int) -> list[str]:
        out: list[str] = []
        for s in body:
            out.extend(self.stmt(s, depth))
        return out

    def stmt(self, s: ir.Stmt, depth: int) -> list[str]:
        pad = "    " * depth
        if isinstance(s, ir.Decl):
            init = f" = {self.expr(s.init)}" if s.init is not None else ""
            return [f"{pad}{self.t('type.' + s.dtype)} {_ident(s.name)}{init};"]
        if isinstance(s, ir.Assign):
            return [f"{pad}{_ident(s.name)} = {self.expr(s.value)};"]
        if isinstance(s, ir.Store):
            return [f"{pad}{_ident(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};"]
        if isinstance(s, ir.For):
            var = _ident(s.var)
            head = (f"{pad}for (int {var} = {self.expr(s.start)}; {var} < {self.expr(s.stop)}; "
                    f"{var} += {self.expr(s.step)}) {{")
            return [head, *self.stmts(s.body, depth + 1), f"{pad}}}"]
        if isinstance(s, ir.While):
            return [f"{pad}while ({self.expr(s.cond)}) {{", *self.stmts(s.body, depth + 1), f"{pad}}}"]
        if isinstance(s, ir.Invoke):
            return [f"{pad}{_ident(s.func)}({', '.join(self.expr(a) for a in s.args)});"]
        if isinstance(s, ir.If):
            lines = [f"{pad}if ({self.expr(s.cond)}) {{", *self.stmts(s.then, depth + 1)]
            if s.orelse:
                lines += [f"{pad}}} else {{", *self.stmts(s.orelse, depth + 1)]
            return lines + [f"{pad}}}"]
        if isinstance(s, ir.Barrier):
            return [pad + self.t("barrier")]
        if isinstance(s, ir.Fence):
            return [pad + self.t("fence")]
        if isinstance(s, ir.AtomicAdd):
            call = self.t("atomic_add", buf=_ident(s.buffer), idx=self.expr(s.index), val=self.expr(s.value))
            if s.result:
                return [f"{pad}{_ident(s.result)} = {call};"]
            return [f"{pad}(void){call};"]
        if isinstance(s, ir.Shuffle):
            call = self.t(f"shuffle.{s.kind}", val=self.expr(s.value), delta=self.expr(s.delta))
            return [f"{pad}{_ident(s.result)} = {call};"]
        if isinstance(s, ir.Comment):
            return [f"{pad}/* {comment_text(s.text, 200)} */"]
        if isinstance(s, ir.Block):
            return [pad + "{", *self.stmts(s.body, depth + 1), pad + "}"]
        raise TypeError(f"not an IR statement: {s!r}")

    # -- kernels ----------------------------------------------------------------------
    def kernel(self, k: ir.Kernel) -> str:
        params = []
        for p in k.params:
            if p.pointer:
                if p.space not in ("global", "local"):
                    raise ValueError(f"unknown address space {p.space!r} of parameter {p.name!r}")
                params.append(f"{self.t(p.space)}{self.t('const') if p.const else ''}{self.t('type.' + p.dtype)} *"
                              f"{self.t('restrict')} {_ident(p.name)}")
            else:
                params.append(f"{self.t('type.' + p.dtype)} {_ident(p.name)}")
        prologue = []
        if "c99.block_params" in self.d.table and not k.device:
            params.append(self.t("c99.block_params"))
            prologue.append("    " + self.t("c99.unused"))
        if k.device:
            head = f"{self.t('device_fn')} {_ident(k.name)}({', '.join(params)})"
        else:
            head = f"{self.t('kernel')} {self.t('launch_bounds', threads=str(k.threads))}{_ident(k.name)}" \
                   f"({', '.join(params)})"
        lines = []
        for key, value in k.meta:
            lines.append(f"/* {comment_text(key, 40)}: {comment_text(value, 160)} */")
        lines.append(head + " {")
        for sh in k.shared:
            lines.append("    " + self.t("shared_decl", dtype=self.t("type." + sh.dtype), name=_ident(sh.name),
                                         size=str(int(sh.size))))
        lines += prologue + self.stmts(k.body, 1)
        lines.append("}")
        return "\n".join(lines)


def render_kernel(kernel: ir.Kernel, dialect: Dialect, mark: bool = False) -> str:
    return _Renderer(dialect, mark).kernel(kernel)


def render_module(kernels: Sequence[ir.Kernel], dialect: Dialect, title: str = "", mark: bool = False) -> str:
    """A self-contained source file: the dialect's header, a title comment and the kernels in order."""
    r = _Renderer(dialect, mark)
    parts = [r.t("header")]
    if title:
        parts.append(f"/* {comment_text(title, 200)} */\n")
    parts += [r.kernel(k) + "\n" for k in kernels]
    return "\n".join(parts)


_SEGMENT = re.compile(r"\x01([^\x02]*)\x02")


def neutral(marked: str) -> str:
    """``marked`` (from ``mark=True``) with every dialect spelling replaced by ``<key>(name=operand, ...)``."""
    out: list[str] = []
    i = 0
    while i < len(marked):
        ch = marked[i]
        if ch == _OPEN:
            key_end = marked.index(_MID, i)
            key = marked[i + 1:key_end]
            j, depth, args = key_end + 1, 0, []
            while True:  # find the matching close, collecting this level's operands
                c = marked[j]
                if c == _OPEN:
                    depth += 1
                elif c == _CLOSE:
                    if depth == 0:
                        break
                    depth -= 1
                elif c == _ARG and depth == 0:
                    sep = marked.index(_ARGSEP, j)
                    name = marked[j + 1:sep]
                    k, d2 = sep + 1, 0
                    while True:
                        c2 = marked[k]
                        if c2 == _ARG:
                            d2 += 1
                        elif c2 == _ARGEND:
                            if d2 == 0:
                                break
                            d2 -= 1
                        k += 1
                    args.append((name, neutral(marked[sep + 1:k])))
                    j = k
                j += 1
            inner = ", ".join(f"{n}={v}" for n, v in sorted(args))
            out.append(f"<{key}>({inner})" if args else f"<{key}>")
            i = j + 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)
