"""Breaking valid models: structured edits and raw protobuf damage.

``mutate(model, seed)`` returns the bytes of a changed model.  Structured edits
keep the protobuf well-formed and break the model's meaning (a dangling tensor
name, a duplicate output, an attribute of the wrong type or value, a wrong
initializer size, an edited value type or shape, a removed node, a changed
opset); byte edits (flips, truncation, splices) break the encoding.  Every
result must be either run correctly or refused with a :class:`RammerError` that
names what is wrong.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["mutate", "MUTATIONS"]


def _nodes(m: onnx.ModelProto) -> list[onnx.NodeProto]:
    return list(m.graph.node)


def _dangling_input(m, rng):
    n = _nodes(m)[int(rng.integers(len(m.graph.node)))]
    if n.input:
        n.input[int(rng.integers(len(n.input)))] = "no_such_tensor"


def _duplicate_output(m, rng):
    ns = _nodes(m)
    if len(ns) >= 2:
        a, b = rng.choice(len(ns), size=2, replace=False)
        ns[int(b)].output[0] = ns[int(a)].output[0]


def _drop_node(m, rng):
    del m.graph.node[int(rng.integers(len(m.graph.node)))]


def _swap_nodes(m, rng):
    ns = _nodes(m)
    if len(ns) >= 2:
        a, b = sorted(int(x) for x in rng.choice(len(ns), size=2, replace=False))
        na, nb = onnx.NodeProto(), onnx.NodeProto()
        na.CopyFrom(ns[a])
        nb.CopyFrom(ns[b])
        m.graph.node[a].CopyFrom(nb)
        m.graph.node[b].CopyFrom(na)


def _attr_value(m, rng):
    ns = [n for n in _nodes(m) if n.attribute]
    if not ns:
        return
    a = ns[int(rng.integers(len(ns)))].attribute
    attr = a[int(rng.integers(len(a)))]
    choice = int(rng.integers(5))
    if attr.type == onnx.AttributeProto.INT:
        attr.i = int([0, -1, -7, 1 << 40, 3][choice])
    elif attr.type == onnx.AttributeProto.INTS and len(attr.ints):
        attr.ints[int(rng.integers(len(attr.ints)))] = int([0, -1, -9, 1 << 33, 99][choice])
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = float([np.nan, np.inf, -1.0, 0.0, 1e30][choice])
    elif attr.type == onnx.AttributeProto.STRING:
        attr.s = [b"", b"bogus", b"SAME_UPPER", b"\xff\xfe", b"VALID"][choice]


def _attr_type(m, rng):
    ns = [n for n in _nodes(m) if n.attribute]
    if not ns:
        return
    n = ns[int(rng.integers(len(ns)))]
    i = int(rng.integers(len(n.attribute)))
    name = n.attribute[i].name
    del n.attribute[i]
    n.attribute.append([helper.make_attribute(name, "text"), helper.make_attribute(name, [1.5, 2.5]),
                        helper.make_attribute(name, 3)][int(rng.integers(3))])


def _drop_attr(m, rng):
    ns = [n for n in _nodes(m) if n.attribute]
    if ns:
        n = ns[int(rng.integers(len(ns)))]
        del n.attribute[int(rng.integers(len(n.attribute)))]


def _init_dims(m, rng):
    if not m.graph.initializer:
        return
    t = m.graph.initializer[int(rng.integers(len(m.graph.initializer)))]
    arr = numpy_helper.to_array(t)
    kind = int(rng.integers(4))
    if kind == 0 and arr.size > 1:
        new = arr.reshape(-1)[:-1]
    elif kind == 1:
        new = np.concatenate([arr.reshape(-1), arr.reshape(-1)[:1]]) if arr.size else np.zeros(1, arr.dtype)
    elif kind == 2:
        new = arr.astype(np.float64) if arr.dtype != np.float64 else arr.astype(np.int64)
    else:
        new = np.array(["x"] * max(arr.size, 1), dtype=object)
    t.CopyFrom(numpy_helper.from_array(new, t.name))


def _init_raw(m, rng):
    if not m.graph.initializer:
        return
    t = m.graph.initializer[int(rng.integers(len(m.graph.initializer)))]
    if t.raw_data:
        t.raw_data = t.raw_data[: max(0, len(t.raw_data) - int(rng.integers(1, 9)))]
    else:
        t.dims.append(int(rng.integers(2, 5)))


def _input_type(m, rng):
    vi = m.graph.input[int(rng.integers(len(m.graph.input)))]
    vi.type.tensor_type.elem_type = int(rng.choice([TensorProto.INT64, TensorProto.STRING, TensorProto.DOUBLE,
                                                    TensorProto.BOOL, TensorProto.UINT8, 0]))


def _input_shape(m, rng):
    vi = m.graph.input[int(rng.integers(len(m.graph.input)))]
    dims = vi.type.tensor_type.shape.dim
    kind = int(rng.integers(4))
    if kind == 0 and len(dims):
        dims[int(rng.integers(len(dims)))].dim_value = int(rng.choice([0, 1 << 40, 7]))
    elif kind == 1:
        dims.add().dim_value = 2
    elif kind == 2 and len(dims):
        del dims[int(rng.integers(len(dims)))]
    elif len(dims):
        dims[int(rng.integers(len(dims)))].dim_param = str(rng.choice(["?", "N", ""]))


def _output_shape(m, rng):
    vi = m.graph.output[int(rng.integers(len(m.graph.output)))]
    dims = vi.type.tensor_type.shape.dim
    if len(dims):
        dims[int(rng.integers(len(dims)))].dim_value = int(rng.integers(1, 50))


def _opset(m, rng):
    m.opset_import[0].version = int(rng.choice([1, 6, 9, 10, 30, 10_000]))


def _op_type(m, rng):
    n = _nodes(m)[int(rng.integers(len(m.graph.node)))]
    n.op_type = str(rng.choice(["Relu", "Conv", "MatMul", "Add", "NoSuchOp", "Softmax", "Gemm", "Concat"]))


def _rename_graph(m, rng):
    m.graph.name = str(rng.choice(['"""; import os; """', "a\nb", "", "x" * 5000, "\u202e evil"]))
    if m.graph.node:
        m.graph.node[0].name = str(rng.choice(["*/ bad", "'); drop", "\x00nul", ""]))


def _extra_input(m, rng):
    n = _nodes(m)[int(rng.integers(len(m.graph.node)))]
    n.input.append(str(rng.choice([n.input[0] if n.input else "", "no_such", ""])))


MUTATIONS = [_dangling_input, _duplicate_output, _drop_node, _swap_nodes, _attr_value, _attr_type, _drop_attr,
             _init_dims, _init_raw, _input_type, _input_shape, _output_shape, _opset, _op_type, _rename_graph,
             _extra_input]


def _bytes_damage(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    kind = int(rng.integers(3))
    if kind == 0 and b:
        for _ in range(int(rng.integers(1, 8))):
            i = int(rng.integers(len(b)))
            b[i] ^= 1 << int(rng.integers(8))
    elif kind == 1 and b:
        b = b[: int(rng.integers(len(b)))]
    elif b:
        i, j = sorted(int(x) for x in rng.integers(0, len(b), size=2))
        b = b[:i] + b[j:] + b[i:j]
    return bytes(b)


def mutate(model: onnx.ModelProto, seed: int) -> tuple[bytes, str]:
    """The bytes of a broken copy of ``model`` and the name of what was done to it."""
    rng = np.random.default_rng(seed)
    if rng.random() < 0.2:
        return _bytes_damage(model.SerializeToString(), rng), "bytes"
    m = onnx.ModelProto()
    m.CopyFrom(model)
    names = []
    for _ in range(int(rng.integers(1, 3))):
        f = MUTATIONS[int(rng.integers(len(MUTATIONS)))]
        if not m.graph.node:
            break
        f(m, rng)
        names.append(f.__name__.lstrip("_"))
    return m.SerializeToString(), "+".join(names)
