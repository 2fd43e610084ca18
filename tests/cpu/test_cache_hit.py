"""A cache hit does not import the model: it is keyed by the model's bytes, and the entry holds
what the executable needs of the graph (the ONNX frontend is not called)."""

from __future__ import annotations

import logging
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer import api as rammer_api
from rammer import frontend, model_key
from rammer import session as rammer_session


def _model(seed: int = 0, fallback: bool = False) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(seed).standard_normal((16, 8)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Relu", ["m"], ["y" if not fallback else "r"], name="relu")]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    if fallback:
        nodes.append(helper.make_node("Cast", ["r"], ["y"], name="to_double", to=TensorProto.DOUBLE))
        out = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4, 8])
    g = helper.make_graph(nodes, "hit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])], [out], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _no_import(monkeypatch) -> None:
    def refuse(*a, **k):
        raise AssertionError("the ONNX frontend was called on a cache hit")

    monkeypatch.setattr(frontend, "load", refuse)
    monkeypatch.setattr(rammer_api, "load", refuse)
    monkeypatch.setattr(rammer_session, "load_proto", refuse)


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    return str(path)


def test_a_hit_does_not_import_the_model(model_file, cache_dir, monkeypatch):
    x = {"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)}
    first = rammer.compile(model_file, backend="cpu")
    assert first.executable.cache_status == "miss"
    want = first(x)["y"]
    _no_import(monkeypatch)
    hit = rammer.compile(model_file, backend="cpu")
    assert hit.executable.cache_status == "hit"
    np.testing.assert_array_equal(hit(x)["y"], want)
    assert [(t.name, t.dtype, t.shape) for t in hit.inputs] == [("x", "float32", (4, 16))]
    assert [(t.name, t.dtype, t.shape) for t in hit.outputs] == [("y", "float32", (4, 8))]
    assert hit.graph.name == "hit"
    session = rammer.InferenceSession(model_file, providers=["cpu"])
    assert session.compiled.executable.cache_status == "hit"
    np.testing.assert_array_equal(session.run(None, x)[0], want)
    assert [i.shape for i in session.get_inputs()] == [[4, 16]]
    monkeypatch.undo()
    # the whole graph is still there when asked for (imported then)
    assert [n.op_type for n in hit.full_graph().nodes] == ["MatMul", "Relu"]


def test_a_hit_reports_the_fallback_and_strict_still_refuses(tmp_path, cache_dir, monkeypatch, caplog):
    from rammer import diagnostics

    path = str(tmp_path / "fb.onnx")
    onnx.save(_model(fallback=True), path)
    rammer.compile(path, backend="cpu")
    _no_import(monkeypatch)
    diagnostics._said.clear()
    with caplog.at_level(logging.WARNING, logger="rammer"):
        hit = rammer.compile(path, backend="cpu")
    assert hit.executable.cache_status == "hit"
    assert any("Cast x1 (to_double)" in r.getMessage() for r in caplog.records if r.name == "rammer")
    with pytest.raises(rammer.errors.CompileError, match="strict mode forbids fallbacks"):
        rammer.compile(path, backend="cpu", strict=True)
    # the host step runs from what the entry kept of the graph
    x = {"x": np.ones((4, 16), np.float32)}
    monkeypatch.undo()
    want = rammer.compile(path, backend="reference")(x)["y"]
    np.testing.assert_allclose(hit(x)["y"], want, rtol=1e-5)


def test_an_edited_model_file_is_not_served_the_old_program(model_file, cache_dir, monkeypatch):
    """The digest memo trusts a file's stat stamp; an edit (same size, same path) changes it."""
    monkeypatch.setattr(model_key, "RACY_S", 0.0)  # memoise at once (the file is seconds old at most)
    x = {"x": np.ones((4, 16), np.float32)}
    before = rammer.compile(model_file, backend="cpu")(x)["y"]
    assert rammer.compile(model_file, backend="cpu").executable.cache_status == "hit"
    assert os.listdir(os.path.join(cache_dir, "model-digests"))  # the memo was used
    edited = _model(seed=5)
    assert len(edited.SerializeToString()) == os.path.getsize(model_file)
    onnx.save(edited, model_file)
    again = rammer.compile(model_file, backend="cpu")
    assert again.executable.cache_status == "miss"
    want = rammer.compile(edited, backend="reference")(x)["y"]
    np.testing.assert_allclose(again(x)["y"], want, rtol=1e-5)
    assert not np.allclose(before, want)


def test_a_damaged_memo_is_ignored(model_file, cache_dir, monkeypatch):
    monkeypatch.setattr(model_key, "RACY_S", 0.0)
    rammer.compile(model_file, backend="cpu")
    folder = os.path.join(cache_dir, "model-digests")
    [memo] = os.listdir(folder)
    text = open(os.path.join(folder, memo), encoding="utf-8").read()
    digest = model_key.source_digest(model_file, folder)
    with open(os.path.join(folder, memo), "w", encoding="utf-8") as f:
        f.write(text.replace(digest, "0" * len(digest)))
    assert model_key.source_digest(model_file, folder) == digest  # recomputed, not believed
    assert rammer.compile(model_file, backend="cpu").executable.cache_status == "hit"


def test_a_corrupt_entry_is_rebuilt_on_the_keyed_path(model_file, cache_dir, caplog):
    first = rammer.compile(model_file, backend="cpu")
    [entry] = [e for e in os.listdir(os.path.join(cache_dir, "cpu", "programs")) if not e.startswith(".")]
    consts = os.path.join(cache_dir, "cpu", "programs", entry, "consts.bin")
    data = bytearray(open(consts, "rb").read())
    data[len(data) // 2] ^= 1
    open(consts, "wb").write(bytes(data))
    with caplog.at_level(logging.WARNING, logger="rammer"):
        again = rammer.compile(model_file, backend="cpu")
    assert again.executable.cache_status.startswith("rebuilt"), again.executable.cache_status
    assert "CRC-32" in again.executable.cache_status
    x = {"x": np.ones((4, 16), np.float32)}
    np.testing.assert_array_equal(again(x)["y"], first(x)["y"])
    assert rammer.compile(model_file, backend="cpu").executable.cache_status == "hit"


@pytest.mark.parametrize("cpuinfo, algorithm", [
    (b"processor\t: 0\nflags\t\t: fpu sse2 avx2 sha_ni vaes\n", "sha256"),   # x86 with SHA-NI
    (b"processor\t: 0\nFeatures\t: fp asimd aes sha1 sha2 crc32\n", "sha256"),  # Arm with SHA2
    (b"processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n", "blake2b"),      # no SHA instructions
    (b"", "blake2b"),
])
def test_the_model_digest_is_sha256_only_where_the_cpu_has_sha_instructions(tmp_path, monkeypatch, cpuinfo,
                                                                             algorithm):
    """SHA-256 with SHA instructions is twice BLAKE2b's speed, without them half of it; the digest
    names its algorithm, so keys of the two kinds never meet."""
    import builtins
    import hashlib

    real_open = builtins.open
    fake = tmp_path / "cpuinfo"
    fake.write_bytes(cpuinfo)
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: real_open(fake if p == "/proc/cpuinfo" else p, *a, **k))
    monkeypatch.setattr(model_key, "_ALGORITHM", [])
    assert model_key.digest_algorithm() == algorithm
    data = _model(seed=3).SerializeToString()
    want = hashlib.sha256(b"bytes:" + data) if algorithm == "sha256" else \
        hashlib.blake2b(b"bytes:" + data, digest_size=32)
    assert model_key.source_digest(data) == f"{algorithm}:{want.hexdigest()}"
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    assert model_key.source_digest(str(path)) == model_key.source_digest(data)  # a file hashes as its bytes
