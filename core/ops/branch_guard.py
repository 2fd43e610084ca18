"""BranchGuard (rammer domain): what is left of an ``If`` whose other branch cannot run.

An exporter often keeps a branch that only other input sizes can take (silero's VAD: the 8 kHz
path of an ``If`` on the sample rate); at the compiled shapes the frontend makes it ``Unreachable``,
whose running is the error.  A backend without host control flow (one static device program)
inlines the reachable branch alone (:mod:`rammer.passes.if_select`), and taking the other branch at
run time must still be that error.  So the pass leaves this node on the condition::

    checked = BranchGuard(cond)      # attrs: expected (1: the then-branch was inlined, 0: the else-branch), message

Its output is a copy of the condition, which a device program computes like any tensor and its
runtime reads back after the run (the GPU backends: ``backends/gpu/guards.py``); the reference
implementation raises the unreachable branch's message at once.  Not an ONNX op: it only exists in
graphs that a backend's pass pipeline produced.
"""

from __future__ import annotations

import numpy as np

from ..errors import OpExecutionError
from .control import RAMMER_DOMAIN
from .registry import OpContext, OutSpec, register_op

__all__ = ["OP_TYPE", "guard_message", "is_branch_guard"]

#: The op's name in :data:`RAMMER_DOMAIN`.
OP_TYPE = "BranchGuard"


def is_branch_guard(op_type: str, domain: str) -> bool:
    """Whether a node of ``op_type`` in ``domain`` is a :data:`OP_TYPE`."""
    return op_type == OP_TYPE and domain == RAMMER_DOMAIN


def guard_message(message: str, cond_name: str, value: object) -> str:
    """The error of a guard whose condition ``cond_name`` held ``value`` (the other branch's)."""
    return f"{message} (the condition '{cond_name}' was {bool(np.asarray(value).reshape(-1)[0])} at run time)"


def _infer(ctx: OpContext) -> list[OutSpec]:
    cond = ctx.input(0)
    if int(np.prod(cond.shape)) != 1:
        raise ctx.fail(f"the condition '{ctx.node.inputs[0]}' has shape {list(cond.shape)}; it must have one element")
    return [(cond.dtype, tuple(cond.shape))]


@register_op(OP_TYPE, infer=_infer, domain=RAMMER_DOMAIN, foldable=False)
def branch_guard(ctx: OpContext, cond: np.ndarray) -> np.ndarray:
    """The condition, unchanged, when it selects the inlined branch; else the other branch's error."""
    value = np.asarray(cond)
    if bool(value.reshape(-1)[0]) != bool(ctx.attr("expected")):
        raise OpExecutionError(guard_message(str(ctx.attr("message")), ctx.node.inputs[0], value))
    return value.copy()
