"""Writing standard ONNX nodes into an IR graph, with inferred shapes.

:class:`GraphWriter` is what the lowering passes use to add nodes; its
:class:`GraphEmitter` is the tensor-op side of the post-processing that
:mod:`rammer.ops.ml` writes once for numpy and for graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto

from ..ir import Graph, Node, TensorInfo, dtype_name
from ..ops.registry import OpContext, get_op

_ONNX_TYPES = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "int64": TensorProto.INT64,
               "bool": TensorProto.BOOL, "int32": TensorProto.INT32}


class GraphWriter:
    """Appends nodes and constants to a graph under construction."""

    def __init__(self, graph: Graph, prefix: str):
        self.graph = graph
        self.prefix = prefix
        self.nodes: list[Node] = []
        self.initializers: dict[str, np.ndarray] = {}
        self.infos: dict[str, TensorInfo] = {}
        self._count = 0
        self._consts: dict[tuple, str] = {}
        self.opset = int(graph.opset.get("", 17))
        #: Domains other than the standard one that the written nodes use (the graph must import them).
        self.domains: set[str] = set()

    def fresh(self, hint: str) -> str:
        while True:
            self._count += 1
            name = f"{self.prefix}/{hint}_{self._count}"
            if name not in self.graph.value_info and name not in self.infos:
                return name

    def info(self, name: str) -> TensorInfo:
        return self.infos.get(name) or self.graph.value_info[name]

    def const(self, value: Any, hint: str = "c", dtype: Any = None) -> str:
        arr = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        # Equal constants share one initializer (row blocks reuse the node tables).
        key = (hint, arr.dtype.str, arr.shape, hash(arr.tobytes()) if arr.dtype != object else id(arr))
        known = self._consts.get(key)
        if known is not None and known in self.initializers and np.array_equal(self.initializers[known], arr):
            return known
        name = self.fresh(hint)
        self._consts[key] = name
        self.initializers[name] = arr
        self.infos[name] = TensorInfo(name, dtype_name(arr.dtype), tuple(int(d) for d in arr.shape))
        return name

    def op(self, op_type: str, inputs: Sequence[str], hint: str | None = None, n_out: int = 1,
           **attrs: Any) -> Any:
        return self.op_in_domain("", op_type, inputs, hint, n_out, **attrs)

    def op_in_domain(self, domain: str, op_type: str, inputs: Sequence[str], hint: str | None = None,
                     n_out: int = 1, **attrs: Any) -> Any:
        """:meth:`op` for an op of another domain than the standard one (rammer's own ops)."""
        outs = tuple(self.fresh(hint or op_type.lower()) for _ in range(n_out))
        node = Node(op_type, tuple(inputs), outs, outs[0].rsplit("/", 1)[-1] + "@" + self.prefix, domain, attrs)
        if domain:
            self.domains.add(domain)
        ins = [self.info(i) if i else None for i in inputs]
        values = [self.initializers.get(i, self.graph.initializers.get(i)) if i else None for i in inputs]
        specs = get_op(node).infer(OpContext(node, self.opset, ins, values))
        for name, (dt, shape) in zip(outs, specs):
            self.infos[name] = TensorInfo(name, dt, tuple(int(d) for d in shape))
        self.nodes.append(node)
        return outs[0] if n_out == 1 else outs

    # -- helpers over opset differences -----------------------------------------------------
    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        limit = 13 if op_type == "ReduceSum" else 18
        if self.opset >= limit:
            return self.op(op_type, [x, self.const(np.asarray(axes, np.int64), "axes")], keepdims=keepdims)
        return self.op(op_type, [x], axes=list(axes), keepdims=keepdims)

    def cast(self, x: str, dtype: str) -> str:
        if self.info(x).dtype == dtype:
            return x
        return self.op("Cast", [x], to=_ONNX_TYPES[dtype])

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", [x, self.const(np.asarray(shape, np.int64), "shape")])

    def slice(self, x: str, axis: int, start: int, end: int) -> str:
        c = self.const
        return self.op("Slice", [x, c(np.asarray([start], np.int64)), c(np.asarray([end], np.int64)),
                                 c(np.asarray([axis], np.int64))])


class GraphEmitter:
    """:class:`rammer.ops.ml.Emitter` writing tensor ops; values are tensor names of [B, k] tensors."""

    def __init__(self, w: GraphWriter, dtype: str = "float32"):
        self.w = w
        self.dtype = dtype

    def const(self, value: np.ndarray) -> str:
        return self.w.const(np.asarray(value, self.dtype))

    def add(self, a: str, b: str) -> str:
        return self.w.op("Add", [a, b])

    def sub(self, a: str, b: str) -> str:
        return self.w.op("Sub", [a, b])

    def mul(self, a: str, b: str) -> str:
        return self.w.op("Mul", [a, b])

    def column(self, a: str, j: int) -> str:
        return self.w.slice(a, 1, j, j + 1)

    def concat(self, parts: Sequence[str]) -> str:
        return self.w.op("Concat", list(parts), axis=1)

    def where_positive(self, cond: str, threshold: float, a: str, b: str) -> str:
        return self.w.op("Where", [self.w.op("Greater", [cond, self.const(np.full((1, 1), threshold))]), a, b])

    def transform(self, a: str, post: str) -> str:
        w = self.w
        if post == "LOGISTIC":
            return w.op("Sigmoid", [a])
        if post == "SOFTMAX":
            return w.op("Softmax", [a], axis=1)
        if post == "SOFTMAX_ZERO":
            m = w.reduce("ReduceMax", a, [1])
            keep = w.op("Greater", [w.op("Abs", [a]), self.const(np.full((1, 1), 1e-7))])
            kept = w.op("Exp", [w.op("Sub", [a, m])])
            small = w.op("Mul", [a, w.op("Exp", [w.op("Neg", [m])])])
            e = w.op("Where", [keep, kept, small])
            total = w.reduce("ReduceSum", w.op("Where", [keep, e, self.const(np.zeros((1, 1)))]), [1])
            return w.op("Div", [e, total])
        if post == "PROBIT":
            return self._probit(a)
        return a

    def _probit(self, a: str) -> str:
        # onnxruntime's ComputeProbit, term by term (see rammer.ops.ml.probit).
        w, c = self.w, self.const
        x = w.op("Sub", [w.op("Mul", [a, c(np.full((1, 1), 2.0))]), c(np.ones((1, 1)))])
        sgn = w.op("Where", [w.op("Less", [x, c(np.zeros((1, 1)))]), c(np.full((1, 1), -1.0)), c(np.ones((1, 1)))])
        t = w.op("Mul", [w.op("Sub", [c(np.ones((1, 1))), x]), w.op("Add", [c(np.ones((1, 1))), x])])
        lg = w.op("Log", [t])
        v = w.op("Add", [c(np.full((1, 1), 2 / (3.14159 * 0.147))), w.op("Mul", [c(np.full((1, 1), 0.5)), lg])])
        v2 = w.op("Mul", [c(np.full((1, 1), 1 / 0.147)), lg])
        v3 = w.op("Sub", [w.op("Sqrt", [w.op("Sub", [w.op("Mul", [v, v]), v2])]), v])
        return w.op("Mul", [w.op("Mul", [c(np.full((1, 1), 1.41421356)), sgn]), w.op("Sqrt", [v3])])

    def argmax_labels(self, a: str, labels: np.ndarray, valid: np.ndarray) -> str:
        w = self.w
        k = len(labels)
        if not valid.all():
            a = w.op("Add", [a, self.const(np.where(valid, 0.0, -np.inf).reshape(1, k))])
        # The first index of the row maximum, as ReduceMin over positions where the row is at its max.
        best = w.reduce("ReduceMax", a, [1])
        hit = w.op("Equal", [a, best])
        pos = w.op("Where", [hit, w.const(np.arange(k, dtype=np.float32).reshape(1, k)),
                             w.const(np.full((1, k), float(k), np.float32))])
        first = w.reduce("ReduceMin", pos, [1], keepdims=0)
        return self._labels_at(w.cast(first, "int64"), labels)

    def pick_label(self, cond: str, threshold: float, labels: np.ndarray) -> str:
        w = self.w
        hit = w.op("Greater", [cond, self.const(np.full((1, 1), threshold))])
        rows = w.info(cond).shape[0]
        return self._labels_at(w.reshape(w.cast(hit, "int64"), [rows]), labels)

    def _labels_at(self, index: str, labels: np.ndarray) -> str:
        table = self.w.const(labels if labels.dtype == object else np.asarray(labels, np.int64), "labels")
        return self.w.op("Gather", [table, index], axis=0)
