"""Quantized models, made the way onnxruntime users make them, from float exports of this corpus:

* ``bert-int8-dynamic``: ``onnxruntime.quantization.quantize_dynamic`` of the BERT encoder (int8 weights,
  activations quantized at run time: DynamicQuantizeLinear + MatMulInteger);
* ``resnet18-int8-qdq``: ``quantize_static`` in QDQ format (QuantizeLinear/DequantizeLinear pairs around
  float ops) of ResNet-18, calibrated on a few random images;
* ``mobilenet-v2-int8-qop``: ``quantize_static`` in QOperator format of MobileNetV2, its convolutions only
  (QLinearConv; the QOperator forms of Add / pooling / Gemm are onnxruntime contrib ops, not ONNX).

Sizes follow the float entries they quantize.
"""

from __future__ import annotations

import os
import tempfile

from . import Built, Entry, image
from .cnn import build_cnn
from .transformer_text import build_encoder


class _Images:
    """The calibration reader quantize_static asks for: a few random images of the model's shape."""

    def __init__(self, name: str, shape: tuple[int, ...], count: int) -> None:
        self.batches = iter([{name: image(shape[0], shape[1], shape[2], shape[3], seed=1 + i)} for i in range(count)])

    def get_next(self):
        return next(self.batches, None)


def build_quantized(size: str, batch: int, how: str, source: str) -> Built:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

    if how == "dynamic":
        floats = build_encoder(size, batch, arch=source)
    else:
        floats = build_cnn(size, batch, arch=source)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "int8.onnx")
        with open(src, "wb") as f:
            f.write(floats.onnx)
        if how == "dynamic":
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        else:
            (name, value), = floats.feeds.items()
            quantize_static(src, dst, _Images(name, value.shape, 4 if size == "full" else 2),
                            quant_format=QuantFormat.QDQ if how == "qdq" else QuantFormat.QOperator,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                            # QOperator's QLinearAdd / QLinearGlobalAveragePool / QGemm are com.microsoft
                            # contrib ops; the corpus keeps to the ONNX standard (QLinearConv, QLinearMatMul).
                            op_types_to_quantize=None if how == "qdq" else ["Conv", "MatMul"])
        with open(dst, "rb") as f:
            return Built(f.read(), floats.feeds)


ENTRIES = [
    Entry("bert-int8-dynamic", "quantized", "BERT, quantize_dynamic (MatMulInteger)", build_quantized,
          params=(("how", "dynamic"), ("source", "bert"))),
    Entry("bert-int8-dynamic-b8", "quantized", "BERT int8 dynamic, batch 8", build_quantized, batch=8,
          params=(("how", "dynamic"), ("source", "bert"))),
    Entry("resnet18-int8-qdq", "quantized", "ResNet-18, quantize_static QDQ, per-channel", build_quantized,
          params=(("how", "qdq"), ("source", "resnet18"))),
    Entry("mobilenet-v2-int8-qop", "quantized", "MobileNetV2, quantize_static QOperator (QLinearConv)",
          build_quantized, params=(("how", "qop"), ("source", "mobilenet-v2"))),
]


