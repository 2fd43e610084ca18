"""Hardware-neutral lowering: from an IR graph to lowered operators over buffers and views.

A backend lowers a graph with these pieces and its own kernels:

- :mod:`.views`: buffers and strided views of them (:class:`Buffer`, :class:`View`);
- :mod:`.aliasing`: ops that only re-index memory (Reshape, Transpose, Slice, ...) as views;
- :mod:`.fusion`: elementwise fusion groups, optionally headed by a GEMM-like op (epilogues);
- :mod:`.batching`: MatMuls that share a constant weight, stacked into one GEMM;
- :mod:`.ewops`, :mod:`.ewprogram`, :mod:`.ew_translate`: the fused elementwise program IR, its
  opcode table and the translation of ONNX elementwise nodes into it (a backend encodes programs
  for its kernels);
- :mod:`.operator`: the lowered operator (nodes covered, buffers read and written, cost, tilings)
  and the classification of nodes by a backend's rules.
"""

from __future__ import annotations
