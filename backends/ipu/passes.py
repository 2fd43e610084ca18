"""The graph rewrites the ipu backend runs before scheduling.

* :data:`rammer.passes.DECOMPOSE` (core): nearest ``Resize`` with integer factors becomes a
  broadcast view (Reshape -> Expand -> Reshape), a ``ConvTranspose`` whose kernel equals its
  stride a 1x1 Conv and a depth-to-space view, and the rest of that pass's forms.  Those ops have
  no tiled rKernel: their one whole-tensor rTask did not fit a tile (unet-seg-b8's
  ConvTranspose, the torch YOLO export's Resize were refused with ``no rKernel can run it``).
* :data:`UNROLL_LARGE_RNN`: LSTM/GRU/RNN nodes unrolled into per-step MatMuls and elementwise
  cells (core :func:`rammer.passes.unroll_rnn.unroll_rnn`) when one of them moves more bytes
  than the smallest ipu preset's tile holds; such a node's one whole-op rTask cannot be placed
  (the torch CRNN's LSTM).  Smaller recurrent nodes stay one rTask each, fewer supersteps.
"""

from __future__ import annotations

import math

from rammer.ir import Graph
from rammer.passes import DECOMPOSE, Pass
from rammer.passes.unroll_rnn import unroll_rnn
from rammer.vdevice import PRESETS

RNN_OPS = frozenset({"LSTM", "GRU", "RNN"})

#: The SRAM of a tile of the smallest ipu preset (the graph is prepared before the vDevice is known).
SMALLEST_TILE_BYTES = min(int(p["veu"]["local_mem_bytes"]) for p in PRESETS.values() if p.get("kind") == "ipu")


def _node_bytes(graph: Graph, names) -> int:
    total = 0
    for name in names:
        info = graph.value_info.get(name) if name else None
        if info is not None and info.shape is not None:
            total += math.prod(info.shape) * (info.np_dtype.itemsize if info.dtype != "bool" else 1)
    return total


def unroll_large_rnns(graph: Graph, tile_bytes: int = SMALLEST_TILE_BYTES) -> Graph:
    """``graph`` with its recurrent nodes unrolled when one of them reads and writes more than
    ``tile_bytes`` (the same object otherwise)."""
    large = [n for n in graph.nodes if n.op_type in RNN_OPS and not n.domain
             and _node_bytes(graph, [*n.inputs, *n.outputs]) > tile_bytes]
    return unroll_rnn(graph) if large else graph


UNROLL_LARGE_RNN = Pass("unroll-large-rnn", unroll_large_rnns,
                        "LSTM/GRU/RNN unrolled into MatMuls and cells when one of them is larger than a tile")

#: The ipu backend's graph passes, in order.
IPU_PASSES: tuple[Pass, ...] = (DECOMPOSE, UNROLL_LARGE_RNN)
