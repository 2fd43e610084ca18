"""rammer.ir_codec: a graph's arrays keep their shapes through encode / decode, 0-d ones included (a compile
cache entry stores the graph this way: a cached Size's scalar output once came back as a 1-element vector)."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.ir import Graph, TensorInfo
from rammer.ir_codec import decode_graph, encode_graph


@pytest.mark.parametrize("value", [np.array(12, np.int64), np.array(2.5, np.float32), np.zeros((0,), np.float32),
                                   np.arange(6, dtype=np.int32).reshape(2, 3),
                                   np.arange(12, dtype=np.float32).reshape(3, 4).T])
def test_initializers_keep_shape_dtype_and_values(value):
    g = Graph("g", (), (TensorInfo("y", str(value.dtype), tuple(value.shape)),), (), {"y": value}, {}, {"": 19})
    back = decode_graph(*encode_graph(g)).initializers["y"]
    assert back.shape == value.shape and back.dtype == value.dtype
    np.testing.assert_array_equal(back, value)
