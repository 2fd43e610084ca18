"""Small graphs for Before/Expected tests of graph passes, written with onnx.helper and loaded
through rammer's frontend (so every tensor gets its dtype and shape as in a real model)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.ir import Graph, assert_graphs_equal

__all__ = ["graph", "node", "assert_graphs_equal", "assert_left_alone"]

node = helper.make_node


def graph(nodes: Sequence, inputs: Mapping[str, Sequence[int]], outputs: Mapping[str, Sequence[int]],
          inits: Mapping[str, np.ndarray] | None = None, opset: int = 17) -> Graph:
    """The IR of a float32 ONNX graph of ``nodes`` with these inputs, outputs (name -> shape) and
    initializers (name -> array, in their own dtype)."""
    g = helper.make_graph(
        list(nodes), "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return rammer.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))


def assert_left_alone(pass_fn, before: Graph) -> None:
    """The pass has nothing to do on ``before``: it returns the very same graph."""
    after = pass_fn(before)
    assert after is before, "the pass rewrote a graph it must leave alone"
