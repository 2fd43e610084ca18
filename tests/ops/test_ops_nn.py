"""Conv, pooling, normalization, linear-algebra and attention ops against
onnxruntime on random inputs.

Each case builds a one-node ONNX model, imports it with rammer (so shape/dtype
inference runs) and executes it on the checking interpreter, which fails if a
computed output disagrees with the inferred dtype or shape.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import rammer
from rammer.dtypes import to_onnx
from rammer.interpreter import run_graph


def _model(op: str, feeds: dict[str, np.ndarray], n_outputs: int = 1, opset: int = 21, **attrs) -> onnx.ModelProto:
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, list(feeds), outputs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, to_onnx(v.dtype.name), v.shape) for n, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    return onnx.shape_inference.infer_shapes(model)


def _compare(op: str, feeds: dict[str, np.ndarray], n_outputs: int = 1, opset: int = 21,
             rtol: float = 1e-4, atol: float = 1e-5, **attrs) -> list[np.ndarray]:
    model = _model(op, feeds, n_outputs, opset, **attrs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, feeds)
    # rammer wants typed graph outputs; fill in any that ONNX's inference left open.
    for out, value in zip(model.graph.output, theirs):
        if not out.type.tensor_type.HasField("shape"):
            out.CopyFrom(helper.make_tensor_value_info(out.name, to_onnx(value.dtype.name), value.shape))
    ours = run_graph(rammer.load(model), feeds)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return ours


def _rand(rng: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


# -- convolutions ------------------------------------------------------------

CONV_CASES = [
    # (x shape, w shape, attrs)
    ((2, 4, 9, 11), (6, 2, 3, 3), dict(group=2, strides=[2, 1], dilations=[1, 2], pads=[1, 0, 2, 1])),
    ((1, 6, 8, 8), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),  # depthwise
    ((1, 3, 7, 7), (4, 3, 1, 1), dict(strides=[2, 2])),
    ((2, 3, 10), (5, 3, 4), dict(auto_pad="SAME_UPPER", strides=[3])),
    ((2, 3, 11), (5, 3, 4), dict(auto_pad="SAME_LOWER", strides=[2])),
    ((1, 2, 5, 6, 7), (4, 2, 2, 3, 2), dict(strides=[1, 2, 2], pads=[0, 1, 1, 1, 0, 0])),
    ((1, 3, 6, 6), (2, 3, 3, 3), dict(auto_pad="VALID")),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
def test_conv_matches_onnxruntime(x_shape, w_shape, attrs):
    rng = np.random.default_rng(0)
    feeds = {"x": _rand(rng, *x_shape), "w": _rand(rng, *w_shape), "b": _rand(rng, w_shape[0])}
    _compare("Conv", feeds, **attrs)


CONV_TRANSPOSE_CASES = [
    ((1, 4, 5, 6), (4, 3, 3, 3), dict(group=2, strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 2])),
    ((2, 2, 4, 4), (2, 3, 3, 2), dict(dilations=[2, 1], strides=[2, 2])),
    ((1, 3, 5), (3, 2, 4), dict(strides=[2], output_shape=[12])),
    ((1, 2, 4, 4), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 3, 3, 3), (2, 1, 2, 2, 2), dict(strides=[2, 2, 2])),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_TRANSPOSE_CASES)
def test_conv_transpose_matches_onnxruntime(x_shape, w_shape, attrs):
    rng = np.random.default_rng(1)
    group = attrs.get("group", 1)
    feeds = {"x": _rand(rng, *x_shape), "w": _rand(rng, *w_shape), "b": _rand(rng, w_shape[1] * group)}
    _compare("ConvTranspose", feeds, **attrs)


# -- pooling -----------------------------------------------------------------

POOL_CASES = [
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 2], strides=[1, 2], dilations=[2, 1], ceil_mode=1),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(kernel_shape=[2, 3], pads=[1, 1, 1, 1]),
]


@pytest.mark.parametrize("attrs", POOL_CASES)
def test_max_pool_with_indices(attrs):
    rng = np.random.default_rng(2)
    _compare("MaxPool", {"x": _rand(rng, 2, 3, 7, 8)}, n_outputs=2, **attrs)


@pytest.mark.parametrize("attrs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(attrs, count_include_pad):
    if "dilations" in attrs:
        pass
    rng = np.random.default_rng(3)
    _compare("AveragePool", {"x": _rand(rng, 2, 3, 7, 8)}, count_include_pad=count_include_pad, **attrs)


def test_max_pool_int8_and_storage_order():
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 127, size=(1, 2, 6, 5)).astype(np.int8)
    _compare("MaxPool", {"x": x}, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    _compare("MaxPool", {"x": _rand(rng, 1, 2, 6, 5)}, n_outputs=2, kernel_shape=[3, 3], storage_order=1)


def test_lp_pool_and_global_pools():
    rng = np.random.default_rng(5)
    x = _rand(rng, 2, 3, 6, 7)
    _compare("LpPool", {"x": x}, kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 0, 1], p=3)
    _compare("GlobalAveragePool", {"x": x})
    _compare("GlobalMaxPool", {"x": x})
    _compare("GlobalLpPool", {"x": x}, p=3)


# -- normalization -----------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_layer_norm_with_statistics(axis):
    rng = np.random.default_rng(6)
    x = _rand(rng, 3, 4, 5)
    norm_shape = x.shape[axis % 3 :]
    feeds = {"x": x, "scale": _rand(rng, *norm_shape), "bias": _rand(rng, *norm_shape)}
    _compare("LayerNormalization", feeds, n_outputs=3, axis=axis, epsilon=1e-3)


def test_layer_norm_float16_keeps_float32_statistics():
    rng = np.random.default_rng(7)
    feeds = {"x": _rand(rng, 2, 8, dtype=np.float16), "scale": _rand(rng, 8, dtype=np.float16)}
    y, mean, inv_std = _compare("LayerNormalization", feeds, n_outputs=3, rtol=2e-3, atol=2e-3)
    assert y.dtype == np.float16 and mean.dtype == np.float32 and inv_std.dtype == np.float32


def test_batch_instance_group_norm_lrn():
    rng = np.random.default_rng(8)
    x = _rand(rng, 2, 4, 5, 3)
    c = {"s": _rand(rng, 4), "b": _rand(rng, 4)}
    var = np.abs(_rand(rng, 4)) + 0.1
    _compare("BatchNormalization", {"x": x, **c, "m": _rand(rng, 4), "v": var}, epsilon=1e-3)
    _compare("InstanceNormalization", {"x": x, **c})
    _compare("GroupNormalization", {"x": x, **c}, num_groups=2)
    _compare("LRN", {"x": x}, size=3, alpha=0.02, beta=0.6, bias=2.0)
    _compare("LpNormalization", {"x": x}, axis=1, p=1)
    _compare("MeanVarianceNormalization", {"x": x}, axes=[0, 2])


# -- linear algebra and attention --------------------------------------------


def test_gemm_and_matmul_broadcasting():
    rng = np.random.default_rng(9)
    _compare("Gemm", {"a": _rand(rng, 5, 3), "b": _rand(rng, 4, 5), "c": _rand(rng, 4)},
             transA=1, transB=1, alpha=0.5, beta=2.0)
    _compare("MatMul", {"a": _rand(rng, 2, 1, 3, 4), "b": _rand(rng, 5, 4, 2)})
    _compare("MatMul", {"a": _rand(rng, 4), "b": _rand(rng, 3, 4, 2)})
    _compare("Einsum", {"a": _rand(rng, 2, 3, 4), "b": _rand(rng, 2, 4, 5)}, equation="bij,bjk->bik")
    _compare("Einsum", {"a": _rand(rng, 3, 3)}, equation="ii")
    _compare("Einsum", {"a": _rand(rng, 5, 4, 2, 3), "b": _rand(rng, 5, 4, 3, 6)}, equation="...ij,...jk->...ik")
    _compare("Einsum", {"a": _rand(rng, 2, 3)}, equation="ba")


def test_einsum_dropping_broadcast_dims_is_an_error():
    rng = np.random.default_rng(12)
    feeds = {"a": _rand(rng, 2, 3, 4), "b": _rand(rng, 2, 3)}
    model = _model("Einsum", feeds, equation="b...c,b...->bc")
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("out0", onnx.TensorProto.FLOAT, [2, 4]))
    with pytest.raises(rammer.RammerError, match="drops them"):
        rammer.load(model)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_with_weights_and_ignore_index(reduction):
    rng = np.random.default_rng(13)
    feeds = {
        "scores": _rand(rng, 4, 5, 3),
        "labels": rng.integers(0, 5, size=(4, 3)).astype(np.int64),
        "weights": np.abs(_rand(rng, 5)),
    }
    feeds["labels"][0, 0] = feeds["labels"][2, 1] = -1
    _compare("SoftmaxCrossEntropyLoss", feeds, n_outputs=2, opset=13, reduction=reduction, ignore_index=-1)
    _compare("NegativeLogLikelihoodLoss", {"x": feeds["scores"], "t": feeds["labels"]}, opset=13,
             reduction=reduction, ignore_index=-1)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_partial_rotation(interleaved):
    rng = np.random.default_rng(14)
    feeds = {
        "x": _rand(rng, 2, 3, 4, 8),
        "cos": _rand(rng, 10, 2),
        "sin": _rand(rng, 10, 2),
        "pos": rng.integers(0, 10, size=(2, 4)).astype(np.int64),
    }
    _compare("RotaryEmbedding", feeds, opset=23, interleaved=interleaved, rotary_embedding_dim=4)


def test_attention_gqa_causal_with_cache():
    rng = np.random.default_rng(10)
    feeds = {
        "q": _rand(rng, 2, 4, 3, 8),
        "k": _rand(rng, 2, 2, 3, 8),
        "v": _rand(rng, 2, 2, 3, 6),
        "mask": _rand(rng, 3, 5),
        "past_k": _rand(rng, 2, 2, 2, 8),
        "past_v": _rand(rng, 2, 2, 2, 6),
    }
    _compare("Attention", feeds, n_outputs=3, opset=23, is_causal=1)


def test_shape_errors_name_the_node():
    rng = np.random.default_rng(11)
    model = _model("Conv", {"x": _rand(rng, 1, 3, 5, 5), "w": _rand(rng, 2, 3, 3, 3)})
    # Make the weights disagree with the input channels after ONNX inference ran.
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 2
    with pytest.raises(rammer.RammerError, match=r"\(Conv\).*channels"):
        rammer.load(model)
