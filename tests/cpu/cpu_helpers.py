"""Building one-node ONNX models and comparing the cpu backend with the reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

import rammer

_ONNX_TYPE = {"float32": onnx.TensorProto.FLOAT, "int64": onnx.TensorProto.INT64, "bool": onnx.TensorProto.BOOL,
              "int32": onnx.TensorProto.INT32, "float64": onnx.TensorProto.DOUBLE}


def model(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], consts: dict[str, np.ndarray] | None = None,
          opset: int = 17) -> onnx.ModelProto:
    """A model whose ``inputs`` are graph inputs (their arrays give dtype and shape)."""
    g = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(k, _ONNX_TYPE[v.dtype.name], v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (consts or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    # Output types and shapes from ONNX's own inference (the checker wants them).
    inferred = onnx.shape_inference.infer_shapes(m)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    del m.graph.output[:]
    for o in outputs:
        m.graph.output.append(known[o] if known[o].type.HasField("tensor_type") else
                              helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None))
    return m


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs or ["y"], **attrs)


def compare(m: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5,
            expect_fallback: bool | None = False, **options: Any) -> dict[str, Any]:
    """Compile on cpu and reference, run both, assert equal within tolerance; returns the cpu report.
    Without ``veus`` the cpu program gets one vEU per core (not the cost model's choice, which puts
    these one-op models on one vEU): the op tests keep covering rTasks split across vEUs."""
    from rammer.backends.cpu.scheduling import default_veus

    options.setdefault("veus", default_veus())
    cpu = rammer.compile(m, backend="cpu", cache=False, **options)
    ref = rammer.compile(m, backend="reference")
    got, want = cpu(feeds), ref(feeds)
    for k in want:
        assert got[k].dtype == want[k].dtype, (k, got[k].dtype, want[k].dtype)
        assert got[k].shape == want[k].shape, (k, got[k].shape, want[k].shape)
        if want[k].dtype.kind == "f":
            np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, equal_nan=True, err_msg=k)
        else:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    report = cpu.executable.report
    if expect_fallback is not None:
        assert bool(report["fallbacks"]) == expect_fallback, report["fallbacks"]
    return report


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def conv_model(x_shape: tuple, w_shape: tuple, n_bias: bool = True, epilogue: tuple = (),
               **attrs: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A Conv (weights and bias constant) followed by the ``epilogue`` ops in a chain; an "Add"
    adds another graph input of the output's shape.  Returns the model and its feeds."""
    x = rand(*x_shape)
    consts = {"w": rand(*w_shape, seed=1)}
    ins = ["x", "w"]
    if n_bias:
        consts["b"] = rand(w_shape[0], seed=2)
        ins.append("b")
    nodes = [node("Conv", ins, ["c"], **attrs)]
    last = "c"
    feeds = {"x": x}
    for k, op in enumerate(epilogue):
        out = f"e{k}"
        if op == "Add":
            # residual: another graph input with the output's shape
            nodes.append(node("Add", [last, "r"], [out]))
        else:
            nodes.append(node(op, [last], [out]))
        last = out
    if "Add" in epilogue:
        probe = model(nodes[:1], {"x": x}, ["c"], consts)
        inferred = onnx.shape_inference.infer_shapes(probe).graph.output[0]
        shape = [d.dim_value for d in inferred.type.tensor_type.shape.dim]
        feeds["r"] = rand(*shape, seed=3)
    return model(nodes, feeds, [last], consts), feeds
