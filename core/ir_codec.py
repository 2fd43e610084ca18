"""IR graphs as plain data (JSON text and an ``.npz`` of arrays, never pickle).

What a compile cache entry or a saved model keeps of a graph so that its program
runs without the model being imported again: the graph's name, inputs and
outputs, and the nodes the program leaves to the host (``keep``), with the
tensors and constants they read.  The other nodes are replaced by placeholders,
so that node indices still mean the same nodes.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

import numpy as np

from .ir import Graph, Node, TensorInfo, outer_names

__all__ = ["encode_graph", "decode_graph", "PLACEHOLDER", "CodecError"]

#: op_type of the nodes a partial graph does not keep (compiled by the backend).
PLACEHOLDER = "rammer.Compiled"


class CodecError(ValueError):
    """Data that is not an encoded graph."""


class _Arrays:
    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, value: np.ndarray) -> str:
        key = f"a{len(self.arrays)}"
        # (np.ascontiguousarray alone makes a 0-d array 1-d: a cached Size's scalar came back as [n])
        self.arrays[key] = np.ascontiguousarray(value).reshape(np.shape(value))
        return key


def _info(t: TensorInfo) -> list[Any]:
    return [t.name, t.dtype, [int(d) for d in t.shape]]


def _value(v: Any, arrays: _Arrays) -> Any:
    if isinstance(v, bool):
        return {"b": v}
    if isinstance(v, (int, np.integer)):
        return {"i": int(v)}
    if isinstance(v, (float, np.floating)):
        return {"f": float(v)}
    if isinstance(v, str):
        return {"s": v}
    if isinstance(v, bytes):
        return {"y": base64.b64encode(v).decode()}
    if v is None:
        return {"n": 0}
    if isinstance(v, np.ndarray):
        if v.dtype == object:
            return {"o": [_value(x, arrays) for x in v.reshape(-1).tolist()], "shape": list(v.shape)}
        return {"a": arrays.add(v)}
    if isinstance(v, Graph):
        return {"g": _graph(v, arrays, None)}
    if isinstance(v, TensorInfo):
        return {"t": _info(v)}
    if isinstance(v, (list, tuple)):
        return {"l" if isinstance(v, list) else "u": [_value(x, arrays) for x in v]}
    raise CodecError(f"cannot store an attribute value of type {type(v).__name__}")


def _node(n: Node, arrays: _Arrays) -> dict[str, Any]:
    return {"op": n.op_type, "in": list(n.inputs), "out": list(n.outputs), "name": n.name, "domain": n.domain,
            "attrs": {k: _value(v, arrays) for k, v in n.attrs.items()}}


def _graph(g: Graph, arrays: _Arrays, keep: Iterable[int] | None) -> dict[str, Any]:
    if keep is None:
        kept = dict(enumerate(g.nodes))
        inits, infos = dict(g.initializers), dict(g.value_info)
    else:
        kept = {i: g.nodes[i] for i in sorted(set(keep))}
        names = {t.name for t in g.inputs + g.outputs}
        for node in kept.values():
            names |= {x for x in node.inputs + node.outputs if x}
            names |= set(outer_names(node))
        inits = {k: v for k, v in g.initializers.items() if k in names}
        infos = {k: v for k, v in g.value_info.items() if k in names}
    return {"name": g.name, "inputs": [_info(t) for t in g.inputs], "outputs": [_info(t) for t in g.outputs],
            "count": len(g.nodes), "nodes": [[i, _node(n, arrays)] for i, n in kept.items()],
            "inits": {k: _value(np.asarray(v), arrays) for k, v in inits.items()},
            "infos": [_info(t) for t in infos.values()], "opset": dict(g.opset)}


def encode_graph(graph: Graph, keep: Iterable[int] | None = None) -> tuple[bytes, bytes]:
    """``graph`` as (JSON, npz) bytes; with ``keep``, only those node indices (and what they read)."""
    arrays = _Arrays()
    text = json.dumps(_graph(graph, arrays, keep), separators=(",", ":"), allow_nan=True).encode()
    buf = io.BytesIO()
    np.savez(buf, **cast("dict[str, Any]", arrays.arrays))  # numpy's stub types **kwds as its own options
    return text, buf.getvalue()


# -- decoding -----------------------------------------------------------------------------------------

def _dec_info(x: Any) -> TensorInfo:
    name, dtype, shape = x
    return TensorInfo(str(name), str(dtype), tuple(int(d) for d in shape))


def _dec_value(v: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Any:
    (tag, body), = ((k, x) for k, x in v.items() if k != "shape")
    if tag == "b":
        return bool(body)
    if tag == "i":
        return int(body)
    if tag == "f":
        return float(body)
    if tag == "s":
        return str(body)
    if tag == "y":
        return base64.b64decode(body)
    if tag == "n":
        return None
    if tag == "a":
        return arrays[body]
    if tag == "o":
        out = np.empty(len(body), dtype=object)
        out[:] = [_dec_value(x, arrays) for x in body]
        return out.reshape(tuple(int(d) for d in v["shape"]))
    if tag == "g":
        return _dec_graph(body, arrays)
    if tag == "t":
        return _dec_info(body)
    if tag == "l":
        return [_dec_value(x, arrays) for x in body]
    if tag == "u":
        return tuple(_dec_value(x, arrays) for x in body)
    raise CodecError(f"unknown value tag {tag!r}")


def _dec_node(d: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Node:
    return Node(str(d["op"]), tuple(str(x) for x in d["in"]), tuple(str(x) for x in d["out"]), str(d["name"]),
                str(d["domain"]), {str(k): _dec_value(v, arrays) for k, v in d["attrs"].items()})


def _dec_graph(d: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Graph:
    count = int(d["count"])
    nodes: list[Node] = [Node(PLACEHOLDER, (), (), f"compiled#{i}", "rammer") for i in range(count)]
    for i, nd in d["nodes"]:
        if not 0 <= int(i) < count:
            raise CodecError(f"node index {i} outside a graph of {count} nodes")
        nodes[int(i)] = _dec_node(nd, arrays)
    inits = {str(k): _dec_value(v, arrays) for k, v in d["inits"].items()}
    infos = {t.name: t for t in (_dec_info(x) for x in d["infos"])}
    return Graph(str(d["name"]), tuple(_dec_info(x) for x in d["inputs"]), tuple(_dec_info(x) for x in d["outputs"]),
                 tuple(nodes), inits, infos, {str(k): int(v) for k, v in d["opset"].items()})


def decode_graph(text: bytes, npz: bytes) -> Graph:
    """The graph :func:`encode_graph` stored; :class:`CodecError` when the data is not one."""
    try:
        with np.load(io.BytesIO(npz), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        return _dec_graph(json.loads(text), arrays)
    except CodecError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, OSError) as exc:
        raise CodecError(f"{type(exc).__name__}: {exc}") from None
