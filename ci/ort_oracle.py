"""onnxruntime as the oracle of a correctness check, made exact where its int8 kernels are not.

On an x86 CPU without VNNI (AVX2 only, or AVX-512 without VNNI), onnxruntime's uint8 x int8 kernels
(QLinearConv, QLinearMatMul, MatMulInteger, ConvInteger) sum pairs of byte products in saturating int16
(``vpmaddubsw``), so single outputs come out many quantization steps off the ONNX spec: 16 steps on
the corpus's mobilenet-v2-int8-qop, where the reference and ``cpu`` agree with each other exactly.

Its uint8 x uint8 kernels widen to int16 first and are exact. ``w - zw`` equals ``(w + 128) - (zw + 128)``,
so a model whose int8 weights (and their zero points) are shifted to uint8 computes the same function,
and onnxruntime runs it exactly. ``expected_outputs`` runs that shifted copy on such CPUs and the model
as given everywhere else; the timed side of a benchmark always runs the model as given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from rammer.backends.cpu.machine_code import HOST_FEATURES

ORT_U8S8_EXACT = bool(HOST_FEATURES & {"avx512vnni", "avxvnni"})

# op -> (activation input, weight input, weight zero-point input)
_INT8_PRODUCT_INPUTS = {"QLinearConv": (0, 3, 5), "QLinearMatMul": (0, 3, 5),
                        "MatMulInteger": (0, 1, 3), "ConvInteger": (0, 1, 3)}


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.value_info) + list(g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def _shifted(init: onnx.TensorProto, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array((numpy_helper.to_array(init).astype(np.int16) + 128).astype(np.uint8), name)


def uint8_weights(data: bytes) -> bytes:
    """The same model with every int8 weight initializer of a uint8-activation product op (and its zero
    point) shifted by +128 to uint8, as new initializers so that other readers of the originals keep them."""
    model = onnx.load_from_string(data)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    types = _elem_types(model)
    added: dict[str, str] = {}
    changed = False
    for node in graph.node:
        where = _INT8_PRODUCT_INPUTS.get(node.op_type)
        if where is None:
            continue
        a, w, z = where
        if len(node.input) <= w or types.get(node.input[a]) != TensorProto.UINT8:
            continue
        weight = inits.get(node.input[w])
        if weight is None or weight.data_type != TensorProto.INT8:
            continue
        zp_name = node.input[z] if len(node.input) > z else ""
        zp = inits.get(zp_name) if zp_name else None
        if zp_name and (zp is None or zp.data_type != TensorProto.INT8):
            continue  # a computed zero point cannot be shifted here: leave the node as it is
        for index, source in ((w, weight), (z, zp)):
            if source is None:
                continue
            if source.name not in added:
                added[source.name] = f"{source.name}__as_uint8"
                graph.initializer.append(_shifted(source, added[source.name]))
            node.input[index] = added[source.name]
        if not zp_name:  # an absent int8 zero point is 0, so the shifted one is 128
            name = f"{node.name or node.output[0]}__uint8_zero_point"
            graph.initializer.append(numpy_helper.from_array(np.array(128, np.uint8), name))
            while len(node.input) < z:
                node.input.append("")
            node.input.append(name)
        changed = True
    return model.SerializeToString() if changed else data


def expected_outputs(data: bytes, feeds: dict[str, np.ndarray], threads: int) -> dict[str, Any]:
    """onnxruntime's outputs for ``data``, by name: on a CPU whose onnxruntime int8 sums saturate, those of
    the uint8-weight copy (the same function, computed exactly)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(data if ORT_U8S8_EXACT else uint8_weights(data), so,
                                providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
