"""The graph passes of the GPU backends (cuda, rocm, opencl), in order, as a plain list.

``If`` on a run-time condition becomes both branches and a ``Where`` (no host control flow on a
persistent kernel); repeated nodes are computed once; recurrent layers are unrolled into per-step
MatMuls and cells; Instance/GroupNormalization become a LayerNormalization and an affine; long-K
MatMuls with few output tiles are split; elementwise chains are fused into one rKernel each (the core's pass,
:mod:`rammer.passes.fuse_elementwise`, with the GPU's :data:`.fuse.GPU_FUSION`; last, so it sees every
node the earlier passes made).
"""

from __future__ import annotations

from rammer.passes import CSE, IF_TO_SELECT, NORM_AS_LAYERNORM, SPLIT_K, UNROLL_RNN, Pass, fuse_elementwise_pass

from .fuse import GPU_FUSION

#: The core's elementwise fusion with what the GPU's fused rKernel runs.
FUSE_ELEMENTWISE = fuse_elementwise_pass(GPU_FUSION, "elementwise chains as one GPU rKernel each (the core's "
                                                     "fusion and program IR)")

PASSES: list[Pass] = [IF_TO_SELECT, CSE, UNROLL_RNN, NORM_AS_LAYERNORM, SPLIT_K, FUSE_ELEMENTWISE]
