"""LSTM, GRU and RNN nodes unrolled into per-step MatMuls and elementwise cells.

A backend whose kernels cover MatMul, the elementwise ops and copies but not the recurrent ops
(the GPU backends; a microcontroller) runs an RNN this way: per direction and gate, one input
projection over all steps (``X[T*B, I] @ W_g^T``, a new constant weight per gate), then per step
the recurrent product ``H @ R_g^T``, the gate activations and the state update, and the outputs
assembled by ``Concat``.  The rTasks of the step's gates are independent, which is the parallelism
the scheduler needs; the cell's elementwise ops fuse where the backend fuses.

ONNX semantics (opset 14): gate order i, o, f, c (LSTM) and z, r, h (GRU); ``Y[T, dirs, B, H]``,
``Y_h``/``Y_c[dirs, B, H]``; a reverse direction walks t = T-1..0.  Handled: forward, reverse,
bidirectional; bias and initial states present or absent; GRU ``linear_before_reset`` 0 and 1;
the default activations; layout 0.  Anything else (sequence_lens, clip, other activations,
peepholes, layout 1, non-float32) is left as it is, for the backend to refuse by name.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from ..ir import Graph, Node, TensorInfo
from .names import FreshNames
from .pipeline import Pass

__all__ = ["unroll_rnn", "UNROLL_RNN"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def _attr_str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _handled(node: Node, graph: Graph) -> bool:
    op = node.op_type
    if node.domain or op not in _GATES:
        return False
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    if ins[4] or (op == "LSTM" and ins[7]):  # sequence_lens, peepholes
        return False
    if node.attrs.get("clip") is not None or int(node.attrs.get("layout", 0)):
        return False
    dirs = 2 if _attr_str(node.attrs.get("direction", "forward")) == "bidirectional" else 1
    acts = [_attr_str(a).lower() for a in (node.attrs.get("activations") or [])]
    if acts and acts != [a.lower() for a in _DEFAULT_ACTS[op]] * dirs:
        return False
    for i in (1, 2, 3):
        if ins[i] and ins[i] not in graph.initializers:
            return False  # computed weights: not unrolled
    if not ins[0] or graph.value_info[ins[0]].dtype != "float32" or len(graph.value_info[ins[0]].shape) != 3:
        return False
    return all(not t or graph.value_info[t].dtype == "float32" for t in ins[5:7])


class _Builder:
    """Appends nodes and declares their tensors, with names derived from the RNN node's."""

    def __init__(self, graph: Graph, base: str, taken: set[str], node_names: set[str], inits: dict, vi: dict):
        self.base, self.inits, self.vi = base, inits, vi
        # Both sets only grow while this node is unrolled (an RNN's own outputs are discarded before).
        self.tensor_name, self.node_name = FreshNames(taken), FreshNames(node_names)
        self.nodes: list[Node] = []

    def const(self, what: str, value: np.ndarray) -> str:
        name = self.tensor_name(f"{self.base}_{what}")
        value = np.ascontiguousarray(value)
        self.inits[name] = value
        self.vi[name] = TensorInfo(name, "float32" if value.dtype == np.float32 else "int64", value.shape)
        return name

    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], out: str | None = None, **attrs) -> str:
        if out is None:
            out = self.tensor_name(f"{self.base}_{op.lower()}")
        self.vi[out] = TensorInfo(out, "float32", shape)
        self.nodes.append(Node(op, tuple(inputs), (out,), name=self.node_name(f"{self.base}_{op}"),
                               attrs=attrs))
        return out


def _rows(b: _Builder, x: str, start: int, stop: int, width: int) -> str:
    """Rows ``start:stop`` of the 2-d tensor ``x``."""
    return b.op("Slice", [x, b.const("s", np.array([start], np.int64)), b.const("e", np.array([stop], np.int64)),
                          b.const("a", np.array([0], np.int64))], (stop - start, width))


def _unroll(node: Node, graph: Graph, b: _Builder) -> None:
    op = node.op_type
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    t_len, batch, width = graph.value_info[ins[0]].shape
    w = np.asarray(graph.initializers[ins[1]], np.float32)
    r = np.asarray(graph.initializers[ins[2]], np.float32)
    dirs, gates = w.shape[0], _GATES[op]
    hidden = r.shape[-1]
    bias = (np.asarray(graph.initializers[ins[3]], np.float32) if ins[3]
            else np.zeros((dirs, 2 * gates * hidden), np.float32))
    direction = _attr_str(node.attrs.get("direction", "forward"))
    lbr = int(node.attrs.get("linear_before_reset", 0))
    shape = (batch, hidden)
    x2d = b.op("Reshape", [ins[0], b.const("shape", np.array([t_len * batch, width], np.int64))],
               (t_len * batch, width))
    one = b.const("one", np.ones((), np.float32)) if op == "GRU" else ""  # (1 - z) in GRU's update
    ys, yh, yc = [], [], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        wb, rb = bias[d, :gates * hidden], bias[d, gates * hidden:]
        proj, rt, rbias = [], [], []
        for g in range(gates):
            cols = slice(g * hidden, (g + 1) * hidden)
            wg = b.const(f"W{d}{g}", w[d, cols, :].T.copy())
            # The input bias joins the projection; for GRU's h gate with linear_before_reset the
            # recurrent bias stays inside r * (H R^T + Rb), so it is kept apart.
            keep_rb = op == "GRU" and g == 2
            full = b.op("MatMul", [x2d, wg], (t_len * batch, hidden))
            proj.append(b.op("Add", [full, b.const(f"b{d}{g}", wb[cols] if keep_rb else wb[cols] + rb[cols])],
                             (t_len * batch, hidden)))
            rt.append(b.const(f"R{d}{g}", r[d, cols, :].T.copy()))
            rbias.append(b.const(f"rb{d}{g}", rb[cols]) if keep_rb else None)

        def state(slot: int, what: str) -> str | None:
            if not ins[slot]:
                return None
            full = b.op("Slice", [ins[slot], b.const("s", np.array([d], np.int64)),
                                  b.const("e", np.array([d + 1], np.int64)), b.const("a", np.array([0], np.int64))],
                        (1, batch, hidden))
            return b.op("Reshape", [full, b.const("shape", np.array([batch, hidden], np.int64))], shape)

        h, c = state(5, "h"), state(6, "c")
        steps = list(range(t_len))[::-1] if reverse else list(range(t_len))
        per_t: dict[int, str] = {}
        for t in steps:
            xg = [_rows(b, proj[g], t * batch, (t + 1) * batch, hidden) for g in range(gates)]

            def rec(g: int) -> str | None:
                return None if h is None else b.op("MatMul", [h, rt[g]], shape)

            def pre(g: int) -> str:
                hr = rec(g)
                return xg[g] if hr is None else b.op("Add", [xg[g], hr], shape)

            if op == "LSTM":
                i_g, o_g, f_g = (b.op("Sigmoid", [pre(g)], shape) for g in range(3))
                cand = b.op("Tanh", [pre(3)], shape)
                ic = b.op("Mul", [i_g, cand], shape)
                c = ic if c is None else b.op("Add", [b.op("Mul", [f_g, c], shape), ic], shape)
                h = b.op("Mul", [o_g, b.op("Tanh", [c], shape)], shape)
            elif op == "GRU":
                z = b.op("Sigmoid", [pre(0)], shape)
                rg = b.op("Sigmoid", [pre(1)], shape)
                rb_h = rbias[2]
                assert rb_h is not None  # GRU's h gate keeps its recurrent bias apart (keep_rb above)
                if h is None:  # H = 0: the recurrent term is the bias alone
                    hterm = b.op("Mul", [rg, rb_h], shape) if lbr else rb_h
                elif lbr:
                    hterm = b.op("Mul", [rg, b.op("Add", [b.op("MatMul", [h, rt[2]], shape), rb_h], shape)], shape)
                else:
                    hterm = b.op("Add", [b.op("MatMul", [b.op("Mul", [rg, h], shape), rt[2]], shape), rb_h], shape)
                cand = b.op("Tanh", [b.op("Add", [xg[2], hterm], shape)], shape)
                keep = b.op("Sub", [one, z], shape)
                new = b.op("Mul", [keep, cand], shape)
                h = new if h is None else b.op("Add", [new, b.op("Mul", [z, h], shape)], shape)
            else:
                h = b.op("Tanh", [pre(0)], shape)
            per_t[t] = h
        four = b.const("shape4", np.array([1, 1, batch, hidden], np.int64))
        ys.append(b.op("Concat", [b.op("Reshape", [per_t[t], four], (1, 1, batch, hidden)) for t in range(t_len)],
                       (t_len, 1, batch, hidden), axis=0))
        three = b.const("shape3", np.array([1, batch, hidden], np.int64))
        yh.append(b.op("Reshape", [cast(str, h), three], (1, batch, hidden)))  # set by the steps above
        if op == "LSTM":
            yc.append(b.op("Reshape", [cast(str, c), three], (1, batch, hidden)))
    for out, parts, axis, full in ((outs[0], ys, 1, (t_len, dirs, batch, hidden)),
                                   (outs[1], yh, 0, (dirs, batch, hidden)), (outs[2], yc, 0, (dirs, batch, hidden))):
        if out and parts:
            if len(parts) > 1:
                b.op("Concat", parts, full, out=out, axis=axis)
            else:
                b.op("Identity", parts, full, out=out)


def unroll_rnn(graph: Graph) -> Graph:
    """``graph`` with each handled LSTM/GRU/RNN unrolled (the same object when none is)."""
    todo = [n for n in graph.nodes if _handled(n, graph)]
    if not todo or any(n.subgraphs() for n in graph.nodes):
        return graph
    taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
    node_names = {n.name for n in graph.nodes}
    inits, vi = dict(graph.initializers), dict(graph.value_info)
    nodes: list[Node] = []
    for node in graph.nodes:
        if not any(node is n for n in todo):
            nodes.append(node)
            continue
        for out in node.outputs:
            if out:
                taken.discard(out)  # re-declared by the unrolled nodes
        b = _Builder(graph, node.name or node.outputs[0] or "rnn", taken, node_names, inits, vi)
        _unroll(node, graph, b)
        nodes.extend(b.nodes)
    used = {i for n in nodes for i in n.inputs} | {t.name for t in graph.outputs} | {t.name for t in graph.inputs}
    for name in [k for k in inits if k not in used]:  # (the RNN's weights, and a first step's unread R)
        inits.pop(name)
        vi.pop(name, None)
    return graph.replace(nodes=tuple(nodes), initializers=inits, value_info=vi)


UNROLL_RNN = Pass("unroll-rnn", unroll_rnn, "LSTM/GRU/RNN as per-step MatMuls and elementwise cells")
