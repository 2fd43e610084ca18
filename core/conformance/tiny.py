"""A tiny model of one op the backend claims, for checks about the run-time
contract rather than about ops (feeds, repeatability, caching, source)."""

from __future__ import annotations

import importlib

import pytest

from .target import Target

#: (op, number of inputs, input shapes) tried in order; the first claimed op wins.
_CANDIDATES: list[tuple[str, list[tuple[int, ...]]]] = [
    ("Add", [(2, 3), (2, 3)]),
    ("Mul", [(2, 3), (2, 3)]),
    ("Sub", [(2, 3), (2, 3)]),
    ("MatMul", [(2, 3), (3, 4)]),
    ("Relu", [(2, 3)]),
    ("Sigmoid", [(2, 3)]),
    ("Tanh", [(2, 3)]),
    ("Abs", [(2, 3)]),
    ("Neg", [(2, 3)]),
    ("Identity", [(2, 3)]),
]


def _dtype(target: Target) -> str:
    declared = sorted(target.caps.dtypes)
    if "float32" in declared:
        return "float32"
    floats = [d for d in declared if d.startswith("float")]
    if floats:
        return floats[0]
    numeric = [d for d in declared if d not in ("bool", "object")]
    if not numeric:
        pytest.skip(f"the backend declares no numeric dtype (capabilities.dtypes: {declared})")
    return numeric[0]


def tiny_graph(target: Target):
    """A one-node graph of the first candidate op the backend claims (or can fall back for)."""
    import onnx
    from onnx import helper

    from ..dtypes import to_onnx
    from ..frontend import load

    sample = target.caps.extra.get("sample_model")
    if sample:
        # A backend whose tiny models are not one-op float graphs (a quantized image backend)
        # names its own: "module:function" returning an ONNX ModelProto.
        module, _, func = str(sample).partition(":")
        return load(getattr(importlib.import_module(module), func)())
    dtype = _dtype(target)
    for op, shapes in _CANDIDATES:
        if not (target.claims_op(op) or target.caps.reference_fallback):
            continue
        if op in ("Relu", "Sigmoid", "Tanh") and not dtype.startswith("float"):
            continue
        elem = to_onnx(dtype)
        names = ["x", "y"][: len(shapes)]
        out_shape = shapes[0] if op != "MatMul" else (shapes[0][0], shapes[1][1])
        graph = helper.make_graph(
            [helper.make_node(op, names, ["z"], name=f"{op.lower()}_0")], f"tiny_{op.lower()}",
            [helper.make_tensor_value_info(n, elem, s) for n, s in zip(names, shapes)],
            [helper.make_tensor_value_info("z", elem, out_shape)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = min(model.ir_version, onnx.IR_VERSION)
        return load(model)
    pytest.skip("the backend claims none of " + ", ".join(op for op, _ in _CANDIDATES)
                + " and has no reference_fallback, so there is no tiny model to check the run-time contract with")
