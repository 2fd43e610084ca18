"""The scaled dot-product attention of exported transformers as one ``ScaledDotProductAttention`` op.

Recognises, over float32 tensors, the chain that torch and tf exports make of every attention head::

    scores = MatMul(Q, KT)                      # KT: the keys transposed (a Transpose, or K laid out so)
    scores = Mul(scores, c) | Mul(c, scores) | Div(scores, c)     # optional; c a scalar constant
    scores = Add(scores, bias) | Add(bias, scores)                 # optional, up to 3 (position bias, mask)
    P = Softmax(scores, axis=last)
    P = Cast(P, to=float32)                                        # optional, repeated (no-ops on float32)
    Y = MatMul(P, V)

and replaces it by ``ScaledDotProductAttention(Q, KT, V, bias)`` of the rammer domain
(:mod:`rammer.ops.fused_attention`, whose numpy implementation is the reference), so a backend with a
fused kernel never writes the score matrix.  Several biases are summed first by new ``Add`` nodes
(one [heads x] S x Sk tensor per layer; rounding as ``s + (b1 + b2)`` instead of ``(s + b1) + b2``).
Each intermediate must have exactly one reader (and not be a graph output); each bias must broadcast
to the scores' shape without widening it.  The scale goes into the op's ``scale`` attribute (a divisor
as its reciprocal).  Left alone: a mask applied by ``Where`` to the scores or probabilities (DeBERTa's
export, with a Reshape between), a scale applied after the mask, a Softmax over another axis, a Cast
to another type between the steps.  The K/V heads that grouped-query attention repeats (LLaMA:
Expand + Reshape) and rotary embeddings (Mul/Add on Q and K) stay their own ops and feed Q/KT/V of the
fused op like any other tensor.  Hardware-neutral; only backends with a kernel for the op list it (``cpu``).
"""

from __future__ import annotations

import os

import numpy as np

from ..ir import Graph, Node, TensorInfo
from ..ops.control import RAMMER_DOMAIN
from ..ops.fused_attention import OP_TYPE
from .names import fresh_name
from .pipeline import Pass

__all__ = ["FUSE_ATTENTION", "fuse_attention"]

#: Off: the pass leaves every graph alone (the "before" side of before/after measurements, e.g.
#: ``ci/micro_attention.py --before rammer.passes.fuse_attention.ENABLED=False``, or
#: ``RAMMER_FUSE_ATTENTION=0`` in the environment of processes such as ci/corpus_bench.py's).
ENABLED = os.environ.get("RAMMER_FUSE_ATTENTION", "1").strip().lower() not in ("0", "false", "no", "off")


class _Chain:
    """What one match found: the nodes it replaces and the fused op's operands."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.scale: float | None = None
        #: Bias tensors in the order the graph adds them.
        self.biases: list[str] = []
        self.q = ""
        self.kt = ""


def _only_reader(graph: Graph, tensor: str, outputs: set[str]) -> Node | None:
    readers = graph.consumers.get(tensor, ())
    if tensor in outputs or len(readers) != 1:
        return None
    return readers[0]


def _float32(graph: Graph, *names: str) -> bool:
    return all(graph.value_info[n].dtype == "float32" for n in names)


def _scalar_const(graph: Graph, name: str) -> float | None:
    value = graph.initializers.get(name)
    if value is None or np.size(value) != 1 or np.asarray(value).dtype != np.float32:
        return None
    return float(np.asarray(value).reshape(-1)[0])


def _producer(graph: Graph, tensor: str, outputs: set[str], reader: Node) -> Node | None:
    """The plain-ONNX node making ``tensor`` when ``reader`` is its only reader."""
    node = graph.producer.get(tensor)
    if node is None or node.domain != "" or _only_reader(graph, tensor, outputs) is not reader:
        return None
    return node


def _scores(graph: Graph, tensor: str, outputs: set[str], reader: Node, chain: _Chain) -> bool:
    """Whether ``tensor`` is MatMul(Q, KT), optionally scaled by a scalar constant; fills ``chain``."""
    node = _producer(graph, tensor, outputs, reader)
    if node is not None and node.op_type in ("Mul", "Div") and len(node.inputs) == 2:
        a, b = node.inputs
        const_b = _scalar_const(graph, b)
        const_a = _scalar_const(graph, a) if node.op_type == "Mul" else None
        if const_b is not None and (node.op_type == "Mul" or const_b != 0.0):
            chain.scale, inner = (const_b if node.op_type == "Mul" else 1.0 / const_b), a
        elif const_a is not None:
            chain.scale, inner = const_a, b
        else:
            return False
        if graph.value_info[inner].shape != graph.value_info[tensor].shape:
            return False
        chain.nodes.append(node)
        reader, node = node, _producer(graph, inner, outputs, node)
    if node is None or node.op_type != "MatMul":
        return False
    q, kt = node.inputs[0], node.inputs[1]
    if min(len(graph.value_info[q].shape), len(graph.value_info[kt].shape)) < 2 or not _float32(graph, q, kt):
        return False
    chain.nodes.append(node)
    chain.q, chain.kt = q, kt
    return True


#: Bias Adds one chain may carry (T5 and MPNet add a position bias, then the mask).
MAX_BIASES = 3


def _fits(graph: Graph, bias: str, shape: tuple[int, ...]) -> bool:
    info = graph.value_info[bias]
    if info.dtype != "float32":
        return False
    try:
        return tuple(np.broadcast_shapes(tuple(info.shape), tuple(shape))) == tuple(shape)
    except ValueError:
        return False


def _biased_scores(graph: Graph, tensor: str, outputs: set[str], reader: Node, chain: _Chain, depth: int) -> bool:
    """Whether ``tensor`` is the (scaled) scores plus up to ``depth`` bias Adds; fills ``chain``."""
    shape = graph.value_info[tensor].shape
    producer = _producer(graph, tensor, outputs, reader)
    if producer is not None and producer.op_type == "Add" and len(producer.inputs) == 2 and depth > 0:
        for scores, bias in (producer.inputs, producer.inputs[::-1]):
            trial = _Chain()
            if graph.value_info[scores].shape == shape and _fits(graph, bias, shape) and \
                    _biased_scores(graph, scores, outputs, producer, trial, depth - 1):
                trial.nodes.append(producer)
                trial.biases.append(bias)
                chain.__dict__.update(trial.__dict__)
                return True
    return _scores(graph, tensor, outputs, reader, chain)


def _match(graph: Graph, softmax: Node, outputs: set[str]) -> tuple[_Chain, Node] | None:
    """The chain ending in ``softmax`` and the MatMul(P, V) after it, or None."""
    if softmax.domain != "" or softmax.op_type != "Softmax" or len(softmax.outputs) != 1:
        return None
    x = softmax.inputs[0]
    shape = graph.value_info[x].shape
    if len(shape) < 2 or int(softmax.attrs.get("axis", -1)) % len(shape) != len(shape) - 1:
        return None
    probs, tail = softmax.outputs[0], []
    after = _only_reader(graph, probs, outputs)
    while after is not None and after.domain == "" and after.op_type == "Cast" and int(after.attrs.get("to", 0)) == 1:
        # float32 -> float32 (torch's softmax(..., dtype=float32).to(query.dtype), often twice): nothing to compute
        tail.append(after)
        probs = after.outputs[0]
        after = _only_reader(graph, probs, outputs)
    if after is None or after.domain != "" or after.op_type != "MatMul" or after.inputs[0] != probs:
        return None
    v = after.inputs[1]
    if len(graph.value_info[v].shape) < 2 or not _float32(graph, x, probs, v, after.outputs[0]):
        return None
    chain = _Chain()
    if not _biased_scores(graph, x, outputs, softmax, chain, MAX_BIASES):
        return None
    chain.nodes += [softmax, *tail, after]
    made = {o for n in chain.nodes for o in n.outputs}
    if made & {chain.q, chain.kt, v, *chain.biases}:
        return None  # an operand computed inside the chain (Add(s, s), MatMul(P, P)): nothing to fuse
    return chain, after


def fuse_attention(graph: Graph) -> Graph:
    """``graph`` with every recognised attention chain as one op (the same object when none is)."""
    if not ENABLED or not any(n.op_type == "Softmax" for n in graph.nodes):
        return graph
    outputs = {t.name for t in graph.outputs}
    taken = {n.name for n in graph.nodes}
    replaced: dict[int, Node] = {}  # id of the final MatMul -> the fused node
    removed: set[int] = set()
    before_fused: dict[int, list[Node]] = {}  # id of the final MatMul -> the bias sums it needs first
    new_info: dict[str, TensorInfo] = {}
    for node in graph.nodes:
        found = _match(graph, node, outputs)
        if found is None:
            continue
        chain, last = found
        if any(id(n) in removed for n in chain.nodes):
            continue
        attrs = {} if chain.scale is None else {"scale": chain.scale}
        bias = chain.biases[0] if chain.biases else ""
        summed = []
        for extra in chain.biases[1:]:
            # several biases become one, summed once per layer ([heads,] S x Sk), in the graph's order
            total = fresh_name(f"{bias}.plus_bias", taken)
            shape = tuple(np.broadcast_shapes(tuple(graph.value_info[bias].shape),
                                              tuple(graph.value_info[extra].shape)))
            new_info[total] = TensorInfo(total, "float32", shape)
            summed.append(Node("Add", (bias, extra), (total,), fresh_name(f"{total}.add", taken)))
            bias = total
        inputs = (chain.q, chain.kt, last.inputs[1]) + ((bias,) if bias else ())
        fused = Node(OP_TYPE, inputs, last.outputs, fresh_name(f"{last.name or 'attention'}.attention", taken),
                     RAMMER_DOMAIN, attrs)
        removed |= {id(n) for n in chain.nodes}
        replaced[id(last)] = fused
        before_fused[id(last)] = summed
    if not replaced:
        return graph
    nodes: list[Node] = []
    for n in graph.nodes:
        if id(n) in replaced:
            nodes += before_fused[id(n)] + [replaced[id(n)]]
        elif id(n) not in removed:
            nodes.append(n)
    used = {i for n in nodes for i in n.inputs} | outputs
    gone = {i for n in graph.nodes if id(n) in removed for i in n.inputs} - used - {t.name for t in graph.inputs}
    inits = {k: v for k, v in graph.initializers.items() if k not in gone}
    dropped = {o for n in graph.nodes if id(n) in removed and id(n) not in replaced for o in n.outputs} | gone
    value_info = {**{k: v for k, v in graph.value_info.items() if k not in dropped}, **new_info}
    opset = {**graph.opset, RAMMER_DOMAIN: 1}
    return graph.replace(nodes=tuple(nodes), initializers=inits, value_info=value_info, opset=opset)


FUSE_ATTENTION = Pass("fuse-attention", fuse_attention,
                      "MatMul(Q, KT) [* scale] [+ bias] -> Softmax -> MatMul(., V) as one ScaledDotProductAttention")
