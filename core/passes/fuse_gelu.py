"""The GELUs as exporters write them out, as one ``Gelu`` node.

torch's ``nn.GELU()`` and Hugging Face's ``gelu`` export below opset 20 as five nodes::

    Div(x, sqrt 2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5)      (torch.nn.functional.gelu)
    Mul(x, 0.5) -> Mul(., Add(Erf(Div(x, sqrt 2)), 1))                 (x * 0.5 * (1 + erf(x / sqrt 2)))

(``Mul(x, 1/sqrt 2)`` in place of the Div, operands of Add and Mul in either order.)  A backend
that fuses elementwise chains into a GEMM's store then runs five passes over the tile where one
does: on a BERT's 128 x 1536 feed-forward output the five took 0.6 ms of the GEMM's 2.1.  This pass
rewrites each such chain into ``Gelu(x)`` (approximate "none"), the op of opset 20, whose reference is
the same formula.  A chain whose intermediate values are read elsewhere, or whose constants are not
those of the formula (within float32 rounding), is left as it is.  Hardware-neutral; the ``cpu``
backend lists it.

The tanh approximation (GPT-2's and ALBERT's ``gelu_new``, torch's ``gelu(approximate="tanh")``)
exports as eight nodes, ``x`` cubed by ``Pow(x, 3)`` or ``Mul(x, Mul(x, x))``::

    Mul(x, 0.5) -> Mul(., Add(Tanh(Mul(sqrt(2/pi), Add(x, Mul(0.044715, x**3)))), 1))

and becomes ``Gelu(x, approximate="tanh")`` (the same formula in the op's reference).  In a GEMM's
store the chain was eight passes over the tile, the cube a ``pow`` call per element unless it is
written as products: ALBERT's feed-forward GEMMs with it ran at a third of the speed of those without.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeGuard

import numpy as np

from ..ir import Graph, Node
from .pipeline import Pass
from .rewrite import sole_reader, splice

__all__ = ["FUSE_GELU", "fuse_gelu"]

_RTOL = 1e-6
#: Match the tanh approximation too (False: only the exact GELU; ``ci/micro_gemm.py --before``'s switch).
MATCH_TANH = True


def _const(graph: Graph, name: str) -> float | None:
    value = graph.initializers.get(name)
    if value is None or np.size(value) != 1 or np.asarray(value).dtype != np.float32:
        return None
    return float(np.asarray(value).reshape(-1)[0])


def _is(value: float | None, want: float) -> bool:
    return value is not None and math.isclose(value, want, rel_tol=_RTOL)


def _other(node: Node, name: str) -> str | None:
    """The input of a two-input ``node`` that is not ``name`` (None when neither or both are)."""
    a, b = node.inputs
    return b if a == name and b != name else a if b == name and a != name else None


def _plain(node: Node | None, op: str) -> TypeGuard[Node]:
    return node is not None and node.domain == "" and node.op_type == op and len(node.inputs) == 2 \
        and len(node.outputs) == 1


def _match_erf(graph: Graph, erf: Node, reader: Callable[[str], Node | None]) -> tuple[str, list[Node], Node] | None:
    """``(x, nodes of the chain, its last node)`` for the chain around Erf node ``erf``."""
    if erf.domain != "" or len(erf.inputs) != 1 or len(erf.outputs) != 1:
        return None
    scaled = graph.producer.get(erf.inputs[0])
    if scaled is None or reader(erf.inputs[0]) is not erf or scaled.domain != "" or len(scaled.inputs) != 2:
        return None
    x = scaled.inputs[0]
    if graph.value_info.get(x) is None or graph.value_info[x].dtype != "float32":
        return None
    if not ((scaled.op_type == "Div" and _is(_const(graph, scaled.inputs[1]), math.sqrt(2.0)))
            or (scaled.op_type == "Mul" and _is(_const(graph, scaled.inputs[1]), math.sqrt(0.5)))):
        return None
    return _halved_product(graph, x, [scaled], erf, reader)


def _halved_product(graph: Graph, x: str, head: list[Node], act: Node,
                    reader: Callable[[str], Node | None]) -> tuple[str, list[Node], Node] | None:
    """The tail both GELUs share after their Erf or Tanh node ``act``: ``Add(., 1)``, then the product
    with ``x`` and 0.5 in either order; ``(x, head + act + tail, its last node)``."""
    add = reader(act.outputs[0])
    if not _plain(add, "Add") or not _is(_const(graph, _other(add, act.outputs[0]) or ""), 1.0):
        return None
    mul = reader(add.outputs[0])
    if not _plain(mul, "Mul"):
        return None
    partner = _other(mul, add.outputs[0])
    if partner == x:  # Mul(x, 1 + act) -> Mul(., 0.5)
        half = reader(mul.outputs[0])
        if not _plain(half, "Mul") or not _is(_const(graph, _other(half, mul.outputs[0]) or ""), 0.5):
            return None
        return x, [*head, act, add, mul, half], half
    halved = graph.producer.get(partner) if partner else None  # Mul(Mul(x, 0.5), 1 + act)
    if halved is None or not _plain(halved, "Mul") or partner is None or reader(partner) is not mul:
        return None
    if not _is(_const(graph, _other(halved, x) or ""), 0.5):
        return None
    return x, [halved, *head, act, add, mul], mul


def _scaled_by(graph: Graph, node: Node | None, value: float) -> str | None:
    """The other operand of ``node`` when it is a plain ``Mul`` by the constant ``value``."""
    if not _plain(node, "Mul"):
        return None
    for a, b in (node.inputs, node.inputs[::-1]):
        if _is(_const(graph, b), value) and _const(graph, a) is None:
            return a
    return None


def _cube_of(graph: Graph, node: Node | None, reader: Callable[[str], Node | None]) -> tuple[str, list[Node]] | None:
    """``(x, nodes)`` when ``node`` computes x**3 as ``Pow(x, 3)`` or ``Mul(x, Mul(x, x))`` (either order)."""
    if node is None or node.domain != "" or len(node.outputs) != 1:
        return None
    if node.op_type == "Pow" and len(node.inputs) == 2 and _is(_const(graph, node.inputs[1]), 3.0):
        return node.inputs[0], [node]
    if not _plain(node, "Mul"):
        return None
    for x, sq in (node.inputs, node.inputs[::-1]):
        square = graph.producer.get(sq)
        if _plain(square, "Mul") and square.inputs == (x, x) and reader(sq) is node:
            return x, [square, node]
    return None


def _match_tanh(graph: Graph, tanh: Node, reader: Callable[[str], Node | None]) -> tuple[str, list[Node], Node] | None:
    """``(x, nodes of the chain, its last node)`` for the tanh-approximation chain around ``tanh``."""
    if tanh.domain != "" or len(tanh.inputs) != 1 or len(tanh.outputs) != 1 or reader(tanh.inputs[0]) is not tanh:
        return None
    scaled = graph.producer.get(tanh.inputs[0])  # Mul(sqrt(2/pi), inner)
    inner_name = _scaled_by(graph, scaled, math.sqrt(2.0 / math.pi))
    inner = graph.producer.get(inner_name) if inner_name else None  # Add(x, Mul(0.044715, x**3))
    if scaled is None or inner is None or not _plain(inner, "Add") or reader(inner.outputs[0]) is not scaled:
        return None
    for x, term in (inner.inputs, inner.inputs[::-1]):
        times = graph.producer.get(term)
        if times is None or reader(term) is not inner:
            continue
        cubed_name = _scaled_by(graph, times, 0.044715)
        cubed = graph.producer.get(cubed_name) if cubed_name else None
        cube = _cube_of(graph, cubed, reader) if cubed_name and reader(cubed_name) is times else None
        if cube is None or cube[0] != x:
            continue
        if graph.value_info.get(x) is None or graph.value_info[x].dtype != "float32":
            return None
        return _halved_product(graph, x, [*cube[1], times, inner, scaled], tanh, reader)
    return None


def fuse_gelu(graph: Graph) -> Graph:
    """``graph`` with every exact-GELU and tanh-GELU chain as one ``Gelu`` node (the same object when
    there is none)."""
    acts = ("Erf", "Tanh") if MATCH_TANH else ("Erf",)
    if not any(n.op_type in acts for n in graph.nodes):
        return graph
    reader = sole_reader(graph)
    taken: set[int] = set()
    at: dict[int, list[Node]] = {}
    for act in (n for n in graph.nodes if n.op_type in acts):
        found = _match_erf(graph, act, reader) if act.op_type == "Erf" else _match_tanh(graph, act, reader)
        if found is None:
            continue
        x, chain, last = found
        if any(id(n) in taken for n in chain):
            continue
        taken |= {id(n) for n in chain}
        for n in chain:
            at[id(n)] = []
        attrs = {"approximate": "tanh"} if act.op_type == "Tanh" else {}
        at[id(last)] = [Node("Gelu", (x,), last.outputs, f"{last.name or last.outputs[0]}.gelu", attrs=attrs)]
    if not at:
        return graph
    gone = {o for n in graph.nodes if at.get(id(n)) == [] for o in n.outputs}  # the chains' intermediates
    inits = dict(graph.initializers)
    value_info = {k: v for k, v in graph.value_info.items() if k not in gone}
    return splice(graph, at, inits, value_info)


FUSE_GELU = Pass("fuse-gelu", fuse_gelu,
                 "the exported exact and tanh GELU chains (Erf or Tanh, Add 1, Mul x, Mul 0.5) as one Gelu")
