"""Gather from a table too tall for one tile: the table split along its rows (the gathered axis).

The ``gather.split_table`` rKernel (:mod:`rammer.backends.ipu.rkernels`) cuts a lookup along the
table's *width*: its narrowest rTask reads one column over every row.  When that column alone is
larger than a tile can hold beside its other data (a float32 vocabulary of more than about 40,000
rows on a GC200: 156 KiB per column), no cut along the width places it: the tile running the
rTask receives most of the column from the tiles that own it (``IpuPlacementError ... 'table
(received)' 864.0 KiB`` for 300,000 rows).  Poplar's ``multiSlice`` then splits the rows too.

The rewrite here does the same with ordinary ops.  The table ``T`` (a constant) becomes ``p``
row pieces ``T_k = T[r_k : r_k + R_k]``, each a new constant with one zero row appended (index
``R_k``).  With ``i = Mod(indices, V)`` (negative indices count from the end, as in ONNX):

    piece = Div(i, R)          row = Mod(i, R)
    idx_k = Where(Equal(piece, k), row, R_k)                           (the zero row elsewhere)
    part_k = Gather(T_k, idx_k)                                        (split_table's kernel)
    Y = part_0 + part_1 + ... + part_{p-1}                             (an Add tree)

Each gathered row comes from exactly one piece, the others add zeros, so ``Y`` equals the
lookup exactly.  Each piece's lookup is a split-table Gather whose columns fit a tile, and its
rTasks run on the tiles owning their blocks; the index arithmetic and the partial outputs are the
size of the output (a sequence of embeddings), not of the table.
"""

from __future__ import annotations

import math

import numpy as np

from rammer.ir import Graph, Node, TensorInfo
from rammer.passes.names import fresh_name
from rammer.passes.rewrite import splice

from .rkernels import split_axis


def column_bytes(shape: tuple[int, ...], axis: int, itemsize: int) -> int:
    """Bytes of the smallest block that ``gather.split_table`` reads: every row along ``axis`` of
    one index along the cut axis (the whole table when there is no axis to cut)."""
    cut = split_axis(shape, axis)
    return math.prod(shape) // (shape[cut] if cut is not None else 1) * itemsize


#: A split table's pieces have columns of at most ``limit / PIECE_FRACTION`` bytes.  The scheduler
#: starts an op's first rTasks on its predecessor's vEU (no barrier there) until their summed
#: durations pass a barrier: a lookup's rTasks are short, so one tile may run several column
#: blocks of a piece (up to 5 seen on a GC200), and receives those its constant share left elsewhere.
PIECE_FRACTION = 4


def row_pieces(shape: tuple[int, ...], axis: int, itemsize: int, limit: int) -> int:
    """How many row pieces the table needs (1: none): tables whose column is larger than ``limit``
    bytes are cut into pieces whose columns hold at most ``limit / PIECE_FRACTION`` bytes."""
    column = column_bytes(shape, axis, itemsize)
    if column <= limit:
        return 1
    return max(1, min(shape[axis], math.ceil(column * PIECE_FRACTION / limit)))


def split_tall_gathers(graph: Graph, limit: int) -> Graph:
    """``graph`` with each Gather from a constant table whose column is larger than ``limit`` bytes
    split along the table's rows (the same object when there is none)."""
    if any(n.subgraphs() for n in graph.nodes):
        return graph
    taken = set(graph.value_info) | set(graph.initializers) | {t.name for t in graph.inputs}
    node_names = {n.name for n in graph.nodes}
    inits = dict(graph.initializers)
    value_info = dict(graph.value_info)
    at: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if node.domain or node.op_type != "Gather" or len(node.inputs) != 2 or not node.outputs[0]:
            continue
        table_name, idx_name, y = node.inputs[0], node.inputs[1], node.outputs[0]
        if table_name not in graph.initializers or idx_name not in graph.value_info or y not in graph.value_info:
            continue
        table = np.asarray(graph.initializers[table_name])
        idx_info = graph.value_info[idx_name]
        if table.ndim == 0 or table.dtype.kind not in "fiu" or idx_info.dtype not in ("int64", "int32"):
            continue
        axis = int(node.attrs.get("axis", 0)) % table.ndim
        p = row_pieces(table.shape, axis, table.dtype.itemsize, limit)
        if p < 2:
            continue
        new, y_parts = _split(node, table, axis, p, idx_info, graph.value_info[y], taken, node_names, inits,
                              value_info)
        at[id(node)] = new
    if not at:
        return graph
    return splice(graph, at, inits, value_info)  # a table now only read through its pieces is dropped


def _split(node: Node, table: np.ndarray, axis: int, p: int, idx_info: TensorInfo, y_info: TensorInfo,
           taken: set[str], node_names: set[str], inits: dict, value_info: dict) -> tuple[list[Node], list[str]]:
    """The nodes replacing one Gather (see the module's docstring) and its partial outputs."""
    table_name, idx_name, y = node.inputs[0], node.inputs[1], node.outputs[0]
    base = node.name or y
    vocab = table.shape[axis]
    rows = math.ceil(vocab / p)
    p = math.ceil(vocab / rows)  # (no empty last piece)
    idt = np.dtype(idx_info.dtype)
    new: list[Node] = []

    def const(stem: str, value) -> str:
        name = fresh_name(f"{base}_{stem}", taken)
        inits[name] = np.asarray(value, dtype=idt)
        value_info[name] = TensorInfo(name, idx_info.dtype, ())
        return name

    def op(op_type: str, inputs: tuple[str, ...], stem: str, dtype: str, shape: tuple[int, ...]) -> str:
        out = fresh_name(f"{base}_{stem}", taken)
        value_info[out] = TensorInfo(out, dtype, shape)
        new.append(Node(op_type, inputs, (out,), name=fresh_name(f"{base}_{stem}", node_names)))
        return out

    shape = idx_info.shape
    parts = []
    for k in range(p):
        lo, hi = k * rows, min(vocab, (k + 1) * rows)
        # Each piece computes its own indices from the Gather's: pieces that shared one index
        # computation would all start on that computation's tile (the scheduler's earliest start),
        # and that tile would then run a column block of every piece (a whole column in all).
        normal = op("Mod", (idx_name, const("vocab", vocab)), f"row_index{k}", idx_info.dtype, shape)
        per_piece = const("rows", rows)
        piece = op("Div", (normal, per_piece), f"piece{k}", idx_info.dtype, shape)
        row = op("Mod", (normal, per_piece), f"row_in_piece{k}", idx_info.dtype, shape)
        block = np.take(table, np.arange(lo, hi), axis=axis)
        zero_shape = list(block.shape)
        zero_shape[axis] = 1
        piece_table = fresh_name(f"{table_name}_rows{k}", taken)
        inits[piece_table] = np.ascontiguousarray(np.concatenate([block, np.zeros(zero_shape, table.dtype)], axis))
        value_info[piece_table] = TensorInfo(piece_table, y_info.dtype, inits[piece_table].shape)
        mine = op("Equal", (piece, const(f"piece{k}", k)), f"in_piece{k}", "bool", shape)
        idx_k = op("Where", (mine, row, const(f"zero_row{k}", hi - lo)), f"index{k}", idx_info.dtype, shape)
        out = fresh_name(f"{y}_rows{k}", taken)
        value_info[out] = TensorInfo(out, y_info.dtype, y_info.shape)
        new.append(Node("Gather", (piece_table, idx_k), (out,), name=fresh_name(f"{base}_rows{k}", node_names),
                        attrs=dict(node.attrs)))
        parts.append(out)
    sums = list(parts)
    while len(sums) > 1:  # a balanced Add tree; the last Add writes Y
        nxt = []
        for j in range(0, len(sums) - 1, 2):
            out = y if len(sums) == 2 else fresh_name(f"{y}_rowsum", taken)
            if out != y:
                value_info[out] = TensorInfo(out, y_info.dtype, y_info.shape)
            new.append(Node("Add", (sums[j], sums[j + 1]), (out,), name=fresh_name(f"{base}_rowsum", node_names)))
            nxt.append(out)
        if len(sums) % 2:
            nxt.append(sums[-1])
        sums = nxt
    return new, parts
