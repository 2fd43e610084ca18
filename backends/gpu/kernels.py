"""GPU rKernels written once in the kernel IR (rendered for CUDA, HIP and OpenCL by ``rammer.codegen``).

Each builder returns a :class:`~rammer.codegen.kernel_ir.Kernel` and states
its threads per block and shared memory; block barriers are passed by every
thread of the block (no barrier under a thread-dependent branch, and none
under a branch on a value loaded inside a loop: PoCL miscompiles that shape,
see shared/notes/gpu.md).  A kernel's block index is its rTask index.

So far: flat elementwise maps, a shared-memory tiled MatMul (one output tile
per block, K in tiles) and a row softmax (block-wide max and sum through
shared memory).  The other op families and the persistent whole-model
program are future work (issue 22).
"""

from __future__ import annotations

from rammer.codegen import kernel_ir as ir
from rammer.codegen.kernel_ir import BinOp, Call, Load, Special, c, v

from .ir_helpers import gid, neg_inf

__all__ = ["elementwise", "matmul_tiled", "softmax_rows", "UNARY", "BINARY"]

#: Unary elementwise ops as IR of one operand ``x``.
UNARY = {
    "Relu": lambda x: Call("fmax", (x, c(0.0))),
    "Tanh": lambda x: Call("tanh", (x,)),
    "Exp": lambda x: Call("exp", (x,)),
    "Sigmoid": lambda x: BinOp("/", c(1.0), BinOp("+", c(1.0), Call("exp", (ir.UnOp("-", x),)))),
    "Abs": lambda x: Call("fabs", (x,)),
    "Neg": lambda x: ir.UnOp("-", x),
}
BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}


def elementwise(name: str, op: str, threads: int = 256) -> ir.Kernel:
    """``y[i] = op(a[i])`` or ``y[i] = a[i] op b[i]`` for ``i < n``; one thread per element."""
    i = v("i")
    if op in UNARY:
        params = (ir.Param("a", "float", True, True), ir.Param("y", "float", True), ir.Param("n", "int"))
        value = UNARY[op](Load("a", i))
    elif op in BINARY:
        params = (ir.Param("a", "float", True, True), ir.Param("b", "float", True, True),
                  ir.Param("y", "float", True), ir.Param("n", "int"))
        value = BinOp(BINARY[op], Load("a", i), Load("b", i))
    else:
        raise ValueError(f"no GPU elementwise kernel for {op}")
    body = (ir.Decl("int", "i", gid()), ir.If(BinOp("<", i, v("n")), (ir.Store("y", i, value),)))
    return ir.Kernel(name, params, body, threads=threads, meta=(("op", op),))


def matmul_tiled(name: str, tile: int = 16) -> ir.Kernel:
    """``C[M, N] = A[M, K] @ B[K, N]`` (row-major): each block computes one ``tile x tile`` output
    tile with ``tile * tile`` threads, staging ``A`` and ``B`` tiles in shared memory."""
    t = tile
    tx, ty = v("tx"), v("ty")
    row, col = v("row"), v("col")
    k0 = v("k0")
    a_idx = BinOp("+", BinOp("*", row, v("K")), BinOp("+", k0, tx))
    b_idx = BinOp("+", BinOp("*", BinOp("+", k0, ty), v("N")), col)
    in_a = BinOp("&&", BinOp("<", row, v("M")), BinOp("<", BinOp("+", k0, tx), v("K")))
    in_b = BinOp("&&", BinOp("<", BinOp("+", k0, ty), v("K")), BinOp("<", col, v("N")))
    sh = BinOp("+", BinOp("*", ty, c(t)), tx)
    inner = ir.For("kk", c(0), c(t), c(1), (
        ir.Assign("acc", BinOp("+", v("acc"), BinOp("*", Load("As", BinOp("+", BinOp("*", ty, c(t)), v("kk"))),
                                                       Load("Bs", BinOp("+", BinOp("*", v("kk"), c(t)), tx))))),))
    body = (
        ir.Decl("int", "tiles_n", BinOp("/", BinOp("+", v("N"), c(t - 1)), c(t))),
        ir.Decl("int", "tx", BinOp("%", Special("thread_id"), c(t))),
        ir.Decl("int", "ty", BinOp("/", Special("thread_id"), c(t))),
        ir.Decl("int", "row", BinOp("+", BinOp("*", BinOp("/", Special("block_id"), v("tiles_n")), c(t)), ty)),
        ir.Decl("int", "col", BinOp("+", BinOp("*", BinOp("%", Special("block_id"), v("tiles_n")), c(t)), tx)),
        ir.Decl("float", "acc", c(0.0)),
        ir.For("k0", c(0), v("K"), c(t), (
            ir.Store("As", sh, ir.Select(in_a, Load("A", a_idx), c(0.0))),
            ir.Store("Bs", sh, ir.Select(in_b, Load("B", b_idx), c(0.0))),
            ir.Barrier(),
            inner,
            ir.Barrier(),
        )),
        ir.If(BinOp("&&", BinOp("<", row, v("M")), BinOp("<", col, v("N"))),
              (ir.Store("C", BinOp("+", BinOp("*", row, v("N")), col), v("acc")),)),
    )
    params = (ir.Param("A", "float", True, True), ir.Param("B", "float", True, True), ir.Param("C", "float", True),
              ir.Param("M", "int"), ir.Param("N", "int"), ir.Param("K", "int"))
    return ir.Kernel(name, params, body, shared=(ir.SharedArray("As", "float", t * t),
                                                  ir.SharedArray("Bs", "float", t * t)),
                     threads=t * t, meta=(("op", "MatMul"), ("tile", f"{t}x{t}")))


def softmax_rows(name: str, threads: int = 128, log: bool = False) -> ir.Kernel:
    """Softmax (``log``: LogSoftmax) over the last axis of ``x[rows, n]``: one block per row; the
    row's max and sum are reduced through shared memory (a tree over ``threads`` lanes, every
    thread at every barrier)."""
    tid = v("tid")
    base = BinOp("*", Special("block_id"), v("n"))

    def reduce(kind: str) -> tuple[ir.Stmt, ...]:
        combine = (lambda a, b: Call("fmax", (a, b))) if kind == "max" else (lambda a, b: BinOp("+", a, b))
        return (ir.Comment(f"tree {kind} over the block"), *tree_reduce(combine, threads))

    body = (
        ir.Decl("int", "tid", Special("thread_id")),
        ir.Decl("float", "part", neg_inf()),
        ir.For("j", tid, v("n"), c(threads), (
            ir.Assign("part", Call("fmax", (v("part"), Load("x", BinOp("+", base, v("j")))))),)),
        *reduce("max"),
        ir.Decl("float", "row_max", v("part")),
        ir.Assign("part", c(0.0)),
        ir.For("j", tid, v("n"), c(threads), (
            ir.Assign("part", BinOp("+", v("part"), Call("exp", (BinOp("-", Load("x", BinOp("+", base, v("j"))),
                                                                    v("row_max")),)))),)),
        *reduce("sum"),
        ir.Decl("float", "log_sum", Call("log", (v("part"),))),
        ir.For("j", tid, v("n"), c(threads), (
            ir.Store("y", BinOp("+", base, v("j")),
                     BinOp("-", BinOp("-", Load("x", BinOp("+", base, v("j"))), v("row_max")), v("log_sum")) if log
                     else BinOp("/", Call("exp", (BinOp("-", Load("x", BinOp("+", base, v("j"))), v("row_max")),)),
                                v("part"))),)),
    )
    params = (ir.Param("x", "float", True, True), ir.Param("y", "float", True), ir.Param("n", "int"))
    return ir.Kernel(name, params, body, shared=(ir.SharedArray("red", "float", threads),), threads=threads,
                     meta=(("op", "LogSoftmax" if log else "Softmax"),))


def tree_reduce(combine, threads: int, part: str = "part", buf: str = "red") -> tuple[ir.Stmt, ...]:
    """Tree reduction of each thread's ``part`` through shared ``buf``: every thread passes every
    barrier and ends with the block's result in ``part``.  The halving steps are a loop, not
    unrolled: PoCL's work-group compiler took 45-110 s on programs with two unrolled 8-step trees
    (a barrier per step; fuzz cases graphs:15100257, mutants:15100126), one loop barrier each is quick."""
    tid, k = v("tid"), v("red_k")
    step = BinOp(">>", c(threads // 2), k)
    return (
        ir.Store(buf, tid, v(part)),
        ir.Barrier(),
        ir.For("red_k", c(0), c(len(_halvings(threads))), c(1), (
            ir.If(BinOp("<", tid, step), (ir.Store(buf, tid, combine(Load(buf, tid), Load(buf, BinOp("+", tid, step)))),)),
            ir.Barrier(),
        )),
        ir.Assign(part, Load(buf, c(0))),
        ir.Barrier(),
    )


def _halvings(threads: int) -> list[int]:
    out, s = [], threads // 2
    while s >= 1:
        out.append(s)
        s //= 2
    return out
