"""A small helper for writing ONNX graphs in code.

The zoo builders describe models as a sequence of ``b.op(...)`` calls; this
class keeps names unique, turns numpy arrays into initializers, draws random
weights from one seeded generator (so a seed fully decides the weights) and
assembles the final :class:`onnx.ModelProto`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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
        self._initializers: list[onnx.TensorProto] = []
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
        self._initializers.append(numpy_helper.from_array(value, name))
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
        """A float32 weight drawn from N(0, std^2) with the builder's generator."""
        value = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        value *= np.float32(std)
        return self.const(name, value)

    def uniform(self, name: str, shape: Sequence[int], bound: float) -> str:
        """A float32 weight drawn from U(-bound, bound)."""
        value = self.rng.uniform(-bound, bound, size=tuple(shape)).astype(np.float32)
        return self.const(name, value)

    # -- nodes --------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str], name: str, **attrs: object) -> str:
        """Add a single-output node; its output tensor carries the node's name."""
        return self.op_multi(op_type, inputs, name, 1, **attrs)[0]

    def op_multi(
        self, op_type: str, inputs: Sequence[str], name: str, n_outputs: int, **attrs: object
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
        graph = helper.make_graph(
            self._nodes, self.name, self._inputs, self._outputs, initializer=self._initializers
        )
        graph.doc_string = doc
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", ZOO_OPSET)],
            producer_name="rammer.zoo",
            ir_version=_IR_VERSION,
        )
        return model
