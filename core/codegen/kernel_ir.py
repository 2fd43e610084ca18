"""A small kernel IR for GPU-style (and C) code: one tree, rendered per dialect by ``render.py``.

Everything is a frozen dataclass.  Expressions: constants, variables, the
dialect's special values (thread and block ids, warp size), arithmetic,
comparisons, selects, casts, math calls, loads.  Statements: declarations,
assignments, stores, ``for`` loops over ranges, ``if``, block barriers,
memory fences, atomics, warp shuffles, comments.  A :class:`Kernel` has typed
parameters (pointers into global memory, scalars), shared arrays, and a body.

The IR says *what* (``Special("thread_id")``, ``Barrier()``,
``Shuffle("down", v, d)``); the dialect table says how each is spelled, so a
kernel is written once for CUDA, HIP, OpenCL and C99.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Expr", "Const", "Var", "Special", "BinOp", "UnOp", "Select", "Cast", "Call", "Load", "Stmt", "Decl",
           "Assign", "Store", "For", "If", "While", "Invoke", "Barrier", "Fence", "AtomicAdd", "Shuffle", "Comment",
           "Block", "Param", "SharedArray", "Kernel", "c", "v", "SPECIALS", "MATH_FUNCS", "DTYPES"]

#: Scalar types the IR knows (the dialect table gives their spelling).
DTYPES = ("float", "int", "uint", "long", "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32")
#: The dialect-dependent values a kernel may read.
SPECIALS = ("thread_id", "block_id", "block_dim", "grid_dim", "warp_size", "lane_id")
#: Math functions (each dialect maps them to its own names).
MATH_FUNCS = ("exp", "log", "sqrt", "rsqrt", "tanh", "fabs", "fmax", "fmin", "floor", "ceil", "erf", "pow")


@dataclass(frozen=True)
class Const:
    value: float | int | bool
    dtype: str = "int"


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Special:
    what: str

    def __post_init__(self) -> None:
        if self.what not in SPECIALS:
            raise ValueError(f"unknown special value {self.what!r} (one of {SPECIALS})")


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * / % < <= > >= == != && || & | ^ << >>
    a: Expr
    b: Expr


@dataclass(frozen=True)
class UnOp:
    op: str  # - !
    a: Expr


@dataclass(frozen=True)
class Select:
    cond: Expr
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Cast:
    dtype: str
    a: Expr


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if self.func not in MATH_FUNCS:
            raise ValueError(f"unknown math function {self.func!r} (one of {MATH_FUNCS})")


@dataclass(frozen=True)
class Load:
    buffer: str
    index: Expr


Expr = Const | Var | Special | BinOp | UnOp | Select | Cast | Call | Load


@dataclass(frozen=True)
class Decl:
    dtype: str
    name: str
    init: Expr | None = None


@dataclass(frozen=True)
class Assign:
    name: str
    value: Expr


@dataclass(frozen=True)
class Store:
    buffer: str
    index: Expr
    value: Expr


@dataclass(frozen=True)
class For:
    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class If:
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class Barrier:
    """Every thread of the block waits here (and sees the block's shared-memory writes)."""


@dataclass(frozen=True)
class Fence:
    """Global-memory writes before it are visible to other blocks before those after it."""


@dataclass(frozen=True)
class AtomicAdd:
    buffer: str
    index: Expr
    value: Expr
    result: str | None = None  # variable receiving the old value


@dataclass(frozen=True)
class Shuffle:
    """``result = value`` of the lane ``delta`` above this one (``kind`` "down") or xor-ed with it."""

    kind: str
    result: str
    value: Expr
    delta: Expr


@dataclass(frozen=True)
class While:
    """``while (cond) body``; used for a spin wait, which only one thread of a block runs."""

    cond: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Invoke:
    """``func(args...);``: a call of a device function (an rKernel) generated in the same module."""

    func: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Block:
    body: tuple[Stmt, ...]


Stmt = Decl | Assign | Store | For | If | While | Invoke | Barrier | Fence | AtomicAdd | Shuffle | Comment | Block


@dataclass(frozen=True)
class Param:
    name: str
    dtype: str
    pointer: bool = False
    const: bool = False
    space: str = "global"  # a pointer's address space: "global" or "local" (a block's shared memory)


@dataclass(frozen=True)
class SharedArray:
    name: str
    dtype: str
    size: int


@dataclass(frozen=True)
class Kernel:
    """A ``__global__``/``__kernel`` entry (``device=False``) or a device function (``device=True``)."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    shared: tuple[SharedArray, ...] = ()
    threads: int = 256
    device: bool = False
    meta: tuple[tuple[str, str], ...] = field(default=())


def c(value: float | int | bool) -> Const:
    """A constant of the obvious type."""
    if isinstance(value, bool):
        return Const(value, "bool")
    if isinstance(value, float):
        return Const(value, "float")
    return Const(int(value), "int")


def v(name: str) -> Var:
    return Var(name)
