"""Small graphs shaped like torch.onnx exports (Gemm/Linear, attention, conv blocks)."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_small_ipu(path: str | os.PathLike, tiles: int, sram: int) -> str:
    """A vDevice file of ``tiles`` IPU tiles of ``sram`` bytes each (the memory-pressure tests' chip)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({
            "kind": "ipu", "name": "small-ipu", "num_veus": tiles, "veu": {"threads": 6, "local_mem_bytes": sram},
            "veu_gflops": 40.0, "veu_gbps": 32.0, "rtask_overhead_us": 0.1, "barrier_us": 0.5,
            "kernel_launch_us": 1.5, "local_memory_only": True, "constant_memory": "local",
            "memory_bytes": tiles * sram}, f)
    return str(path)


def _init(name: str, shape, seed: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.3, name)


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def mlp() -> onnx.ModelProto:
    """torch.nn.Sequential(Linear, ReLU, Linear) + softmax, as torch.onnx writes it (Gemm transB=1)."""
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["o"], transB=1),
             helper.make_node("Softmax", ["o"], ["y"], axis=-1)]
    return _model(nodes, [("x", [4, 32])], [("y", [4, 10])],
                  [_init("w1", (64, 32), 1), _init("b1", (64,), 2), _init("w2", (10, 64), 3), _init("b2", (10,), 4)])


def attention() -> onnx.ModelProto:
    """One head of self-attention with view/transpose shape arithmetic."""
    shape = numpy_helper.from_array(np.array([1, 8, 16], dtype=np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["y"])]
    scale = numpy_helper.from_array(np.array(0.25, dtype=np.float32), "scale")
    return _model(nodes, [("x", [1, 8, 16])], [("y", [1, 8, 16])],
                  [_init("wq", (16, 16), 5), _init("wk", (16, 16), 6), _init("wv", (16, 16), 7), scale, shape])


def conv_block() -> onnx.ModelProto:
    """Conv + BatchNorm-folded bias + ReLU + MaxPool + Flatten + Gemm."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    return _model(nodes, [("x", [1, 3, 8, 8])], [("y", [1, 5])],
                  [_init("w", (8, 3, 3, 3), 8), _init("b", (8,), 9), _init("fw", (5, 128), 10), _init("fb", (5,), 11)])


GRAPHS = {"mlp": mlp, "attention": attention, "conv_block": conv_block}
