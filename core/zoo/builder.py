"""A small helper for writing ONNX graphs in code.

The zoo builders describe models as a sequence of ``b.op(...)`` calls; this
class keeps names unique, turns numpy arrays into initializers, draws random
weights from one seeded generator (so a seed fully decides the weights) and
assembles the final :class:`onnx.ModelProto`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

#: The ai.onnx opset every zoo model is written against.
ZOO_OPSET = 17

# The IR version onnxruntime and the onnx checker both accept for opset 17
# (the newest onnx would stamp a version some runtimes refuse).
_IR_VERSION = 8


class GraphBuilder:
    """Accumulates nodes, initializers and graph inputs/outputs for one model."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self._nodes: list[onnx.NodeProto] = []
        # Kept as arrays until model(): each weight is copied into the proto
        # once (helper.make_graph/make_model would copy 250 MB twice more).
        self._initializers: list[tuple[str, np.ndarray]] = []
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()
        # Small constants (axes, split sizes...) are shared by value so a
        # 14,000-node graph does not carry 14,000 copies of the same [1].
        self._const_cache: dict[tuple[str, tuple[int, ...], bytes], str] = {}

    # -- naming -----------------------------------------------------------
    def unique(self, name: str) -> str:
        """Return ``name``, or ``name_2``, ``name_3``... if already taken."""
        if name not in self._names:
            self._names.add(name)
            return name
        i = 2
        while f"{name}_{i}" in self._names:
            i += 1
        final = f"{name}_{i}"
        self._names.add(final)
        return final

    # -- graph interface --------------------------------------------------
    def input(self, name: str, shape: Sequence[int]) -> str:
        """Declare a float32 graph input with a fully static shape."""
        name = self.unique(name)
        self._inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def output(self, tensor: str, shape: Sequence[int]) -> None:
        """Declare an existing float32 tensor as a graph output."""
        self._outputs.append(helper.make_tensor_value_info(tensor, TensorProto.FLOAT, list(shape)))

    # -- constants and weights -------------------------------------------
    def const(self, name: str, value: np.ndarray) -> str:
        """Add ``value`` as an initializer (deduplicated when small)."""
        value = np.ascontiguousarray(value)
        key = None
        if value.size <= 16:
            key = (value.dtype.str, value.shape, value.tobytes())
            cached = self._const_cache.get(key)
            if cached is not None:
                return cached
        name = self.unique(name)
        self._initializers.append((name, value))
        if key is not None:
            self._const_cache[key] = name
        return name

    def int64s(self, name: str, values: Sequence[int]) -> str:
        """A 1-D int64 constant (axes, split sizes, shapes, pads)."""
        return self.const(name, np.asarray(list(values), dtype=np.int64))

    def zeros(self, name: str, shape: Sequence[int]) -> str:
        """A float32 all-zero initializer (initial RNN states)."""
        return self.const(name, np.zeros(tuple(shape), dtype=np.float32))

    def weight(self, name: str, shape: Sequence[int], std: float) -> str:
        """A float32 weight with mean 0 and standard deviation ``std``.

        Drawn uniformly from [-std*sqrt(3), std*sqrt(3)): uniform float32
        draws are several times faster than normal ones, which matters for
        the 60M-parameter CNNs, and only the variance matters for scaling.
        """
        bound = np.float32(std * np.sqrt(3.0))
        value = self.rng.random(tuple(shape), dtype=np.float32)
        value *= np.float32(2.0) * bound
        value -= bound
        return self.const(name, value)

    # -- nodes --------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str], name: str, **attrs: Any) -> str:
        """Add a single-output node; its output tensor carries the node's name."""
        return self.op_multi(op_type, inputs, name, 1, **attrs)[0]

    def op_multi(
        self, op_type: str, inputs: Sequence[str], name: str, n_outputs: int, **attrs: Any
    ) -> list[str]:
        """Add a node with ``n_outputs`` outputs named ``<name>_<i>``."""
        name = self.unique(name)
        if n_outputs == 1:
            outputs = [name]
        else:
            outputs = [self.unique(f"{name}_{i}") for i in range(n_outputs)]
        self._nodes.append(helper.make_node(op_type, list(inputs), outputs, name=name, **attrs))
        return outputs

    # -- result ---------------------------------------------------------------
    def model(self, doc: str = "") -> onnx.ModelProto:
        """Assemble the ModelProto (opset 17, producer ``rammer.zoo``)."""
        model = onnx.ModelProto()
        model.ir_version = _IR_VERSION
        model.producer_name = "rammer.zoo"
        model.opset_import.append(helper.make_opsetid("", ZOO_OPSET))
        graph = model.graph
        graph.name = self.name
        graph.doc_string = doc
        graph.node.extend(self._nodes)
        graph.input.extend(self._inputs)
        graph.output.extend(self._outputs)
        for name, value in self._initializers:
            tensor = graph.initializer.add()
            tensor.name = name
            tensor.data_type = helper.np_dtype_to_tensor_dtype(value.dtype)
            tensor.dims.extend(value.shape)
            tensor.raw_data = value.astype(value.dtype.newbyteorder("<"), copy=False).tobytes()
        return model
