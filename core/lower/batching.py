"""Batching MatMuls that share a constant weight (horizontal fusion).

An unrolled RNN multiplies a new input row by the same weight matrix at
every time step: ``x_t @ W`` for t = 0..99.  Each of those GEMVs reads the
whole of ``W`` (1 MiB in LSTM-TC) for 0.5 MFLOP, so the CPU spends its time
streaming weights from L3.  Where several such MatMuls are independent of
each other (no path between them), they can run as one GEMM over their
stacked rows: ``W`` is read once per chunk and the GEMM runs near peak.

A *chunk* is up to ``max_rows`` consecutive (in graph order) MatMuls with
the same constant right operand and the same left operand shape ``[M, K]``,
none of which depends on another.  The chunk's GEMM waits for all its
inputs, so a chunk of T steps delays the next layer by T steps: the chunk
size trades weight traffic for pipeline depth.
"""

from __future__ import annotations

from rammer.ir import Graph

#: Default limit of stacked rows per batched GEMM.  Measured on the cpu backend, 2 cores (Zen 5), one
#: chunk per layer beat 16-step chunks: LSTM-TC 12.9 -> 10.1 ms, DeepSpeech2 19.7 ->
#: 17.9 ms, Seq2Seq 4.1 -> 3.5 ms.  The longer pipeline delay between layers costs
#: nothing while there are other layers' steps to overlap, and the weight is read
#: once per layer instead of once per 16 steps.
DEFAULT_BATCH_ROWS = 128


def find_chunks(graph: Graph, anc: list[int], max_rows: int,
                dtypes: frozenset[str] = frozenset({"float32"})) -> list[list[int]]:
    """Chunks (lists of node indices, in order) of at least two batchable MatMuls.

    ``anc`` is :func:`rammer.lower.fusion.ancestors` of ``graph``; ``dtypes`` are the operand
    dtypes the backend's GEMM batches.
    """
    if max_rows < 2:
        return []
    by_key: dict[tuple, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            continue
        a, b = node.inputs[0], node.inputs[1]
        if b not in graph.initializers:
            continue
        ai, bi = graph.value_info[a], graph.value_info[b]
        if len(ai.shape) != 2 or len(bi.shape) != 2 or ai.dtype not in dtypes or bi.dtype != ai.dtype:
            continue
        by_key.setdefault((b, ai.shape), []).append(i)
    chunks: list[list[int]] = []
    for members in by_key.values():
        rows_per = max(1, graph.value_info[graph.nodes[members[0]].inputs[0]].shape[0])
        limit = max(2, max_rows // rows_per)
        current: list[int] = []
        mask = 0
        for i in members:
            if current and (anc[i] & mask or len(current) >= limit):
                if len(current) > 1:
                    chunks.append(current)
                current, mask = [], 0
            current.append(i)
            mask |= 1 << i
        if len(current) > 1:
            chunks.append(current)
    return chunks
