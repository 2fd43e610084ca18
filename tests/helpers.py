"""Small models built with onnx.helper, shared by tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper


def make_model(nodes: list[onnx.NodeProto], inputs: Sequence[tuple[str, int, Sequence]],
               outputs: Sequence[tuple[str, int, Sequence | None]], initializers: Sequence[onnx.TensorProto] = (),
               opset: int = 17, name: str = "g") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def add_relu_model(shape: Sequence = (2, 3)) -> onnx.ModelProto:
    """r = relu(x + y), with y broadcast along the last dim."""
    return make_model(
        [helper.make_node("Add", ["x", "y"], ["z"], name="add"), helper.make_node("Relu", ["z"], ["r"], name="relu")],
        [("x", TensorProto.FLOAT, list(shape)), ("y", TensorProto.FLOAT, [shape[-1]])],
        [("r", TensorProto.FLOAT, list(shape))],
    )


def shape_chain_model() -> onnx.ModelProto:
    """A torch-export-like shape computation: reshape x to (batch, -1) via Shape/Gather/Concat."""
    idx0 = helper.make_tensor("idx0", TensorProto.INT64, [], [0])
    minus1 = helper.make_tensor("minus1", TensorProto.INT64, [1], [-1])
    axes0 = helper.make_tensor("axes0", TensorProto.INT64, [1], [0])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "idx0"], ["b"], axis=0, name="gather"),
        helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"], name="unsq"),
        helper.make_node("Concat", ["b1", "minus1"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "newshape"], ["y"], name="reshape"),
        helper.make_node("Relu", ["y"], ["out"], name="relu"),
    ]
    return make_model(nodes, [("x", TensorProto.FLOAT, [2, 3, 4])], [("out", TensorProto.FLOAT, [2, 12])],
                      [idx0, minus1, axes0])


def rand(shape: Sequence[int], seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def matmul_model(n: int = 64) -> onnx.ModelProto:
    """``y = x @ w`` with x [n, n] and a constant w [n, n]: one node for tests of a backend's rKernel choice."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [n, n], rand((n, n), 1).ravel().tolist())
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", TensorProto.FLOAT, (n, n))],
                      [("y", TensorProto.FLOAT, (n, n))], initializers=[w])
