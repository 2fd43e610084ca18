"""The int8 path against an independent int8 runtime: TFLite Micro's Python interpreter (PyPI
``tflite-micro``) on a .tflite written from the same quantized model, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.mcu import kernels, lower, pool, quantize
from rammer.backends.mcu.layers import FloatLayer, FloatNet, infer_shapes
from rammer.frontend import load

from .conftest import nhwc

runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime",
                              reason="needs the tflite-micro package (pip install tflite-micro)")
pytest.importorskip("flatbuffers", reason="needs the flatbuffers package")
from rammer.backends.mcu.tflite_export import to_tflite  # noqa: E402


def _tflm(model, x: np.ndarray) -> np.ndarray:
    it = runtime.Interpreter.from_bytes(to_tflite(model))
    out = []
    for n in range(len(x)):
        it.set_input(x[n:n + 1], 0)
        it.invoke()
        out.append(np.array(it.get_output(0)).reshape(-1))
    return np.array(out, np.int8)


def test_digits_int8_and_8_bit_pool_equal_tflite_micro(digits):
    model, xtr, _, xte, _ = digits
    net = lower.lower_graph(load(model))
    calib = nhwc(xtr[:256])
    q = quantize.quantize_net(net, calib)
    x = quantize.quantize_input(nhwc(xte[:200]), q.input_tensor)
    np.testing.assert_array_equal(_tflm(q, x), kernels.run_model(q, x).reshape(len(x), -1))
    # at 8 bits a pooled layer is an int8 conv whose weights are the pool vectors
    p = pool.build_pool(net, calib, 32)
    qp = quantize.quantize_net(net, calib, p.pooled, p.pool, p.reasons)
    xp = quantize.quantize_input(nhwc(xte[:200]), qp.input_tensor)
    np.testing.assert_array_equal(_tflm(qp, xp), kernels.run_model(qp, xp, 8).reshape(len(xp), -1))


def test_every_exportable_kernel_equals_tflite_micro():
    rng = np.random.default_rng(7)

    def w(*shape):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32)

    L = FloatLayer
    layers = [
        L("conv", "c1", (0,), 1, w(16, 3, 3, 3), rng.standard_normal(16).astype(np.float32) * .1,
          (3, 3), (1, 1), (1, 1, 1, 1), "relu"),
        L("conv", "c2", (1,), 2, w(16, 3, 3, 16), np.zeros(16, np.float32), (3, 3), (2, 2), (0, 0, 1, 1), "relu6"),
        L("dwconv", "dw", (2,), 3, w(16, 3, 3), rng.standard_normal(16).astype(np.float32) * .1,
          (3, 3), (1, 1), (1, 1, 1, 1), "none"),
        L("add", "add", (3, 2), 4, act="relu"),
        L("maxpool", "mp", (4,), 5, kernel=(2, 2), stride=(1, 1)),
        L("avgpool", "ap", (5,), 6, kernel=(2, 2), stride=(2, 2)),
        L("fc", "fc", (6,), 7, w(10, 16), rng.standard_normal(10).astype(np.float32), act="none"),
    ]
    net = FloatNet("oracle", (6, 6, 3), layers, output=7)
    infer_shapes(net)
    q = quantize.quantize_net(net, rng.standard_normal((32, 6, 6, 3)).astype(np.float32))
    x = quantize.quantize_input(rng.standard_normal((64, 6, 6, 3)).astype(np.float32) * 1.5, q.input_tensor)
    np.testing.assert_array_equal(_tflm(q, x), kernels.run_model(q, x).reshape(len(x), -1))
