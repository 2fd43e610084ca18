"""The benchmark model zoo: every model builds, checks, is static and seeded."""

from __future__ import annotations

import argparse
import os
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import rammer.zoo as zoo
from rammer.cli import zoo as zoo_cli
from rammer.errors import ModelLoadError, RammerError

ALL = [e.name for e in zoo.list_models()]
SMALL = [e.name for e in zoo.list_models() if e.small]
FULL = [e.name for e in zoo.list_models() if not e.small]


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str | None]:
    dims = []
    for d in value_info.type.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return dims


def _random_feeds(model: onnx.ModelProto, seed: int = 123) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal(tuple(_dims(i))).astype(np.float32) for i in model.graph.input
    }


def _run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_registry_names_and_pairs():
    assert FULL == ["lstm-tc", "seq2seq", "nasnet", "resnext", "alexnet", "deepspeech2"]
    assert SMALL == [f"{n}-small" for n in FULL]
    for entry in zoo.list_models():
        assert entry.description
        assert entry.base == entry.name.removesuffix("-small")


@pytest.fixture(scope="module")
def built() -> dict[str, onnx.ModelProto]:
    # Building every full-size model once takes about 2 s in all (the two
    # 60M-parameter CNNs about 0.5-0.8 s each), so they are all tested.
    return {name: zoo.build(name) for name in ALL}


def _weights_as_inputs(model: onnx.ModelProto, min_size: int = 4096) -> onnx.ModelProto:
    """A copy whose large initializers are graph inputs of the same type and shape.

    The checker and shape inference only look at a weight's type and shape,
    but serialize the whole model (twice); for the 250 MB CNNs that is most
    of the test's time. Small constants (axes, shapes) stay initializers.
    """
    light = onnx.ModelProto()
    light.CopyFrom(model)
    del light.graph.initializer[:]
    for t in model.graph.initializer:
        if int(np.prod(t.dims)) >= min_size:
            light.graph.input.append(
                onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
            )
        else:
            light.graph.initializer.append(t)
    return light


@pytest.mark.parametrize("name", ALL)
def test_checks_with_static_shapes(built, name):
    model = built[name]
    if zoo.count_parameters(model) > 10_000_000:
        model = _weights_as_inputs(model)
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    for vi in list(built[name].graph.input) + list(model.graph.output):
        assert vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
        dims = _dims(vi)
        assert dims and all(isinstance(d, int) and d > 0 for d in dims), (vi.name, dims)
    # Every intermediate tensor must have a fully known static shape too.
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    produced = {o for n in model.graph.node for o in n.output}
    known = {vi.name: _dims(vi) for vi in inferred.graph.value_info}
    known.update({vi.name: _dims(vi) for vi in inferred.graph.output})
    assert produced <= known.keys()
    assert all(all(isinstance(d, int) for d in dims) for dims in known.values())
    assert all(t.data_type == onnx.TensorProto.FLOAT for t in model.graph.initializer
               if t.name.endswith(("_W", "_R", "_B")))


@pytest.mark.parametrize("name", SMALL + ["lstm-tc"])
def test_seed_decides_weights(name):
    a, b, c = zoo.build(name, seed=0), zoo.build(name, seed=0), zoo.build(name, seed=1)
    assert a.SerializeToString() == b.SerializeToString()
    wa, wc = _weights(a), _weights(c)
    assert wa.keys() == wc.keys()
    # Every random weight changes with the seed; fixed constants do not.
    changed = [k for k in wa if not np.array_equal(wa[k], wc[k])]
    assert len(changed) >= 3
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in c.graph.node]


@pytest.mark.parametrize("name", SMALL)
def test_small_runs_in_onnxruntime(name):
    model = zoo.build(name)
    outputs = _run_ort(model, _random_feeds(model))
    for out, vi in zip(outputs, model.graph.output):
        assert list(out.shape) == _dims(vi)
        assert np.isfinite(out).all()
        # Weights are scaled so activations stay O(1): not vanishing, not huge.
        rms = float(np.sqrt(np.mean(out.astype(np.float64) ** 2)))
        assert 1e-2 < rms < 10, rms


@pytest.mark.parametrize("name", ["lstm-tc-small", "resnext-small", "deepspeech2-small"])
def test_batch_parameter(name):
    one, three = zoo.build(name, batch=1), zoo.build(name, batch=3)
    onnx.checker.check_model(three, full_check=True)
    assert _dims(three.graph.input[0])[0] == 3 and _dims(three.graph.output[0])[0] == 3
    # Same weights regardless of batch: only the shapes change.
    w1, w3 = _weights(one), _weights(three)
    assert all(np.array_equal(w1[k], w3[k]) for k in w1 if k.endswith(("_W", "_R")))
    feeds = _random_feeds(three)
    batched = _run_ort(three, feeds)[0]
    single = _run_ort(one, {k: v[1:2] for k, v in feeds.items()})[0]
    np.testing.assert_allclose(batched[1:2], single, rtol=1e-4, atol=1e-5)


def test_lstm_tc_node_count(built):
    ops = Counter(n.op_type for n in built["lstm-tc"].graph.node)
    total = sum(ops.values())
    # 10 layers x 100 steps x 14 nodes per cell, plus splitting the input.
    assert total == 14102
    assert ops["MatMul"] == 2000 and ops["Sigmoid"] == 3000 and ops["Tanh"] == 2000
    assert ops["Split"] == 1001 and ops["Squeeze"] == 100
    assert "LSTM" not in ops


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_lstm(w: dict[str, np.ndarray], prefix: str, layers: int, xs, h, c):
    """A plain LSTM (gates i, f, g, o) over the steps ``xs``; returns tops and states."""
    tops = []
    for x in xs:
        for k in range(layers):
            gates = x @ w[f"{prefix}l{k}_W"] + h[k] @ w[f"{prefix}l{k}_R"] + w[f"{prefix}l{k}_B"]
            i, f, g, o = np.split(gates, 4, axis=1)
            c[k] = _sigmoid(f) * c[k] + _sigmoid(i) * np.tanh(g)
            h[k] = _sigmoid(o) * np.tanh(c[k])
            x = h[k]
        tops.append(x)
    return tops, h, c


def test_lstm_tc_small_is_an_lstm():
    model = zoo.build("lstm-tc-small", seed=5, batch=2)
    w = _weights(model)
    feeds = _random_feeds(model)
    x = feeds["x"].astype(np.float64)
    zeros = [np.zeros((2, 32)) for _ in range(2)]
    tops, _, _ = _numpy_lstm(w, "", 2, [x[:, t] for t in range(5)], list(zeros), list(zeros))
    (got,) = _run_ort(model, feeds)
    np.testing.assert_allclose(got, tops[-1], rtol=1e-4, atol=1e-5)


def test_seq2seq_small_decoder_feeds_back_and_starts_from_encoder():
    model = zoo.build("seq2seq-small", seed=2)
    w = _weights(model)
    feeds = _random_feeds(model)
    x = feeds["x"].astype(np.float64)
    hidden = x.shape[2]
    zeros = [np.zeros((1, hidden)) for _ in range(3)]
    _, h, c = _numpy_lstm(w, "enc_", 3, [x[:, t] for t in range(5)], list(zeros), list(zeros))
    dh, dc = h[-2:], c[-2:]  # the decoder's 2 layers start from the top 2 encoder layers
    y = np.zeros((1, hidden))
    expected = []
    for _ in range(3):
        (y,), dh, dc = _numpy_lstm(w, "dec_", 2, [y], dh, dc)
        expected.append(y)
    (got,) = _run_ort(model, feeds)
    np.testing.assert_allclose(got, np.stack(expected, axis=1), rtol=1e-4, atol=1e-5)


def test_cnn_structures(built):
    def ops(name: str) -> Counter:
        return Counter(n.op_type for n in built[name].graph.node)

    nasnet = built["nasnet"].graph.node
    cells = {n.name for n in nasnet if n.name.endswith("_out")}
    assert len([c for c in cells if c.startswith("cell")]) == 18
    assert len([c for c in cells if c.startswith("reduce")]) == 2
    assert "BatchNormalization" not in ops("nasnet")
    w = _weights(built["nasnet"])
    depthwise = [n for n in nasnet if n.op_type == "Conv" and "_dw" in n.name]
    for n in depthwise:
        group = next(a.i for a in n.attribute if a.name == "group")
        assert group == w[n.input[1]].shape[0] and w[n.input[1]].shape[1] == 1
    assert _dims(built["nasnet"].graph.output[0]) == [1, 10]

    resnext = ops("resnext")
    assert resnext["Add"] == 9 and resnext["Gemm"] == 1
    groups = [a.i for n in built["resnext"].graph.node for a in n.attribute if a.name == "group"]
    assert groups == [16] * 9
    assert 67e6 < zoo.count_parameters(built["resnext"]) < 69e6  # ResNeXt-29 16x64d: 68.1M

    alexnet = ops("alexnet")
    assert (alexnet["Conv"], alexnet["MaxPool"], alexnet["Gemm"]) == (5, 3, 3)
    assert _dims(built["alexnet"].graph.input[0]) == [1, 3, 227, 227]
    assert _dims(built["alexnet"].graph.output[0]) == [1, 1000]

    ds2 = ops("deepspeech2")
    assert ds2["Conv"] == 2 and ds2["Gemm"] == 75 and ds2["MatMul"] == 2 * 7 * 75
    assert _dims(built["deepspeech2"].graph.output[0]) == [1, 75, 29]

    s2s = ops("seq2seq")
    assert s2s["MatMul"] == 2 * (8 * 100 + 4 * 30)
    assert _dims(built["seq2seq"].graph.output[0]) == [1, 30, 128]


def test_unknown_model_lists_known_names():
    with pytest.raises(ModelLoadError) as info:
        zoo.build("lstm")
    assert isinstance(info.value, RammerError)
    assert "lstm-tc" in str(info.value) and "resnext-small" in str(info.value)


@pytest.mark.parametrize("kw", [{"batch": 0}, {"seed": -1}, {"batch": 1.5}, {"seed": True}])
def test_bad_seed_or_batch(kw):
    with pytest.raises(ModelLoadError):
        zoo.build("lstm-tc-small", **kw)


def test_export_is_atomic(tmp_path):
    out = tmp_path / "m.onnx"
    out.write_bytes(b"old")
    model = zoo.export("nasnet-small", out, seed=4)
    assert out.read_bytes() == zoo.build("nasnet-small", seed=4).SerializeToString()
    assert onnx.load(str(out)).graph.name == model.graph.name
    assert os.listdir(tmp_path) == ["m.onnx"]  # no temporary file left behind
    with pytest.raises(OSError):
        zoo.export("nasnet-small", tmp_path / "missing" / "m.onnx")
    with pytest.raises(ModelLoadError):
        zoo.export("nope", out)
    assert out.read_bytes() == model.SerializeToString()  # untouched by the failures


def _cli(argv: list[str]) -> tuple[argparse.Namespace, int]:
    parser = argparse.ArgumentParser(prog="rammer")
    zoo_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args, args.func(args)


def test_cli_export(tmp_path, capsys):
    out = tmp_path / "x.onnx"
    _, rc = _cli(["zoo", "export", "lstm-tc-small", str(out), "--seed", "3", "--batch", "2"])
    assert rc == 0
    assert out.read_bytes() == zoo.build("lstm-tc-small", seed=3, batch=2).SerializeToString()
    assert "147 nodes" in capsys.readouterr().out
    _, rc = _cli(["zoo", "export", "lstm-tc-small", str(tmp_path / "no" / "x.onnx")])
    assert rc == 1 and "cannot write" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli(["zoo", "export", "lstm-tc-small", str(out), "--batch", "0"])


def test_cli_list(capsys, monkeypatch):
    _, rc = _cli(["zoo", "list", "--no-stats"])
    text = capsys.readouterr().out
    assert rc == 0 and all(name in text for name in ALL)
    # With stats every model is built; restrict to the small ones to stay fast.
    monkeypatch.setattr(zoo, "list_models", lambda: [e for e in zoo._REGISTRY.values() if e.small])
    _, rc = _cli(["zoo", "list"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and lines[0].split()[-2:] == ["nodes", "parameters"]
    row = next(line for line in lines if line.startswith("lstm-tc-small "))
    assert row.split()[-2] == "147"
