"""What a failed launch says: the node, op, index and bound behind a kernel's error.

A kernel that finds bad data at run time (a Gather index out of range) returns a
non-zero status; the driver then leaves the task row it was running in the
vEU's counter line (``driver.FAILED_ROW``) and stops.  Nothing is recorded while
rows succeed.  After the launch, :func:`describe_failure` maps each failing row
to its op through the program's ``trace_map`` (kept in the program's report, so
a cached program carries it) and runs the kernel's host-side check
(``kernels.FAULT_CHECKS``) on the indices where the kernel read them, for the
exact index and bound; the message is the one the reference backend gives
(:func:`rammer.ops.indexing.index_out_of_range`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rammer.ops.indexing import index_out_of_range

from .driver import FAILED_ROW, KERNEL_FAILED, STRIDE
from .kernels import FAULT_CHECKS


def failed_rows(status: np.ndarray, counters: np.ndarray) -> list[int]:
    """The task rows whose kernels reported an error in the last launch, in row order."""
    rows = []
    for v in range(status.shape[0]):
        if int(status[v]) == KERNEL_FAILED:
            row = int(counters[v * STRIDE + FAILED_ROW]) - 1
            if row >= 0:
                rows.append(row)
    return sorted(rows)


def describe_failure(program: Any, arena: np.ndarray, rows: Sequence[int]) -> tuple[str, bool] | None:
    """One line for the first failing op (in the program's op order) among ``rows``, and whether
    its host-side check found the bad index (else the line names only the op); None without rows."""
    tmap = program.report.get("trace_map") or {}
    row_op: list[int] = tmap.get("row_op") or []
    ops: list[dict] = tmap.get("ops") or []
    found: list[tuple[float, tuple[str, bool]]] = []
    for row in rows:
        op_index = row_op[row] if 0 <= row < len(row_op) else -1
        op = ops[op_index] if 0 <= op_index < len(ops) else {}
        kernel = program.kernel_names[int(program.T[row, 0])]
        found.append((op_index if op_index >= 0 else math.inf, _describe_row(program, arena, row, kernel, op)))
    if not found:
        return None
    return min(found, key=lambda f: f[0])[1]


def _describe_row(program: Any, arena: np.ndarray, row: int, kernel: str, op: dict) -> tuple[str, bool]:
    nodes = op.get("nodes") or []
    node = nodes[0] if nodes else str(op.get("name", "?"))
    op_type = str(op.get("op_type") or op.get("family") or kernel)
    check = FAULT_CHECKS.get(kernel)
    fault = check(arena, program.X, program.T[row, 2:]) if check is not None else None
    if fault is None:
        return (f"{op_type} node '{node}': its kernel {kernel} reported an error at run time (task row {row}) "
                f"that its host-side check could not locate"), False
    position, value, bound = fault
    inputs = op.get("inputs") or []
    shapes = op.get("input_shapes") or []
    tensor = inputs[1] if len(inputs) > 1 else "?"
    shape = shapes[1] if len(shapes) > 1 else None
    at = np.unravel_index(position, shape) if shape and math.prod(shape) > position else (position,)
    return index_out_of_range(node, op_type, value, bound, tensor, at), True
