"""An ONNX graph (NCHW, float32) lowered to the backend's NHWC layer list.

Conv (group 1 or depthwise), Gemm/MatMul(+Add bias), Relu and Clip(0, 6) (fused into the
conv/fc/add before them when they are its only reader), MaxPool, AveragePool (unpadded),
GlobalAveragePool, Add of two activations, Flatten/Reshape to [N, -1] before a fully connected
layer (its weights are permuted from the NCHW flatten order to NHWC), Identity and Dropout.
Anything else is refused at compile time, naming the node.
"""

from __future__ import annotations

import numpy as np

from rammer.errors import CompileError, UnsupportedOpError
from rammer.ir import Graph, Node

from .layers import FloatLayer, FloatNet, infer_shapes, run_float_layer

SUPPORTED_OPS = frozenset({"Conv", "Gemm", "MatMul", "Add", "Relu", "Clip", "MaxPool", "AveragePool",
                           "GlobalAveragePool", "Flatten", "Reshape", "Identity", "Dropout"})



def _unsupported(node: Node, why: str) -> UnsupportedOpError:
    """A variant of ``node`` the mcu backend does not lower: the error names it and what to do."""
    return UnsupportedOpError(f"{node.label}: {why}; compile it for another --backend", [(node.op_type, node.domain,
                                                                                         node.name)])

class _Lowering:
    def __init__(self, graph: Graph):
        self.g = graph
        self.ids: dict[str, int] = {}
        self.layers: list[FloatLayer] = []
        self.shapes: dict[int, tuple[int, int, int]] = {}
        self.flat: set[int] = set()  # tensors that are the NHWC memory of a flattened NCHW tensor
        self.readers: dict[str, int] = {}
        for n in graph.nodes:
            for i in n.inputs:
                self.readers[i] = self.readers.get(i, 0) + 1
        for o in graph.outputs:
            self.readers[o.name] = self.readers.get(o.name, 0) + 1

    def const(self, node: Node, name: str) -> np.ndarray:
        if name not in self.g.initializers:
            raise CompileError(f"{node.label}: input '{name}' must be a constant for the mcu backend")
        return np.asarray(self.g.initializers[name], np.float32)

    def new(self, name: str) -> int:
        self.ids[name] = len(self.ids) + 1000  # ids are renumbered at the end
        return self.ids[name]

    def src(self, node: Node, name: str) -> int:
        if name not in self.ids:
            raise CompileError(f"{node.label}: input '{name}' is not an activation the mcu backend computes")
        return self.ids[name]

    def shape(self, t: int) -> tuple[int, int, int]:
        return self.shapes[t]

    def add_layer(self, layer: FloatLayer) -> None:
        self.layers.append(layer)
        xs = [np.zeros((1,) + self.shapes[i], np.float32) for i in layer.inputs]
        self.shapes[layer.output] = tuple(run_float_layer(layer, xs).shape[1:])

    def fuse_act(self, node: Node, act: str) -> bool:
        src = node.inputs[0]
        t = self.ids.get(src)
        last = self.layers[-1] if self.layers else None
        if last is not None and last.output == t and last.kind in ("conv", "dwconv", "fc", "add") \
                and last.act == "none" and self.readers.get(src, 0) == 1:
            last.act = act
            self.ids[node.outputs[0]] = t
            return True
        return False

    def lower(self) -> FloatNet:
        g = self.g
        if len(g.inputs) != 1 or len(g.outputs) != 1:
            raise CompileError(f"the mcu backend compiles models with one input and one output; "
                               f"'{g.name}' has {len(g.inputs)} and {len(g.outputs)}")
        x = g.inputs[0]
        if len(x.shape) != 4:
            raise CompileError(f"input '{x.name}' must be an image [N, C, H, W], got {list(x.shape)}")
        self.ids[x.name] = 0
        self.shapes[0] = (x.shape[2], x.shape[3], x.shape[1])
        for node in g.nodes:
            self.node(node)
        out = self.src(g.nodes[-1], g.outputs[0].name)
        return self.finish(out)

    def node(self, n: Node) -> None:
        op = n.op_type
        name = n.name or n.outputs[0]
        if op in ("Identity", "Dropout"):
            self.ids[n.outputs[0]] = self.src(n, n.inputs[0])
            return
        if op == "Conv":
            self._conv(n, name)
        elif op in ("Relu", "Clip"):
            act = "relu"
            if op == "Clip":
                lo = self._clip_bound(n, 1, "min")
                hi = self._clip_bound(n, 2, "max")
                if lo != 0.0 or hi not in (6.0, None):
                    raise _unsupported(n, f"only Clip(0, 6) (ReLU6) or Clip(0) lowers to int8; got ({lo}, {hi})")
                act = "relu6" if hi == 6.0 else "relu"
            if not self.fuse_act(n, act):
                self.add_layer(FloatLayer("relu", name, (self.src(n, n.inputs[0]),), self.new(n.outputs[0]), act=act))
        elif op in ("MaxPool", "AveragePool"):
            t = self.src(n, n.inputs[0])
            k = tuple(n.attr("kernel_shape"))
            s = tuple(n.attr("strides", [1, 1]))
            p = list(n.attr("pads", [0, 0, 0, 0]))
            if n.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or n.attr("ceil_mode", 0) or \
                    any(d != 1 for d in n.attr("dilations", [1, 1])):
                raise _unsupported(n, "auto_pad SAME, ceil_mode and dilations are not lowered by the mcu backend")
            if op == "AveragePool" and any(p):
                raise _unsupported(n, "padded AveragePool is not lowered by the mcu backend")
            kind = "maxpool" if op == "MaxPool" else "avgpool"
            self.add_layer(FloatLayer(kind, name, (t,), self.new(n.outputs[0]), kernel=k, stride=s,
                                      pad=(p[0], p[1], p[2], p[3])))
        elif op == "GlobalAveragePool":
            t = self.src(n, n.inputs[0])
            h, w, _ = self.shape(t)
            self.add_layer(FloatLayer("avgpool", name, (t,), self.new(n.outputs[0]), kernel=(h, w), stride=(1, 1)))
        elif op in ("Flatten", "Reshape"):
            t = self.src(n, n.inputs[0])
            out = g_shape(self.g, n.outputs[0])
            if len(out) != 2:
                raise _unsupported(n, "only a flatten to [N, features] is lowered by the mcu backend")
            self.ids[n.outputs[0]] = t
            if self.shape(t)[:2] != (1, 1):
                self.flat.add(t)
        elif op in ("Gemm", "MatMul"):
            self._fc(n, name)
        elif op == "Add":
            a, b = n.inputs
            if b in self.g.initializers or a in self.g.initializers:
                const = b if b in self.g.initializers else a
                other = a if const == b else b
                last = self.layers[-1] if self.layers else None
                t = self.src(n, other)
                if last is None or last.output != t or last.kind != "fc" or last.act != "none":
                    raise _unsupported(n, "adding a constant is lowered only as the bias of a MatMul")
                last.bias = last.bias + self.const(n, const).reshape(-1)
                self.ids[n.outputs[0]] = t
                return
            ta, tb = self.src(n, a), self.src(n, b)
            if self.shape(ta) != self.shape(tb):
                raise _unsupported(n, "Add with broadcasting is not lowered by the mcu backend")
            self.add_layer(FloatLayer("add", name, (ta, tb), self.new(n.outputs[0])))
        else:
            raise _unsupported(n, f"op {op} is not supported by the mcu backend "
                                  f"(supported: {', '.join(sorted(SUPPORTED_OPS))})")

    def _clip_bound(self, n: Node, pos: int, attr: str):
        if len(n.inputs) > pos and n.inputs[pos]:
            return float(self.const(n, n.inputs[pos]).reshape(()))
        v = n.attr(attr)
        return None if v is None else float(v)

    def _conv(self, n: Node, name: str) -> None:
        t = self.src(n, n.inputs[0])
        w = self.const(n, n.inputs[1])
        b = self.const(n, n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else np.zeros(w.shape[0], np.float32)
        if n.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or any(d != 1 for d in n.attr("dilations", [1, 1])):
            raise _unsupported(n, "auto_pad SAME and dilated convs are not lowered by the mcu backend")
        p = list(n.attr("pads", [0, 0, 0, 0]))
        group = int(n.attr("group", 1))
        c = self.shape(t)[2]
        common = dict(kernel=(w.shape[2], w.shape[3]), stride=tuple(n.attr("strides", [1, 1])),
                      pad=(p[0], p[1], p[2], p[3]), bias=b)
        if group == 1:
            self.add_layer(FloatLayer("conv", name, (t,), self.new(n.outputs[0]),
                                      weight=np.ascontiguousarray(w.transpose(0, 2, 3, 1)), **common))
        elif group == c and w.shape[0] == c and w.shape[1] == 1:
            self.add_layer(FloatLayer("dwconv", name, (t,), self.new(n.outputs[0]),
                                      weight=np.ascontiguousarray(w[:, 0]), **common))
        else:
            raise _unsupported(n, f"grouped conv (group {group}) other than depthwise is not lowered by the mcu backend")

    def _fc(self, n: Node, name: str) -> None:
        t = self.src(n, n.inputs[0])
        w = self.const(n, n.inputs[1])
        if n.op_type == "Gemm":
            if float(n.attr("alpha", 1.0)) != 1.0 or float(n.attr("beta", 1.0)) != 1.0 or n.attr("transA", 0):
                raise _unsupported(n, "Gemm with alpha/beta != 1 or transA is not lowered by the mcu backend")
            w = w if n.attr("transB", 0) else w.T
            b = self.const(n, n.inputs[2]).reshape(-1) if len(n.inputs) > 2 and n.inputs[2] else \
                np.zeros(w.shape[0], np.float32)
        else:
            if w.ndim != 2:
                raise _unsupported(n, f"a MatMul with a {w.ndim}-d weight is not lowered by the mcu backend "
                                      f"(its fc layer takes a [inputs, outputs] matrix)")
            w = w.T
            b = np.zeros(w.shape[0], np.float32)
        h, wd, c = self.shape(t)
        if w.shape[1] != h * wd * c:
            # e.g. a MatMul over every row of a batched activation: an fc layer here takes one vector
            raise _unsupported(n, f"the mcu backend's fc layer reads the whole activation ({h * wd * c} values) as "
                                  f"one vector, and this {n.op_type}'s weight has {w.shape[1]} inputs (a product "
                                  f"over each row of a batched activation is not lowered)")
        if t in self.flat:  # NCHW flatten order -> NHWC memory order
            w = w.reshape(-1, c, h, wd).transpose(0, 2, 3, 1).reshape(w.shape[0], -1)
        self.add_layer(FloatLayer("fc", name, (t,), self.new(n.outputs[0]), weight=np.ascontiguousarray(w),
                                  bias=np.asarray(b, np.float32)))

    def finish(self, out: int) -> FloatNet:
        if not self.layers or out == 0:
            raise CompileError(f"'{self.g.name}' computes nothing the mcu backend runs (its output is its input, "
                               f"reshaped at most); the backend compiles networks of conv/fc/pool/add layers")
        # renumber tensors 1..n in layer order
        remap = {0: 0}
        for l in self.layers:
            remap.setdefault(l.output, len(remap))
        for l in self.layers:
            l.inputs = tuple(remap[i] for i in l.inputs)
            l.output = remap[l.output]
        net = FloatNet(self.g.name or "model", self.shapes[0], self.layers, output=remap[out])
        infer_shapes(net)
        return net


def g_shape(graph: Graph, name: str) -> tuple[int, ...]:
    info = graph.value_info.get(name)
    if info is None:
        info = next((t for t in graph.inputs if t.name == name), None)
    return tuple(info.shape) if info is not None else ()


def lower_graph(graph: Graph) -> FloatNet:
    """The graph as NHWC float layers, or a CompileError naming the node that cannot be lowered."""
    return _Lowering(graph).lower()


def node_refusal(graph: Graph, node: Node) -> str | None:
    """Why the mcu backend cannot lower ``node`` (attributes, constants), or None: a static check
    so callers learn every refused node at once."""
    op = node.op_type
    if op not in SUPPORTED_OPS:
        return f"op {op}"
    consts = graph.initializers
    if op == "Conv":
        if len(node.inputs) < 2 or node.inputs[1] not in consts:
            return "Conv weights are not a constant"
        w = np.asarray(consts[node.inputs[1]])
        group = int(node.attr("group", 1))
        if w.ndim != 4:
            return "only 2-D convolutions"
        if group != 1 and not (group == w.shape[0] and w.shape[1] == 1):
            return f"grouped conv (group {group}) other than depthwise"
        if any(d != 1 for d in node.attr("dilations", [1, 1])) or \
                node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return "dilated conv or auto_pad SAME"
    elif op in ("MaxPool", "AveragePool"):
        if len(node.attr("kernel_shape", [])) != 2 or node.attr("ceil_mode", 0) or \
                any(d != 1 for d in node.attr("dilations", [1, 1])) or \
                node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return "pooling other than 2-D without ceil_mode, dilations or auto_pad SAME"
        if op == "AveragePool" and any(node.attr("pads", [0, 0, 0, 0])):
            return "padded AveragePool"
        if op == "MaxPool" and len(node.outputs) > 1 and node.outputs[1]:
            return "MaxPool indices output"
    elif op in ("Gemm", "MatMul"):
        if len(node.inputs) < 2 or node.inputs[1] not in consts:
            return f"{op} weights are not a constant"
        if op == "Gemm" and (float(node.attr("alpha", 1.0)) != 1.0 or float(node.attr("beta", 1.0)) != 1.0
                             or node.attr("transA", 0)):
            return "Gemm with alpha/beta != 1 or transA"
    elif op == "Clip":
        if any(i not in consts for i in node.inputs[1:] if i):
            return "Clip bounds are not constants"
    elif op == "Add":
        a, b = node.inputs
        if a not in consts and b not in consts:
            sa, sb = g_shape(graph, a), g_shape(graph, b)
            if sa and sb and sa != sb:
                return "Add with broadcasting"
    elif op == "Dropout" and len(node.inputs) > 1 and any(node.inputs[1:]):
        return "Dropout with ratio/training inputs"
    return None


def graph_refusal(graph: Graph) -> str | None:
    """Why the whole graph is outside what the backend compiles (one image input, one output)."""
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        return f"one input and one output (the graph has {len(graph.inputs)} and {len(graph.outputs)})"
    if len(graph.inputs[0].shape) != 4:
        return f"an image input [N, C, H, W] (input '{graph.inputs[0].name}' is {list(graph.inputs[0].shape)})"
    if not any(n.op_type not in ("Flatten", "Reshape", "Identity", "Dropout") for n in graph.nodes):
        return "at least one layer (the graph only reshapes or copies its input)"
    return None
