"""The GPU backends' fused elementwise nodes: what the core's pass fuses for them
(:data:`GPU_FUSION`, given to :func:`rammer.passes.fuse_elementwise.fuse_elementwise_pass` in
:mod:`.pipeline`) and the rKernel a fused node runs (:func:`lower_fused`, the kernel of
:mod:`.kernels_ew`).

The GPU arena holds floats: bools as 0.0/1.0 (exactly what the comparisons and logic opcodes compute
and what they read as false/true, ``!= 0``), and integer programs (int64/int32 arithmetic on position
ids, masks...) run in 64-bit integer registers over the exact float32 values the arena holds
(:mod:`.lower_ints`).  The ops with a GPU kernel of their own are left unfused when alone.
"""

from __future__ import annotations

import math
from typing import Any

from rammer.ir import Graph, Node
from rammer.lower.views import dense_strides
from rammer.passes.fuse_elementwise import FUSED_OP, ElementwiseFusion, FusedProgram, fuse_elementwise

from . import kernels_ew as kew
from .kernels_model import MAX_RANK

__all__ = ["FUSED_OP", "FUSED_DOMAIN", "FUSIBLE_OPS", "GPU_FUSION", "FusedProgram", "gpu_fuse_elementwise",
           "lower_fused"]

FUSED_DOMAIN = "rammer.gpu"
#: Elementwise ops with a GPU kernel of their own: alone, they are left unfused.
NATIVE = frozenset({"Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Sqrt", "Log", "Add", "Sub", "Mul", "Div"})
_THREADS = 256
#: ONNX ops the pass can run (alone or in a chain) on float32 tensors: those whose translation
#: uses only opcodes with a GPU expression.
FUSIBLE_OPS = frozenset({
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Floor", "Ceil", "Erf",
    "Softplus", "Softsign", "Sign", "HardSwish", "LeakyRelu", "Elu", "HardSigmoid", "ThresholdedRelu", "Gelu",
    "Clip", "Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "And", "Or", "Xor", "Max", "Min", "Sum", "Mean", "Not", "IsNaN", "IsInf", "Where",
    "BatchNormalization"})

#: What the fused GPU rKernel runs: the opcodes with a float or integer GPU expression, up to
#: ``MAX_RANK`` dimensions, over the float arena (bools as 0/1, int32/int64 as exact float32 values).
GPU_FUSION = ElementwiseFusion(domain=FUSED_DOMAIN, opcodes=frozenset(kew.OPCODES) | frozenset(kew.INT_OPCODES),
                               max_rank=MAX_RANK, native=NATIVE, float_dtypes=("float32", "bool"),
                               int_dtypes=("int32", "int64"))


def gpu_fuse_elementwise(graph: Graph) -> Graph:
    """``graph`` with its GPU-runnable elementwise chains fused (the same object when none is)."""
    return fuse_elementwise(graph, GPU_FUSION)


#: The fused rKernels made lately, by everything they are made from (bounded): an unrolled RNN has
#: thousands of fused nodes running a few distinct programs, each lowered at every tiling, and
#: making the kernel's IR cost a third of a full-size RNN's lowering.
_KERNELS: dict[tuple, Any] = {}
_KERNELS_KEPT = 4096


def _fused_kernel(name: str, n_in: int, n_out: int, instrs: tuple, outputs: tuple, in_types: tuple) -> Any:
    key = (name, n_in, n_out, instrs, outputs, in_types)
    kernel = _KERNELS.get(key)
    if kernel is None:
        if len(_KERNELS) >= _KERNELS_KEPT:
            _KERNELS.clear()
        kernel = _KERNELS[key] = kew.fused_kernel(name, n_in, n_out, instrs, outputs, _THREADS, in_types)
    return kernel


def lower_fused(node: Node, graph: Graph, mult: int, lowered: Any, ref: Any) -> Any:
    """The fused chain's rKernel: chunks of ``256 * mult`` elements per rTask."""
    prog: FusedProgram = node.attrs["program"]
    shape = prog.shape
    rank = len(shape)
    dims = [1] * (MAX_RANK - rank) + list(shape)
    strides: list[int] = []
    for k, name in enumerate(node.inputs):
        in_shape = tuple(graph.value_info[name].shape)
        pad = rank - len(in_shape)
        full = (1,) * pad + in_shape
        own = (0,) * pad + dense_strides(in_shape)
        s = [0 if d_in == 1 else st for d_in, st in zip(full, own)]
        strides += [0] * (MAX_RANK - rank) + s
    total = int(math.prod(shape))
    chunk = _THREADS * mult
    args = (*(ref("in", k) for k in range(len(node.inputs))), *(ref("out", j) for j in range(len(node.outputs))),
            total, chunk, *dims[1:], *strides)
    kernel = _fused_kernel(f"ew_{prog.key}", prog.n_in, len(prog.outputs), tuple(prog.instrs), tuple(prog.outputs),
                           tuple(prog.in_types))
    calls = tuple((r, args) for r in range(max(1, math.ceil(total / chunk))))
    n_io = prog.n_in + len(prog.outputs)
    return lowered(kernel, calls, float(chunk * max(len(prog.instrs), 1)), 4.0 * chunk * n_io)
