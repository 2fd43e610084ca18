"""Mapping between ONNX element types and the IR's numpy dtype names."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .errors import ShapeError

_ONNX_TO_NAME: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64",
    TensorProto.FLOAT16: "float16",
    TensorProto.INT8: "int8",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.UINT8: "uint8",
    TensorProto.UINT16: "uint16",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool",
    TensorProto.STRING: "object",
}
_NAME_TO_ONNX = {v: k for k, v in _ONNX_TO_NAME.items()}


def from_onnx(elem_type: int, where: str = "") -> str:
    """IR dtype name of an ONNX element type; a clear error if unsupported."""
    try:
        return _ONNX_TO_NAME[elem_type]
    except KeyError:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise ShapeError(
            f"{where + ': ' if where else ''}element type {name} is not supported by rammer "
            f"(supported: {', '.join(sorted(_NAME_TO_ONNX))})"
        ) from None


def to_onnx(dtype: str) -> int:
    return _NAME_TO_ONNX[dtype]


def np_dtype(dtype: str) -> np.dtype:
    return np.dtype(object) if dtype == "object" else np.dtype(dtype)
