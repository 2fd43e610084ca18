"""Branch guards on the GPU backends: an ``If`` whose other branch cannot run, checked after the run.

``IF_TO_SELECT`` (:mod:`rammer.passes.if_select`) inlines the one reachable branch of such an ``If``
and leaves a :data:`~rammer.ops.branch_guard.OP_TYPE` node whose output is the condition.  Here that
node is a one-element copy (Cast's flat copy: the condition's bool as 0.0/1.0 in the arena); the
compiler keeps its output alive to the end of the run, as it keeps the graph outputs
(:func:`program_guards` names them), and both runners (the OpenCL runtime and the CuPy runner) read
it back with the outputs and call :func:`check_guards`, which raises the unreachable branch's error
when the condition selected it.  The outputs of such a run are never returned: they are the inlined
branch's, computed on inputs that asked for the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rammer.errors import OpExecutionError
from rammer.ir import Graph, Node
from rammer.ops.branch_guard import guard_message, is_branch_guard

from .lower_ints import lower_cast

__all__ = ["Guard", "program_guards", "lower_guard", "check_guards"]


@dataclass(frozen=True)
class Guard:
    """One branch guard of a program: the arena tensor holding the condition's copy, the condition's
    name, the value that selects the inlined branch, and the other branch's error."""

    tensor: str
    condition: str
    expected: bool
    message: str


def program_guards(graph: Graph) -> list[Guard]:
    """The branch guards of ``graph`` (after the backend's passes), in graph order."""
    return [Guard(node.outputs[0], node.inputs[0], bool(node.attrs.get("expected")), str(node.attrs.get("message")))
            for node in graph.nodes if is_branch_guard(node.op_type, node.domain)]


def lower_guard(node: Node, graph: Graph, mult: int, lowered: Any, ref: Any) -> Any:
    """The guard's rKernel: its condition (one element, the same dtype in and out) copied to its output."""
    return lower_cast(node, graph, mult, lowered, ref)


def check_guards(guards: list[Guard], values: Mapping[str, np.ndarray]) -> None:
    """Raise the first guard's error whose condition (read back into ``values`` by tensor) selected the
    branch that was not inlined.  The arena holds a bool as 0.0/1.0; anything not 0 is true."""
    for guard in guards:
        value = np.asarray(values[guard.tensor]).reshape(-1)
        taken = bool(value[0] != 0) if value.size else False
        if taken != guard.expected:
            raise OpExecutionError(guard_message(guard.message, guard.condition, taken))
