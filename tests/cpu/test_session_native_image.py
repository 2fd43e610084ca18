"""A cache hit runs the entry's native image (backends/cpu/native_image.py) without importing numba,
and gives the numba path's outputs bit for bit; an altered image is not loaded (the numba path runs)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.backends.cpu import native_image
from rammer.time_limits import scaled_limit

pytestmark = pytest.mark.skipif(not native_image.enabled() or native_image.compiler() is None,
                                reason="native images need Linux on x86-64/aarch64 and a C compiler")

#: A fresh process: gets the model from the cache, runs it, and reports what it imported.
_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import rammer

    path, cache, veus = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = rammer.compile(path, backend="cpu", cache_dir=cache, veus=veus)
    x = np.random.default_rng(3).standard_normal((8, 48)).astype(np.float32)
    y = model({"x": x})["y"]
    print(json.dumps({"status": model.executable.cache_status, "image": model.executable.image is not None,
                      "numba": "numba" in sys.modules, "scipy": "scipy" in sys.modules,
                      "llvmlite": "llvmlite" in sys.modules, "y": y.view(np.uint32).tolist()}))
""")


def _model(path: str) -> None:
    """GEMM + bias + GELU-ish elementwise, LayerNormalization and Softmax: several kernels, BLAS and
    micro-kernels, the shared elementwise interpreter."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((48, 96)).astype(np.float32) * 0.2, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((96, 40)).astype(np.float32) * 0.2, "w2")
    gamma = numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "gamma")
    beta = numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "beta")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Tanh", ["a1"], ["t1"], name="tanh1"),
             helper.make_node("Mul", ["a1", "t1"], ["g1"], name="mul1"),
             helper.make_node("LayerNormalization", ["g1", "gamma", "beta"], ["n1"], name="ln", axis=-1),
             helper.make_node("MatMul", ["n1", "w2"], ["m2"], name="mm2"),
             helper.make_node("Softmax", ["m2"], ["y"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "native-image", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 48])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 40])], [w1, b1, w2, gamma, beta])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _child(path: str, cache: str, veus: int, **env: str) -> dict:
    environ = dict(os.environ, **env)
    done = subprocess.run([sys.executable, "-c", _CHILD, path, cache, str(veus)], capture_output=True, text=True,
                          timeout=scaled_limit(300), env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("veus", [1, 2])
def test_a_cache_hit_runs_the_native_image_without_numba_bit_for_bit(tmp_path, veus):
    path, cache = str(tmp_path / "m.onnx"), str(tmp_path / "cache")
    _model(path)
    compiled = rammer.compile(path, backend="cpu", cache_dir=cache, veus=veus)  # the numba path, and saved
    assert compiled.executable.image is None
    x = np.random.default_rng(3).standard_normal((8, 48)).astype(np.float32)
    expected = compiled({"x": x})["y"]
    assert glob.glob(os.path.join(cache, "cpu", "programs", "*", "native.so"))

    got = _child(path, cache, veus)
    assert got["status"] == "hit" and got["image"]
    assert not got["numba"] and not got["scipy"] and not got["llvmlite"]
    assert np.array_equal(np.array(got["y"], dtype=np.uint32), expected.view(np.uint32))


def test_an_altered_image_is_not_loaded_and_the_numba_path_runs(tmp_path):
    path, cache = str(tmp_path / "m.onnx"), str(tmp_path / "cache")
    _model(path)
    compiled = rammer.compile(path, backend="cpu", cache_dir=cache, veus=1)
    x = np.random.default_rng(3).standard_normal((8, 48)).astype(np.float32)
    expected = compiled({"x": x})["y"]
    (library,) = glob.glob(os.path.join(cache, "cpu", "programs", "*", "native.so"))
    with open(library, "r+b") as f:
        f.seek(os.path.getsize(library) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))

    got = _child(path, cache, 1)
    assert got["status"] == "hit" and not got["image"] and got["numba"]
    assert np.array_equal(np.array(got["y"], dtype=np.uint32), expected.view(np.uint32))


def test_no_image_without_a_compiler(tmp_path, monkeypatch):
    path, cache = str(tmp_path / "m.onnx"), str(tmp_path / "cache")
    _model(path)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert shutil.which(os.environ["CC"]) is None
    rammer.compile(path, backend="cpu", cache_dir=cache, veus=1)
    assert glob.glob(os.path.join(cache, "cpu", "programs", "*", "manifest.json"))
    assert not glob.glob(os.path.join(cache, "cpu", "programs", "*", "native.so"))


def test_a_traced_run_on_the_image_records_every_row(tmp_path):
    path, cache = str(tmp_path / "m.onnx"), str(tmp_path / "cache")
    _model(path)
    expected_model = rammer.compile(path, backend="cpu", cache_dir=cache, veus=2)
    hit = rammer.compile(path, backend="cpu", cache_dir=cache, veus=2)  # this process: a hit on the image
    assert hit.executable.cache_status == "hit" and hit.executable.image is not None
    x = np.random.default_rng(5).standard_normal((8, 48)).astype(np.float32)
    out, slices = hit.executable.trace_run({"x": x})
    assert np.array_equal(out["y"], expected_model({"x": x})["y"])
    rows = hit.executable.program.T.shape[0]
    assert len(slices) == rows and all(s.end_ns >= s.start_ns > 0 for s in slices)
