"""Hardware-neutral graph passes and the runner that applies a backend's pipeline.

* :mod:`.pipeline`: :class:`Pass`, :func:`run_pipeline` (timed, errors name the
  pass, ``Graph.verify()`` after each pass on request);
* :mod:`.decompose`: ConstantOfShape, unread Dropout masks, integer-factor nearest Resize, stride-sized
  ConvTranspose, LRN and reflect Pad as simpler ops (:data:`DECOMPOSE`);
* :mod:`.cse`: common-subexpression elimination (:data:`CSE`);
* :mod:`.relu_concat`: a ``Relu`` read of a ``Concat`` moved onto its parts (:data:`RELU_CONCAT`);
* :mod:`.fold_batchnorm`: an inference ``BatchNormalization`` after a ``Conv`` folded into its weights
  and bias (:data:`FOLD_BATCHNORM`);
* :mod:`.merge_convs`: sibling convs merged into one wider conv and a ``Split``
  (:func:`merge_convs_pass`, with the backend's set of epilogue ops);
* :mod:`.unroll_rnn`: LSTM/GRU/RNN as per-step MatMuls and elementwise cells (:data:`UNROLL_RNN`);
* :mod:`.if_select`: an ``If`` on a run-time condition as both branches and a ``Where`` (:data:`IF_TO_SELECT`),
  for backends without host control flow;
* :mod:`.norm_as_layernorm`: InstanceNormalization and GroupNormalization as a LayerNormalization over
  rows and a per-channel affine (:data:`NORM_AS_LAYERNORM`);
* :mod:`.qdq_as_float`: QuantizeLinear -> DequantizeLinear pairs as exact float elementwise ops
  (:data:`QDQ_AS_FLOAT`);
* :mod:`.qdq_add`: DequantizeLinear(a) + DequantizeLinear(b) [-> Relu] -> QuantizeLinear as one 8-bit
  ``QuantizedAdd`` (:data:`QDQ_ADD`), for backends with its kernel;
* :mod:`.qdq_lookup`: DequantizeLinear -> per-element float ops -> QuantizeLinear as one 256-entry
  ``ByteTable`` (:data:`QDQ_LOOKUP`), for backends with a byte-table kernel;
* :mod:`.qdq_matmul_float`: MatMulInteger -> Cast -> Mul(scale) [-> Add(bias)] as one
  ``MatMulIntegerToFloat`` (:data:`QDQ_MATMUL_FLOAT`), for backends whose int8 GEMM stores floats;
* :mod:`.qdq_to_qlinear`: DequantizeLinear -> Conv / MatMul / Gemm [-> Relu] -> QuantizeLinear as QLinearConv /
  QLinearMatMul (:data:`QDQ_TO_QLINEAR`, :func:`qdq_to_qlinear_pass`);
* :mod:`.fuse_gelu`: the exported exact GELU (Div, Erf, Add, Mul, Mul) as one ``Gelu`` (:data:`FUSE_GELU`);
* :mod:`.fuse_attention`: MatMul(Q, KT) [* scale] [+ bias] -> Softmax -> MatMul(., V) as one
  ``ScaledDotProductAttention`` op (:data:`FUSE_ATTENTION`), for backends with a fused attention kernel;
* :mod:`.split_k`: a MatMul/Gemm with a long K and few output tiles split into partial products and
  a sum (:data:`SPLIT_K`, :func:`make_split_k`);
* :mod:`.fuse_elementwise`: elementwise chains as one ``FusedElementwise`` node each
  (:func:`fuse_elementwise_pass`, with the backend's :class:`ElementwiseFusion`: the opcodes, rank
  and dtypes its fused kernel runs).

A backend declares its pipeline as data, e.g.::

    PIPELINE = (CSE, RELU_CONCAT, merge_convs_pass(EPILOGUE_OPS), CSE.renamed("cse-again"))
"""

from __future__ import annotations

from .cse import CSE, eliminate_common_subexpressions
from .decompose import DECOMPOSE, decompose_model_ops
from .fold_batchnorm import FOLD_BATCHNORM, fold_batchnorm
from .fuse_attention import FUSE_ATTENTION, fuse_attention
from .fuse_elementwise import ElementwiseFusion, fuse_elementwise, fuse_elementwise_pass
from .fuse_gelu import FUSE_GELU, fuse_gelu
from .if_select import IF_TO_SELECT, if_to_select
from .merge_convs import merge_convs_pass, merge_sibling_convs
from .norm_as_layernorm import NORM_AS_LAYERNORM, norm_as_layernorm
from .pipeline import Pass, PassError, PassTiming, PipelineResult, run_pipeline
from .qdq_add import QDQ_ADD, qdq_add
from .qdq_as_float import QDQ_AS_FLOAT, qdq_as_float
from .qdq_lookup import QDQ_LOOKUP, qdq_lookup
from .qdq_matmul_float import QDQ_MATMUL_FLOAT, qdq_matmul_float
from .qdq_to_qlinear import QDQ_TO_QLINEAR, qdq_to_qlinear, qdq_to_qlinear_pass
from .relu_concat import RELU_CONCAT, sink_relu_into_concat
from .split_k import SPLIT_K, make_split_k, split_k
from .unroll_rnn import UNROLL_RNN, unroll_rnn

__all__ = ["CSE", "DECOMPOSE", "decompose_model_ops", "ElementwiseFusion", "fuse_elementwise", "fuse_elementwise_pass", "FOLD_BATCHNORM", "fold_batchnorm", "FUSE_ATTENTION", "fuse_attention", "FUSE_GELU", "fuse_gelu", "IF_TO_SELECT", "if_to_select", "NORM_AS_LAYERNORM", "norm_as_layernorm", "QDQ_ADD", "qdq_add", "QDQ_AS_FLOAT", "qdq_as_float", "QDQ_LOOKUP", "qdq_lookup", "QDQ_MATMUL_FLOAT", "qdq_matmul_float", "QDQ_TO_QLINEAR", "qdq_to_qlinear",
           "qdq_to_qlinear_pass", "RELU_CONCAT", "SPLIT_K", "UNROLL_RNN", "make_split_k", "split_k", "unroll_rnn", "Pass", "PassError", "PassTiming", "PipelineResult", "eliminate_common_subexpressions",
           "merge_convs_pass", "merge_sibling_convs", "run_pipeline", "sink_relu_into_concat"]
