"""The reference names node, op, index, bound, indices tensor and position of an out-of-range
index, for every indexing op (issue 38, point 6)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rammer.errors import FeedError, IndexRangeError, OpExecutionError
from rammer.ir import Node, TensorInfo, dtype_name
from rammer.ops.registry import OpContext, lookup


def compute(op_type: str, *inputs: np.ndarray, **attrs: object) -> None:
    names = ["data", "idx", "upd"][:len(inputs)]
    node = Node(op_type, names, ["out"], name="lookup", attrs=attrs)
    infos = [TensorInfo(n, dtype_name(x.dtype), x.shape) for n, x in zip(names, inputs)]
    lookup(op_type).compute(OpContext(node, 17, infos, list(inputs)), *inputs)


def message(op_type: str, index: int, bound: int, at: list[int]) -> str:
    return re.escape(f"{op_type} node 'lookup' (op {op_type}): index {index} out of range [-{bound}, {bound}) "
                     f"in input 'idx' at {at}; ")


DATA = np.arange(12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize("op_type, indices, attrs, expected", [
    ("Gather", np.array([[0, 2], [-4, 1]], np.int64), {}, ("Gather", -4, 3, [1, 0])),
    ("Gather", np.array([1, 4], np.int32), {"axis": 1}, ("Gather", 4, 4, [1])),
    ("GatherElements", np.array([[0, 1, 2, 5]], np.int64), {"axis": 1}, ("GatherElements", 5, 4, [0, 3])),
    ("GatherND", np.array([[0, 1], [3, 0]], np.int64), {}, ("GatherND", 3, 3, [1, 0])),
    ("GatherND", np.array([[0, 1], [2, -5]], np.int64), {}, ("GatherND", -5, 4, [1, 1])),
])
def test_gathers(op_type, indices, attrs, expected):
    with pytest.raises(IndexRangeError, match=message(*expected)) as info:
        compute(op_type, DATA, indices, **attrs)
    assert isinstance(info.value, OpExecutionError) and isinstance(info.value, FeedError)


def test_scatters():
    with pytest.raises(IndexRangeError, match=message("ScatterND", 3, 3, [1, 0])):
        compute("ScatterND", DATA, np.array([[0], [3]], np.int64), np.ones((2, 4), np.float32))
    with pytest.raises(IndexRangeError, match=message("ScatterElements", 4, 4, [0, 1])):
        compute("ScatterElements", DATA, np.array([[0, 4]], np.int64), np.ones((1, 2), np.float32), axis=1)
