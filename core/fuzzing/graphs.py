"""Seeded random ONNX graphs for differential testing.

``random_model(seed)`` builds a valid model of 2-12 nodes: every node takes
its inputs from the graph inputs, initializers or earlier nodes' outputs
(so graphs branch and rejoin), and every shape is computed here, so the
graph is valid by construction; ONNX's checker and shape inference confirm
it before a case is used (a generator bug is a skipped case, not a finding).

Op families: elementwise unary and binary ops with broadcasting; MatMul
(1-D operands, batch ranks) and Gemm (transposes, C broadcast); Conv (1-D
and 2-D, groups, depthwise, strides, dilations, asymmetric and auto pads,
kernels 1-7); max/average/global pooling; BatchNormalization,
LayerNormalization, Softmax; reductions; Reshape, Transpose, Concat, Split,
Slice, Gather, Flatten; Where; If on a run-time condition whose branches
read tensors of the enclosing graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["random_model", "GeneratorError", "OPSET"]

OPSET = 17


class GeneratorError(Exception):
    """The generator could not place the op it drew (the caller draws again)."""


@dataclass
class _Builder:
    rng: np.random.Generator
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    #: (name, shape) of float tensors available as operands.
    pool: list = field(default_factory=list)
    feeds_bool: list = field(default_factory=list)
    count: int = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def new_input(self, shape: tuple[int, ...]) -> str:
        name = self.fresh("in")
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.pool.append((name, tuple(shape)))
        return name

    def const(self, value: np.ndarray, stem: str = "c") -> str:
        name = self.fresh(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, shape: tuple[int, ...]) -> str:
        return self.const((self.rng.standard_normal(shape) * 0.5).astype(np.float32), "w")

    def pick(self, rank: int | None = None, min_rank: int = 0) -> tuple[str, tuple[int, ...]]:
        cands = [t for t in self.pool if (rank is None or len(t[1]) == rank) and len(t[1]) >= min_rank]
        if not cands:
            shape = tuple(int(d) for d in self.rng.integers(1, 6, size=rank if rank is not None else max(min_rank, 2)))
            return self.new_input(shape), shape
        # Prefer recent tensors, so graphs grow deep as well as wide.
        weights = np.arange(1, len(cands) + 1, dtype=np.float64) ** 2
        return cands[int(self.rng.choice(len(cands), p=weights / weights.sum()))]

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> str:
        out = self.fresh("t")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(f"{op.lower()}_"), **attrs))
        self.pool.append((out, tuple(shape)))
        return out


# -- op generators: each adds one node (and maybe constants) or raises GeneratorError ---------------

_UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "LeakyRelu", "Elu", "Softplus", "Erf", "Floor", "Ceil",
          "HardSigmoid", "Softsign", "Identity", "Exp", "Sqrt", "Log", "Reciprocal", "Clip"]
_BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"]


def _unary(b: _Builder) -> None:
    name, shape = b.pick()
    op = str(b.rng.choice(_UNARY))
    if op in ("Floor", "Ceil"):
        # Steps amplify rounding into whole units: apply them to graph inputs only (random normals
        # are never within rounding of an integer), not to computed values.
        ins = [t for t in b.pool if t[0] in {vi.name for vi in b.inputs}]
        name, shape = ins[int(b.rng.integers(len(ins)))] if ins else (name, shape)
        if name not in {vi.name for vi in b.inputs}:
            op = "Relu"
    if op in ("Sqrt", "Log", "Reciprocal"):  # keep the domain valid: |x| + 0.5
        absn = b.add("Abs", [name], shape)
        name = b.add("Add", [absn, b.const(np.float32(0.5))], shape)
    if op == "Exp":
        name = b.add("Tanh", [name], shape)
    if op == "Clip":
        lo, hi = sorted(b.rng.uniform(-1, 1, size=2).astype(np.float32))
        b.add("Clip", [name, b.const(np.float32(lo)), b.const(np.float32(hi))], shape)
        return
    b.add(op, [name], shape)


def _broadcast_partner(b: _Builder, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...]]:
    """Another operand broadcastable with ``shape``: an existing tensor when one fits, else a new one."""
    fits = [t for t in b.pool if _broadcast(t[1], shape) is not None]
    if fits and b.rng.random() < 0.6:
        return fits[int(b.rng.integers(len(fits)))]
    rank = int(b.rng.integers(0, len(shape) + 2))
    other = []
    for i in range(rank):
        j = len(shape) - rank + i
        if j >= 0:
            other.append(1 if b.rng.random() < 0.4 else shape[j])
        else:
            other.append(int(b.rng.integers(1, 4)))
    other_t = tuple(other)
    if b.rng.random() < 0.5:
        return b.weight(other_t), other_t
    return b.new_input(other_t), other_t


def _broadcast(a: tuple[int, ...], c: tuple[int, ...]) -> tuple[int, ...] | None:
    out = []
    for x, y in zip(((1,) * (len(c) - len(a)) + a), ((1,) * (len(a) - len(c)) + c)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def _binary(b: _Builder) -> None:
    a, sa = b.pick()
    c, sc = _broadcast_partner(b, sa)
    op = str(b.rng.choice(_BINARY))
    out = _broadcast(sa, sc)
    if out is None:
        raise GeneratorError("not broadcastable")
    if len(out) > 6 or int(np.prod(out, dtype=np.int64)) > 4096:
        raise GeneratorError("too large")
    if op == "Div":
        absn = b.add("Abs", [c], sc)
        c = b.add("Add", [absn, b.const(np.float32(0.5))], sc)
    if op == "Pow":
        absn = b.add("Abs", [a], sa)
        a = b.add("Add", [absn, b.const(np.float32(0.5))], sa)
        c = b.add("Tanh", [c], sc)
    b.add(op, [a, c], out)


def _matmul(b: _Builder) -> None:
    a, sa = b.pick(min_rank=1)
    k = sa[-1]
    r = b.rng.random()
    if r < 0.2:  # a 1-D right operand: the result loses the last dim
        b.add("MatMul", [a, b.weight((k,))], sa[:-1])
        return
    if r < 0.35 and len(sa) >= 2:  # a 1-D left operand against [..., k', n']
        b.add("MatMul", [b.weight((sa[-2],)), a], sa[:-2] + (sa[-1],))
        return
    n = int(b.rng.integers(1, 9))
    batch: tuple[int, ...] = ()
    if len(sa) >= 3 and b.rng.random() < 0.3:
        batch = tuple(1 if b.rng.random() < 0.5 else d for d in sa[:-2])
    w = b.weight(batch + (k, n)) if b.rng.random() < 0.7 else b.new_input(batch + (k, n))
    if len(sa) == 1:
        out = batch + (n,)
    else:
        lead = _broadcast(sa[:-2], batch)
        if lead is None:
            raise GeneratorError("batch dims")
        out = lead + (sa[-2], n)
    b.add("MatMul", [a, w], out)


def _gemm(b: _Builder) -> None:
    a, sa = b.pick(rank=2)
    m, k = sa
    trans_a = int(b.rng.random() < 0.3)
    if trans_a:
        a = b.add("Transpose", [a], (k, m), perm=[1, 0])
    n = int(b.rng.integers(1, 9))
    trans_b = int(b.rng.random() < 0.5)
    w = b.weight((n, k) if trans_b else (k, n))
    ins = [a, w]
    if b.rng.random() < 0.7:
        cshape = [(n,), (1, n), (m, n), (m, 1), ()][int(b.rng.integers(5))]
        ins.append(b.weight(cshape))
    b.add("Gemm", ins, (m, n), transA=trans_a, transB=trans_b, alpha=float(b.rng.choice([1.0, 0.5])),
          beta=float(b.rng.choice([1.0, 2.0])))


def _conv(b: _Builder) -> None:
    spatial = int(b.rng.integers(1, 3))
    if b.rng.random() < 0.35:  # deep inputs on small planes: the cpu backend's pixel-row and Winograd forms
        shape = (int(b.rng.integers(1, 3)), int(b.rng.choice([8, 12, 16, 24]))) + tuple(
            int(b.rng.integers(1, 10)) for _ in range(spatial))
        x, sx = b.new_input(shape), shape
    else:
        x, sx = b.pick(rank=2 + spatial)
    n, c = sx[0], sx[1]
    dims = sx[2:]
    groups = 1
    if c > 1 and b.rng.random() < 0.35:
        groups = c if b.rng.random() < 0.5 else int(b.rng.choice([g for g in range(1, c + 1) if c % g == 0]))
    m = groups * int(b.rng.integers(1, 4)) if c < 8 else groups * int(b.rng.choice([1, 2, 4, 8, 16]))
    k = tuple(int(b.rng.integers(1, 8)) for _ in range(spatial))
    strides = tuple(int(b.rng.integers(1, 4)) for _ in range(spatial))
    dil = tuple(int(b.rng.choice([1, 1, 2])) for _ in range(spatial))
    attrs: dict = {"kernel_shape": list(k), "strides": list(strides), "dilations": list(dil), "group": groups}
    mode = b.rng.random()
    out = []
    if mode < 0.2:
        attrs["auto_pad"] = str(b.rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
        for d, kk, s, dl in zip(dims, k, strides, dil):
            ek = (kk - 1) * dl + 1
            o = -(-d // s) if attrs["auto_pad"] != "VALID" else (d - ek) // s + 1
            out.append(o)
    else:
        pads = [int(b.rng.integers(0, 3)) for _ in range(2 * spatial)]
        attrs["pads"] = pads
        for i, (d, kk, s, dl) in enumerate(zip(dims, k, strides, dil)):
            ek = (kk - 1) * dl + 1
            out.append((d + pads[i] + pads[i + spatial] - ek) // s + 1)
    if any(o < 1 for o in out):
        raise GeneratorError("kernel larger than the input")
    if attrs.get("auto_pad") == "VALID":
        pass
    w = b.weight((m, c // groups) + k)
    ins = [x, w]
    if b.rng.random() < 0.6:
        ins.append(b.weight((m,)))
    b.add("Conv", ins, (n, m) + tuple(out), **attrs)


def _pool(b: _Builder) -> None:
    spatial = int(b.rng.integers(1, 3))
    x, sx = b.pick(rank=2 + spatial)
    op = str(b.rng.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"]))
    if op.startswith("Global"):
        b.add(op, [x], sx[:2] + (1,) * spatial)
        return
    k = tuple(int(b.rng.integers(1, 4)) for _ in range(spatial))
    s = tuple(int(b.rng.integers(1, 3)) for _ in range(spatial))
    pads = [int(b.rng.integers(0, kk)) for kk in k] * 2
    out = [(d + pads[i] + pads[i + spatial] - kk) // st + 1 for i, (d, kk, st) in enumerate(zip(sx[2:], k, s))]
    if any(o < 1 for o in out):
        raise GeneratorError("window larger than the input")
    attrs: dict = {"kernel_shape": list(k), "strides": list(s), "pads": pads}
    if op == "AveragePool":
        attrs["count_include_pad"] = int(b.rng.random() < 0.5)
    b.add(op, [x], sx[:2] + tuple(out), **attrs)


def _norm(b: _Builder) -> None:
    kind = b.rng.random()
    if kind < 0.35:
        x, sx = b.pick(min_rank=2)
        c = sx[1]
        var = b.const((b.rng.random(c) + 0.5).astype(np.float32))
        b.add("BatchNormalization", [x, b.weight((c,)), b.weight((c,)), b.weight((c,)), var], sx,
              epsilon=1e-5)
    elif kind < 0.7:
        x, sx = b.pick(min_rank=1)
        axis = int(b.rng.integers(-len(sx), len(sx)))
        norm_shape = sx[axis:] if axis >= 0 else sx[len(sx) + axis:]
        # epsilon 1e-2: a nearly constant row (a broadcast value) normalises rounding noise by
        # 1/sqrt(epsilon); at 1e-5 that makes float32 sums in another order differ by 1e-4
        b.add("LayerNormalization", [x, b.weight(tuple(norm_shape)), b.weight(tuple(norm_shape))], sx, axis=axis,
              epsilon=1e-2)
    else:
        x, sx = b.pick(min_rank=1)
        axis = int(b.rng.integers(-len(sx), len(sx)))
        b.add(str(b.rng.choice(["Softmax", "LogSoftmax"])), [x], sx, axis=axis)


def _reduce(b: _Builder) -> None:
    x, sx = b.pick(min_rank=1)
    op = str(b.rng.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"]))
    axes = sorted({int(a) for a in b.rng.integers(0, len(sx), size=int(b.rng.integers(1, len(sx) + 1)))})
    keep = int(b.rng.random() < 0.5)
    out = tuple(1 if i in axes else d for i, d in enumerate(sx)) if keep else tuple(
        d for i, d in enumerate(sx) if i not in axes)
    if op == "ReduceProd":
        x = b.add("Tanh", [x], sx)
    if op == "ReduceSum":
        b.add(op, [x, b.const(np.array(axes, np.int64))], out, keepdims=keep)
    else:
        b.add(op, [x], out, axes=axes, keepdims=keep)


def _movement(b: _Builder) -> None:
    kind = int(b.rng.integers(0, 7))
    x, sx = b.pick(min_rank=1)
    size = int(np.prod(sx, dtype=np.int64))
    if kind == 0:  # Reshape
        dims = [d for d in range(1, size + 1) if size % d == 0]
        a = int(b.rng.choice(dims))
        shape = (a, size // a)
        spec = list(shape) if b.rng.random() < 0.5 else [a, -1]
        b.add("Reshape", [x, b.const(np.array(spec, np.int64))], shape)
    elif kind == 1:  # Transpose
        perm = [int(p) for p in b.rng.permutation(len(sx))]
        b.add("Transpose", [x], tuple(sx[p] for p in perm), perm=perm)
    elif kind == 2:  # Concat with a matching tensor
        axis = int(b.rng.integers(0, len(sx)))
        other = tuple(d if i != axis else int(b.rng.integers(1, 4)) for i, d in enumerate(sx))
        fits = [t for t in b.pool if len(t[1]) == len(sx) and all(
            t[1][i] == sx[i] for i in range(len(sx)) if i != axis)]
        if fits and b.rng.random() < 0.6:
            o, so = fits[int(b.rng.integers(len(fits)))]
        else:
            o, so = b.new_input(other), other
        b.add("Concat", [x, o], tuple(d + so[axis] if i == axis else d for i, d in enumerate(sx)), axis=axis)
    elif kind == 3:  # Split into two
        axis = int(b.rng.integers(0, len(sx)))
        if sx[axis] < 2:
            raise GeneratorError("axis too short to split")
        first = int(b.rng.integers(1, sx[axis]))
        outs = [b.fresh("t"), b.fresh("t")]
        b.nodes.append(helper.make_node("Split", [x, b.const(np.array([first, sx[axis] - first], np.int64))], outs,
                                        name=b.fresh("split_"), axis=axis))
        for o, n in zip(outs, (first, sx[axis] - first)):
            b.pool.append((o, tuple(n if i == axis else d for i, d in enumerate(sx))))
    elif kind == 4:  # Slice
        axis = int(b.rng.integers(0, len(sx)))
        d = sx[axis]
        start = int(b.rng.integers(0, d))
        end = int(b.rng.integers(start + 1, d + 1))
        step = int(b.rng.choice([1, 1, 2]))
        n = len(range(start, end, step))
        b.add("Slice", [x, b.const(np.array([start], np.int64)), b.const(np.array([end], np.int64)),
                        b.const(np.array([axis], np.int64)), b.const(np.array([step], np.int64))],
              tuple(n if i == axis else v for i, v in enumerate(sx)))
    elif kind == 5:  # Gather
        axis = int(b.rng.integers(0, len(sx)))
        idx = b.rng.integers(-sx[axis], sx[axis], size=int(b.rng.integers(1, 4))).astype(np.int64)
        b.add("Gather", [x, b.const(idx)], sx[:axis] + idx.shape + sx[axis + 1:], axis=axis)
    else:  # Flatten
        axis = int(b.rng.integers(0, len(sx) + 1))
        lead = int(np.prod(sx[:axis], dtype=np.int64))
        b.add("Flatten", [x], (lead, size // max(lead, 1)), axis=axis)


def _where(b: _Builder) -> None:
    x, sx = b.pick()
    y, sy = _broadcast_partner(b, sx)
    out = _broadcast(sx, sy)
    if out is None:
        raise GeneratorError("not broadcastable")
    cond = b.add("Less", [x, b.const(np.float32(0.0))], sx)
    b.pool.pop()  # a bool tensor is not a float operand
    b.add("Where", [cond, x, y], out)


def _if(b: _Builder) -> None:
    x, sx = b.pick()
    cname = b.fresh("cond")
    b.inputs.append(helper.make_tensor_value_info(cname, TensorProto.BOOL, []))
    b.feeds_bool.append(cname)
    outs = []
    for branch, op in (("then", "Add"), ("else", "Sub")):
        o = b.fresh(f"{branch}_out")
        k = b.fresh("k")
        g = helper.make_graph([helper.make_node(op, [x, k], [o], name=b.fresh(f"{branch}_op"))], branch, [],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(sx))],
                              initializer=[numpy_helper.from_array(np.float32(1.5), k)])
        outs.append(g)
    b.add("If", [cname], sx, then_branch=outs[0], else_branch=outs[1])


_FAMILIES: list[tuple[Callable[[_Builder], None], float]] = [
    (_unary, 3.0), (_binary, 3.0), (_matmul, 2.0), (_gemm, 1.0), (_conv, 2.0), (_pool, 1.0), (_norm, 1.5),
    (_reduce, 1.0), (_movement, 2.5), (_where, 0.7), (_if, 0.4)]


def random_model(seed: int, max_nodes: int = 12) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A valid random model and feeds for it, both determined by ``seed``."""
    rng = np.random.default_rng(seed)
    for _attempt in range(20):
        b = _Builder(rng)
        rank = int(rng.integers(1, 5))
        b.new_input(tuple(int(d) for d in rng.integers(1, 7, size=rank)))
        target = int(rng.integers(2, max_nodes + 1))
        funcs = [f for f, _ in _FAMILIES]
        weights = np.array([w for _, w in _FAMILIES])
        tries = 0
        while len(b.nodes) < target and tries < 200:
            tries += 1
            f = funcs[int(rng.choice(len(funcs), p=weights / weights.sum()))]
            saved = (len(b.nodes), len(b.inputs), len(b.inits), len(b.pool), len(b.feeds_bool))
            try:
                f(b)
            except GeneratorError:
                b.nodes, b.inputs, b.inits = b.nodes[:saved[0]], b.inputs[:saved[1]], b.inits[:saved[2]]
                b.pool, b.feeds_bool = b.pool[:saved[3]], b.feeds_bool[:saved[4]]
                continue
            if any(int(np.prod(s, dtype=np.int64)) > 1 << 14 for _, s in b.pool):
                b.nodes, b.inputs, b.inits = b.nodes[:saved[0]], b.inputs[:saved[1]], b.inits[:saved[2]]
                b.pool, b.feeds_bool = b.pool[:saved[3]], b.feeds_bool[:saved[4]]
        produced = {o for n in b.nodes for o in n.output}
        consumed = {i for n in b.nodes for i in n.input}
        outs = [(n, s) for n, s in b.pool if n in produced and n not in consumed] or \
               [t for t in b.pool if t[0] in produced][-1:]
        if not b.nodes or not outs:
            continue
        graph = helper.make_graph(b.nodes, f"fuzz_{seed}", b.inputs,
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outs],
                                  initializer=b.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rammer.fuzz")
        model.ir_version = 8
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception:
            continue  # a generator bug: draw again (counted by the caller through the seed it reaches)
        feeds: dict[str, np.ndarray] = {}
        for vi in b.inputs:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            if vi.type.tensor_type.elem_type == TensorProto.BOOL:
                feeds[vi.name] = np.array(rng.random() < 0.5)
            else:
                feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        return model, feeds
    raise GeneratorError(f"seed {seed}: no valid model in 20 draws")
