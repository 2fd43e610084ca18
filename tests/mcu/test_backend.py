"""The mcu backend through rammer.compile: the digits CNN, the report, refusals and budgets."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import rammer
from rammer.backends.mcu import models
from rammer.backends.mcu.layers import run_float
from rammer.backends.mcu.lower import lower_graph
from rammer.errors import CompileError, RammerError, UnsupportedOpError
from rammer.frontend import load

from .conftest import nhwc


def _accuracy(compiled, x, y, **kw) -> float:
    out = compiled.executable.run({"image": x}, **kw)["fc2"]
    return float((out.argmax(1) == y).mean())


def test_digits_int8_and_pool(mcu_backend, digits):
    model, xtr, ytr, xte, yte = digits
    net = lower_graph(load(model))
    fp32 = float((run_float(net, nhwc(xte)).reshape(len(xte), -1).argmax(1) == yte).mean())
    assert fp32 > 0.9
    int8 = rammer.compile(model, backend="mcu", calibration=xtr[:256], pool_size=0)
    assert abs(_accuracy(int8, xte, yte) - fp32) <= 0.02
    pooled = rammer.compile(model, backend="mcu", calibration=xtr[:256], pool_size=64)
    rep = pooled.executable.report
    assert rep["pooled_layers"] == "conv2, conv3, fc1"
    assert "conv1 (first layer" in rep["not_pooled"] and "fc2 (last layer" in rep["not_pooled"]
    assert rep["pool_size"] == 64 and rep["table_bytes"] == 256 * 64 * 2
    rows = {r["layer"]: r for r in pooled.executable.layer_table}
    for name in ("conv2", "conv3", "fc1"):
        r = rows[name]
        assert r["path"].startswith("weight pool")
        # 1-byte index per 8 weights: exactly 8x fewer weight bytes (plus the same bias/requant words)
        k = {"conv2": 32, "conv3": 64, "fc1": 64}[name]
        assert r["flash_bytes"] - 16 * k - 64 == r["int8_weight_bytes"] // 8  # + the 16-word geometry
    # without fine-tuning the pool costs accuracy, and fewer bits cost more
    acc8 = _accuracy(pooled, xte, yte, act_bits=8)
    acc3 = _accuracy(pooled, xte, yte, act_bits=3)
    assert acc8 > 0.6 and acc3 <= acc8 + 0.02
    # the outputs are the dequantized int8 results of the C program
    out = pooled.run({"image": xte[:1]})["fc2"]
    assert out.shape == (1, 10) and out.dtype == np.float32
    np.testing.assert_array_equal(out, pooled.executable.run({"image": xte[:1]})["fc2"])


def test_numpy_engine_equals_c_engine(mcu_backend, digits):
    model, xtr, _, xte, _ = digits
    c = rammer.compile(model, backend="mcu", calibration=xtr[:64], pool_size=32)
    py = rammer.compile(model, backend="mcu", calibration=xtr[:64], pool_size=32, engine="numpy")
    for bits in (8, 3):
        np.testing.assert_array_equal(c.executable.run({"image": xte[:40]}, act_bits=bits)["fc2"],
                                      py.executable.run({"image": xte[:40]}, act_bits=bits)["fc2"])


def _tiny(op: str = "Conv", name: str = "n") -> onnx.ModelProto:
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 3, 3], np.ones(8 * 27, np.float32) * 0.01)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name=name, pads=[1, 1, 1, 1])]
    if op != "Conv":
        nodes.append(helper.make_node(op, ["c"], ["y"], name="bad"))
    out = "y" if op != "Conv" else "c"
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_op_is_refused_naming_it(mcu_backend):
    with pytest.raises(RammerError, match="Sigmoid"):
        rammer.compile(_tiny("Sigmoid"), backend="mcu")


def test_hostile_names_reach_c_only_sanitized(mcu_backend):
    compiled = rammer.compile(_tiny(name='*/ int evil; /* "\n#'), backend="mcu", pool_size=0)
    src = compiled.executable.program.source.c
    assert "*/ int evil" not in src and "?? int evil; ?? " in src  # kept as comment text only
    x = np.random.default_rng(0).random((2, 3, 8, 8), dtype=np.float32)
    assert compiled.executable.run({"x": x})["c"].shape == (2, 8, 8, 8)


@pytest.mark.slow
def test_resnet_over_budget_names_layer_tensor_bytes(mcu_backend):
    with pytest.raises(CompileError,
                       match=r"bytes of RAM .* layer '[^']+' \(\w+: tensor \d+ \[\d+, \d+, \d+\] = \d+ bytes"):
        rammer.compile(models.resnet32(width=64), backend="mcu", ram_budget=64 * 1024)


def test_a_model_without_layers_is_refused(mcu_backend):
    g = helper.make_graph([helper.make_node("Flatten", ["x"], ["y"], name="f", axis=1)], "flat",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert mcu_backend.unsupported_nodes(load(model))
    with pytest.raises(RammerError, match="cannot compile"):
        rammer.compile(model, backend="mcu")
    from rammer.backends.mcu.lower import lower_graph as lower

    with pytest.raises(CompileError, match="computes nothing"):
        lower(load(model))


def test_grouped_conv_is_listed_as_unsupported(mcu_backend):
    from rammer.zoo import build

    graph = load(build("resnext-small", seed=0))
    bad = mcu_backend.unsupported_nodes(graph)
    assert bad and all(n.op_type == "Conv" and n.attr("group", 1) > 1 for n in bad)


def test_sample_model_compiles_and_runs_every_kernel_kind(mcu_backend):
    from rammer.backends.mcu.models import tiny_cnn

    exe = rammer.compile(tiny_cnn(), backend="mcu").executable
    kinds = {layer.kind for layer in exe.program.model.layers}
    assert kinds == {"conv", "dwconv", "add", "maxpool", "avgpool", "fc"}
    assert any(layer.pooled for layer in exe.program.model.layers)
    x = np.random.default_rng(0).random((3, 3, 8, 8), dtype=np.float32)
    ref = rammer.compile(tiny_cnn(), backend="reference").executable.run({"image": x[:1]})["fc"]
    got = exe.run({"image": x[:1]})["fc"]
    assert got.shape == ref.shape == (1, 10)
    # the int8 path (no pool) stays close to float on data like its calibration ([0, 1) images)
    int8 = rammer.compile(tiny_cnn(), backend="mcu", pool_size=0).executable.run({"image": x[:1]})["fc"]
    assert np.abs(int8 - ref).max() <= 0.05 * np.abs(ref).max() + 0.02
    assert mcu_backend.capabilities.extra["sample_model"].endswith(":tiny_cnn")


def test_emit_writes_source_that_compiles(mcu_backend, tmp_path):
    import subprocess

    from rammer.backends.mcu.models import tiny_cnn

    out = tmp_path / "emitted"
    exe = rammer.compile(tiny_cnn(), backend="mcu", emit=str(out)).executable
    assert sorted(p.name for p in out.iterdir()) == ["model.c", "model.h", "report.json"]
    import re

    code = re.sub(r"/\*.*?\*/", "", exe.source, flags=re.S)  # comments may say anything
    assert not re.search(r"\b(float|double|malloc|calloc|realloc|free)\b", code)
    assert "int model_run(const int8_t *in, int8_t *out, int act_bits)" in code
    assert re.search(r"static const int8_t w\d+\[", code) and re.search(r"static const int16_t bs_table\[", code)
    done = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", "model.c", "-o",
                           "m.o"], cwd=out, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    single = tmp_path / "one.c"
    single.write_text(exe.source)
    done = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-c", str(single), "-o",
                           str(tmp_path / "one.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_generated_source_is_deterministic(mcu_backend):
    from rammer.backends.mcu.models import tiny_cnn

    a = rammer.compile(tiny_cnn(seed=2), backend="mcu", pool_size=32).executable.source
    b = rammer.compile(tiny_cnn(seed=2), backend="mcu", pool_size=32).executable.source
    assert a == b


def test_saved_program_loads_and_runs_the_same(mcu_backend, tmp_path):
    from rammer.backends.mcu.models import tiny_cnn

    compiled = rammer.compile(tiny_cnn(), backend="mcu", pool_size=32, act_bits=5)
    path = str(tmp_path / "m.rammer")
    compiled.save(path)
    loaded = rammer.load_compiled(path)
    x = np.random.default_rng(3).random((1, 3, 8, 8), dtype=np.float32)
    np.testing.assert_array_equal(loaded.run({"image": x})["fc"], compiled.run({"image": x})["fc"])
    for bits in (8, 2):
        np.testing.assert_array_equal(loaded.executable.run({"image": x}, act_bits=bits)["fc"],
                                      compiled.executable.run({"image": x}, act_bits=bits)["fc"])
    assert loaded.executable.report["pool_size"] == 32


def test_a_matmul_over_each_row_of_a_batched_activation_is_unsupported(mcu_backend):
    # found by the fuzzer: [5,2,2,3] x [3,3] was a CompileError ("weight has 3 inputs, the activation 12")
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], np.eye(3, dtype=np.float32).ravel())
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="rows_mm")], "rows",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 2, 2, 3])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="rows_mm.*another --backend"):
        lower_graph(load(model))


@pytest.mark.parametrize("case", ["clip_bounds", "vector_weight"])
def test_variants_the_mcu_backend_does_not_lower_are_unsupported_naming_the_node(mcu_backend, case):
    # found by the fuzzer: a Clip other than ReLU/ReLU6 was a CompileError, a 1-d MatMul weight an IndexError
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 3, 3])
    if case == "clip_bounds":
        inits = [helper.make_tensor("lo", TensorProto.FLOAT, [], [-0.4]),
                 helper.make_tensor("hi", TensorProto.FLOAT, [], [0.8])]
        node, y = helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="the_node"), [4, 1, 3, 3]
    else:
        inits = [helper.make_tensor("w", TensorProto.FLOAT, [3], [0.1, -0.2, 0.3])]
        node, y = helper.make_node("MatMul", ["x", "w"], ["y"], name="the_node"), [4, 1, 3]
    g = helper.make_graph([node], "variant", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="the_node.*another --backend"):
        lower_graph(load(model))
