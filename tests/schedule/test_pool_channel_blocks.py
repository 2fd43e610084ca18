"""Pooling rTasks of fewer than 8 channels (core/kernels_dense.py ``PoolFamily``) where no block of 8
or more fits a vEU: a global pool over a large plane on an IPU tile (real:ocr-det-640's
GlobalAveragePool over 96 x 160 x 160: 800 KiB in 8 channels, against a GC200's 624 KiB tile), and
nowhere else (a vDevice where a block of 8 fits keeps its candidates)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rammer.ir import Graph, Node, TensorInfo
from rammer.kernels_dense import PoolFamily
from rammer.vdevice import get_preset

#: (op, input shape, attributes, output shape): one channel's window fits a 624 KiB tile, 8 do not.
TOO_WIDE_FOR_8 = [
    ("GlobalAveragePool", (1, 96, 160, 160), {}, (1, 96, 1, 1)),  # real:ocr-det-640's
    ("GlobalMaxPool", (1, 12, 128, 256), {}, (1, 12, 1, 1)),
    ("GlobalAveragePool", (1, 7, 160, 160), {}, (1, 7, 1, 1)),  # 7 channels: the whole tensor is 700 KiB
    ("GlobalAveragePool", (1, 5, 300, 300), {}, (1, 5, 1, 1)),  # one plane 352 KiB: 2 do not fit
    ("GlobalLpPool", (1, 8, 16, 80, 80), {"p": 2}, (1, 8, 1, 1, 1)),  # 3-D
    ("MaxPool", (1, 16, 64, 8192), {"kernel_shape": [3, 3]}, (1, 16, 62, 8190)),  # 3 rows of 8192 x 8
]


def _pool(op: str, x_shape, attrs, y_shape) -> Graph:
    vi = {"x": TensorInfo("x", "float32", tuple(x_shape)), "y": TensorInfo("y", "float32", tuple(y_shape))}
    g = Graph("pool", (vi["x"],), (vi["y"],), (Node(op, ("x",), ("y",), "pool", "", attrs),), {}, vi, {"": 17})
    g.verify()
    return g


def _box_bytes(box) -> int:
    return 4 * math.prod(hi - lo for lo, hi in box)


@pytest.mark.parametrize("op,x_shape,attrs,y_shape", TOO_WIDE_FOR_8, ids=[f"{c[0]}-{'x'.join(map(str, c[1][1:]))}"
                                                                           for c in TOO_WIDE_FOR_8])
def test_a_pool_whose_smallest_block_overflows_a_tile_gets_blocks_of_fewer_channels(op, x_shape, attrs, y_shape):
    graph = _pool(op, x_shape, attrs, y_shape)
    ipu = get_preset("gc200")
    kernels = PoolFamily().candidates(graph.nodes[0], graph, ipu)
    channels = x_shape[1]
    assert kernels, "no pooling candidate fits a tile"  # before: none (blocks of min(C, 8) channels only)
    assert all(k.resources.fits(ipu.veu) for k in kernels)
    assert {k.params["channels"] for k in kernels} <= {1, 2, 4} and max(k.params["channels"] for k in kernels) \
        < min(channels, 8)
    for k in kernels:
        cb = k.params["channels"]
        assert k.num_rtasks * cb >= channels
        covered = np.zeros(y_shape, dtype=np.int8)
        for i in range(k.num_rtasks):  # each rTask reads its channel block's windows and writes them once
            access = k.accesses(i)
            (_, read), ((_, wrote),) = access.reads[0], access.writes
            assert read[1] == wrote[1] and wrote[1][1] - wrote[1][0] <= cb
            assert _box_bytes(read) + _box_bytes(wrote) <= ipu.veu.local_mem_bytes
            covered[tuple(slice(lo, hi) for lo, hi in wrote)] += 1
        assert (covered == 1).all()
    # Where a block of 8 channels fits (a cpu's or a GPU's vEU, or a small pool on a tile), nothing changes.
    for vd in (get_preset("cpu"), get_preset("v100")):
        assert min(k.params["channels"] for k in PoolFamily().candidates(graph.nodes[0], graph, vd)) >= min(channels, 8)


def test_a_pool_that_fits_keeps_its_blocks_of_eight_channels_or_more_on_a_tile():
    graph = _pool("GlobalAveragePool", (1, 64, 56, 56), {}, (1, 64, 1, 1))
    kernels = PoolFamily().candidates(graph.nodes[0], graph, get_preset("gc200"))
    assert kernels and min(k.params["channels"] for k in kernels) >= 8
