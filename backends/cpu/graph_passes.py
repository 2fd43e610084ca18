"""The CPU backend's graph pass pipeline, as data (the passes live in :mod:`rammer.passes`).

Each pass returns the same graph object when it has nothing to do and keeps
the IR's invariants (``Graph.verify``, checked after every pass in the
tests).  The program and its executable both see the rewritten graph (host
steps name its nodes by index); every pass is deterministic, so a cached
program matches it too.
"""

from __future__ import annotations

from rammer.ir import Graph
from rammer.lower.ew_translate import EW_OPS
from rammer.passes import (
    CSE,
    DECOMPOSE,
    FOLD_BATCHNORM,
    FUSE_ATTENTION,
    FUSE_GELU,
    NORM_AS_LAYERNORM,
    QDQ_ADD,
    QDQ_AS_FLOAT,
    QDQ_LOOKUP,
    QDQ_MATMUL_FLOAT,
    RELU_CONCAT,
    Pass,
    PipelineResult,
    merge_convs_pass,
    qdq_to_qlinear_pass,
    run_pipeline,
)

from .window_shapes import SHAPES as DIRECT_SHAPES

#: The depthwise windows (kernel, stride) that k_qdwconv runs: the float direct sweeps' (kernels_window.direct_fits).
QDWCONV_WINDOWS = frozenset((k, stride) for stride, k in DIRECT_SHAPES)

#: Readers a conv applies in its own kernel or epilogue when they are its only reader:
#: sibling convs with such a reader are not merged (a Split in between would stop the fusion).
EPILOGUE_OPS = EW_OPS | {"BatchNormalization"}

#: In order.  CSE runs again last: a ReLU moved onto a concatenated part often
#: repeats one that a branch already applies to that part.
PIPELINE: tuple[Pass, ...] = (
    DECOMPOSE,  # first: Caffe2 exports' weights become initializers here
    FOLD_BATCHNORM,
    NORM_AS_LAYERNORM,  # InstanceNormalization / GroupNormalization: the layernorm kernel and an affine
    FUSE_GELU,  # the exported exact GELU (Div, Erf, Add, Mul, Mul) as one Gelu: one pass in a GEMM's store
    # DQ -> Conv / MatMul -> Q as QLinearConv / QLinearMatMul (the 8-bit kernels), before the float rewrite of
    # the pairs that remain; 2-D convs only (k_qconv_int8), and of the depthwise ones those whose windows
    # k_qdwconv sweeps (the int32 plane kernel, which runs the others, took 1.7-2x the float depthwise conv)
    qdq_to_qlinear_pass(conv_ranks=(2,), depthwise=QDWCONV_WINDOWS),
    QDQ_LOOKUP,  # DQ -> Clip / Relu / Sigmoid... -> Q as one byte table (k_byte_table), before QDQ_AS_FLOAT
    QDQ_ADD,  # DQ(a) + DQ(b) [-> Relu] -> Q (residual adds) as one QuantizedAdd on bytes (k_qadd)
    QDQ_MATMUL_FLOAT,  # MatMulInteger -> Cast -> Mul -> Add as one op: k_gemm_int8 dequantizes in its store
    QDQ_AS_FLOAT,  # QDQ pairs as exact float ops, fused into the epilogue of the conv / GEMM before them
    CSE,
    RELU_CONCAT,
    merge_convs_pass(EPILOGUE_OPS),
    CSE.renamed("cse-again"),
    FUSE_ATTENTION,  # last: Q K^T -> softmax -> @ V as one op for the fused kernel (k_attention)
)


def run(graph: Graph, verify: bool = False) -> PipelineResult:
    """:data:`PIPELINE` over ``graph``, with each pass's time."""
    return run_pipeline(graph, PIPELINE, verify)


def prepare(graph: Graph, verify: bool = False) -> Graph:
    """``graph`` after every pass of :data:`PIPELINE` (verified after each when ``verify``)."""
    return run(graph, verify).graph
