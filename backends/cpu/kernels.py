"""The CPU rKernels, by name, as the code generator and the report see them.

Every kernel has the signature ``k(F, B, I, J, X, R, p, sbase)``: the arena
viewed as float32 / uint8 (bool) / int64 / int32, the side tables ``X``
(int64) and ``R`` (float32), the task row's parameters ``p`` and the float
offset of the vEU's scratch space.  Kernels listed in :data:`MAY_FAIL`
return a status (non-zero: the runtime reports an error, e.g. a Gather
index out of range).
"""

from __future__ import annotations

from types import ModuleType

from . import (
    kernels_attention,
    kernels_conv,
    kernels_data,
    kernels_ew,
    kernels_gemm,
    kernels_index,
    kernels_nn,
    kernels_qdw,
    kernels_quant,
    kernels_rnn,
    kernels_tree,
    kernels_window,
)

#: kernel name -> module defining it.
KERNELS: dict[str, ModuleType] = {
    "k_ew": kernels_ew,
    "k_gemm": kernels_gemm,
    "k_gemm_lda": kernels_gemm,
    "k_copy": kernels_data,
    "k_copy_many": kernels_data,
    "k_pad": kernels_data,
    "k_gather": kernels_data,
    "k_resize": kernels_data,
    "k_convp": kernels_conv,
    "k_dwconv": kernels_window,
    "k_pool": kernels_window,
    "k_reduce": kernels_nn,
    "k_softmax": kernels_nn,
    "k_layernorm": kernels_nn,
    "k_cumsum": kernels_index,
    "k_gather_elements": kernels_index,
    "k_argreduce": kernels_index,
    "k_quantize": kernels_quant,
    "k_dequantize": kernels_quant,
    "k_dynquant": kernels_quant,
    "k_byte_table": kernels_quant,
    "k_qadd": kernels_quant,
    "k_matmul_int": kernels_quant,
    "k_qlinearconv": kernels_quant,
    "k_qlinear_matmul": kernels_quant,
    "k_tree": kernels_tree,
    "k_gemm_int8": kernels_quant,
    "k_qconv_int8": kernels_quant,
    "k_qdwconv": kernels_qdw,
    "k_attention": kernels_attention,
    "k_rnn": kernels_rnn,
}

MAY_FAIL = frozenset({"k_gather", "k_gather_elements"})

#: Host-side checks of the kernels in MAY_FAIL, run after a failed launch on the failing row:
#: ``check(arena, X, row params)`` -> (flat position in the indices, the bad index, the bound)
#: or None.  They read the indices where the kernel read them, so the message is exact.
FAULT_CHECKS = {"k_gather": kernels_data.gather_fault, "k_gather_elements": kernels_index.gather_elements_fault}

#: What each kernel does, for ``rammer compile --report``.
DESCRIPTIONS = {
    "k_ew": "fused elementwise program (register blocks of 256)",
    "k_gemm": "GEMM tile (OpenBLAS sgemm or vectorized loops) + fused epilogue",
    "k_gemm_lda": "GEMM tile on a compile-time-packed narrow weight, A's rows read in place + fused epilogue",
    "k_copy": "strided copy (views made dense, Concat)",
    "k_copy_many": "several strided copies in one rTask (RNN outputs)",
    "k_pad": "constant padding",
    "k_gather": "Gather rows by run-time indices",
    "k_resize": "separable Resize (linear, cubic) of planes by compile-time tap tables",
    "k_convp": "implicit-GEMM convolution tile: input gathered into packed panels, weights packed at compile time",
    "k_dwconv": "direct depthwise convolution + fused epilogue",
    "k_pool": "max/average pooling planes",
    "k_reduce": "reductions over adjacent axes",
    "k_softmax": "softmax / log-softmax lines",
    "k_layernorm": "layer normalization rows",
    "k_tree": "tree-ensemble walk: row blocks through a block of trees, leaf weights aggregated",
    "k_cumsum": "cumulative sum lines (CumSum: exclusive, reverse)",
    "k_gather_elements": "GatherElements by run-time indices",
    "k_argreduce": "ArgMax / ArgMin lines (first or last extremum; NaN wins)",
    "k_quantize": "QuantizeLinear to 8 bits (per tensor / per axis)",
    "k_dequantize": "DequantizeLinear of 8-bit / int32 values (per tensor / per axis)",
    "k_byte_table": "ByteTable: each byte looked up in a 256-entry table (a DequantizeLinear -> per-element ops"
                    " -> QuantizeLinear chain)",
    "k_qadd": "QuantizedAdd: two 8-bit tensors dequantized, added [Relu], requantized, in float32 as the"
              " DequantizeLinear -> Add -> QuantizeLinear chain it replaces",
    "k_dynquant": "DynamicQuantizeLinear: the tensor's range, then uint8 quantization",
    "k_matmul_int": "MatMulInteger rows, int32 accumulation",
    "k_qlinearconv": "QLinearConv planes: int32 accumulation, float32 requantization",
    "k_qlinear_matmul": "QLinearMatMul rows: int32 accumulation, float32 requantization",
    "k_gemm_int8": "8-bit GEMM tiles against a weight packed at compile time (VNNI where the CPU has it)"
                   " + zero-point corrections + int32 store or requantization",
    "k_qconv_int8": "QLinearConv (not depthwise) as 8-bit GEMM tiles: pixel windows gathered, weights packed"
                    " at compile time (VNNI where the CPU has it), requantized",
    "k_qdwconv": "depthwise QLinearConv: planes widened to float32, the float window sweep (exact sums),"
                 " requantized",
    "k_rnn": "the recurrence of an LSTM/GRU/RNN layer: every step of one direction for a block of batch rows"
             " (recurrent GEMM, cell, outputs)",
    "k_attention": "fused attention (Q K^T, bias, softmax, @ V) per query-row block, scores in scratch",
}

def kernels_fingerprint() -> str:
    """Hash of the kernel sources (see :mod:`._numba_cache`)."""
    from ._numba_cache import fingerprint

    return fingerprint()
