"""Saved compiled models: same answers without compiling, and clear refusals."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import rammer
import rammer.zoo
from rammer.artifact import ArtifactError, read_manifest
from rammer.cli import main


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    proto = rammer.zoo.build("nasnet-small")
    model = rammer.compile(proto, backend="cpu", veus=2)
    path = str(tmp_path_factory.mktemp("art") / "nasnet.rammer")
    assert model.save(path) == path
    return model, path


def test_load_gives_the_same_outputs_without_compiling(saved, monkeypatch):
    model, path = saved
    from rammer.backends.cpu import compiler

    def no_compile(*a, **k):
        raise AssertionError("load_compiled compiled the model")

    monkeypatch.setattr(compiler, "compile_program", no_compile)
    loaded = rammer.load_compiled(path)
    feeds = model.random_feeds(5)
    want = model.run(feeds)
    got = loaded.run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert loaded.backend.name == "cpu" and [t.name for t in loaded.inputs] == [t.name for t in model.inputs]
    man = read_manifest(path)
    assert man["format"] == "rammer.compiled/2" and man["backend"] == "cpu"
    assert {"tables.npz", "consts.bin", "meta.json", "schedules.json", "graph.json", "graph.npz"} <= set(man["files"])
    assert "model.onnx" not in man["files"]  # the weights are in the program's constants, once


def test_load_imports_nothing(saved, monkeypatch):
    """Loading reads the program; the ONNX frontend is not called (there is no model in the file)."""
    from rammer import artifact, frontend

    def no_import(*a, **k):
        raise AssertionError("load_compiled imported the model")

    monkeypatch.setattr(frontend, "load", no_import)
    monkeypatch.setattr(artifact, "load", no_import)
    model, path = saved
    loaded = rammer.load_compiled(path)
    feeds = model.random_feeds(1)
    np.testing.assert_array_equal(loaded.run(feeds)[model.outputs[0].name], model.run(feeds)[model.outputs[0].name])


# -- a model with >1 MiB of weights and a node the cpu backend leaves to numpy (a Cast to float64) ---------

def _big_fallback_model(path) -> int:
    """Writes the model; returns the bytes of its weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["r"], name="relu"),
         helper.make_node("Cast", ["r"], ["y"], name="to_double", to=TensorProto.DOUBLE)],
        "big-fallback", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4, 1024])], [numpy_helper.from_array(w, "W")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return w.nbytes


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    folder = tmp_path_factory.mktemp("big")
    onnx_path = folder / "big.onnx"
    weights = _big_fallback_model(onnx_path)
    model = rammer.compile(str(onnx_path), backend="cpu", veus=2, cache_dir=str(folder / "cache"))
    path = str(folder / "big.rammer")
    model.save(path)
    return model, path, weights


def test_the_file_holds_the_weights_once(big):
    """The archive held model.onnx beside the program's constants: twice the weights."""
    _, path, weights = big
    import os

    size = os.path.getsize(path)
    assert weights < size < 1.15 * weights, (size, weights)
    man = read_manifest(path)
    assert man["files"]["consts.bin"]["crc32"] and "sha256" not in man["files"]["consts.bin"]
    with zipfile.ZipFile(path) as z:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())


def test_a_large_loaded_model_runs_the_same_and_on_lanes(big):
    model, path, _ = big
    loaded = rammer.load_compiled(path)
    feeds = model.random_feeds(2)
    np.testing.assert_array_equal(loaded.run(feeds)["y"], model.run(feeds)["y"])
    # the 1-vEU twin is saved: concurrent callers get lanes without the graph to compile
    assert loaded.executable._lane_program is not None
    lane = loaded.executable._new_lane(probe=False)
    # (another summation order: a 1-vEU program splits its GEMMs differently)
    np.testing.assert_allclose(lane._run_here(feeds)["y"], model.run(feeds)["y"], rtol=1e-4, atol=1e-3)
    with pytest.raises(rammer.RammerError, match="holds its compiled program, not its whole graph"):
        loaded.full_graph()


def test_loading_reports_the_fallback_and_strict_refuses(big, caplog):
    import logging

    from rammer import diagnostics

    _, path, _ = big
    diagnostics._said.clear()  # the warning is said once per process
    with caplog.at_level(logging.WARNING, logger="rammer"):
        rammer.load_compiled(path)
    said = [r.getMessage() for r in caplog.records if r.name == "rammer"]
    assert any("in numpy" in m and "Cast x1 (to_double)" in m for m in said), said
    with pytest.raises(rammer.errors.CompileError, match="strict mode forbids fallbacks"):
        rammer.load_compiled(path, strict=True)


def test_the_file_mode_follows_the_umask(big, tmp_path):
    import os
    import stat

    model, _, _ = big
    for mask, mode in ((0o022, 0o644), (0o027, 0o640), (0o002, 0o664)):
        old = os.umask(mask)
        try:
            path = model.save(str(tmp_path / f"m{mask:o}.rammer"))
        finally:
            os.umask(old)
        assert stat.S_IMODE(os.stat(path).st_mode) == mode, (oct(mask), oct(os.stat(path).st_mode))


def test_damaged_weights_are_refused(big, tmp_path):
    _, path, _ = big
    bad = str(tmp_path / "bad.rammer")
    data = bytearray(open(path, "rb").read())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("consts.bin")
    from rammer.artifact import _data_offset

    data[_data_offset(path, info) + info.file_size // 2] ^= 0x10  # one bit in the middle of the weights
    open(bad, "wb").write(bytes(data))
    with pytest.raises(ArtifactError, match="consts.bin does not match its CRC-32"):
        rammer.load_compiled(bad)


def _rewrite(src: str, dst: str, edit) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.namelist():
            zout.writestr(item, edit(item, zin.read(item)))


def test_corrupt_file_is_refused(saved, tmp_path):
    _, path = saved
    bad = str(tmp_path / "bad.rammer")
    _rewrite(path, bad, lambda n, d: d[:-1] + bytes([d[-1] ^ 1]) if n == "consts.bin" else d)
    with pytest.raises(ArtifactError, match="consts.bin does not match its digest"):
        rammer.load_compiled(bad)


def test_other_machine_or_version_is_refused(saved, tmp_path):
    _, path = saved

    def edit_manifest(key, value):
        def edit(name, data):
            if name != "manifest.json":
                return data
            m = json.loads(data)
            m[key] = value
            return json.dumps(m).encode()
        return edit

    other = str(tmp_path / "other.rammer")
    _rewrite(path, other, edit_manifest("compat", {"cpu.vector_width": "4", "cpu.isa": "neon"}))
    with pytest.raises(ArtifactError, match="another kind of machine.*cpu.vector_width"):
        rammer.load_compiled(other)
    old = str(tmp_path / "old.rammer")
    _rewrite(path, old, edit_manifest("format", "rammer.compiled/1"))
    with pytest.raises(ArtifactError, match="format 'rammer.compiled/1'.*save it again"):
        rammer.load_compiled(old)
    (tmp_path / "junk.rammer").write_bytes(b"not a zip")
    with pytest.raises(ArtifactError, match="not a readable saved rammer model"):
        rammer.load_compiled(str(tmp_path / "junk.rammer"))


def test_reference_backend_cannot_save_says_so(tmp_path):
    model = rammer.compile(rammer.zoo.build("lstm-tc-small"), backend="reference")
    with pytest.raises(rammer.RammerError, match="cannot save compiled models"):
        model.save(str(tmp_path / "x.rammer"))
    assert not list(tmp_path.iterdir())


def test_compile_o_then_run_the_saved_model(tmp_path, capsys):
    out = tmp_path / "m.rammer"
    assert main(["compile", "--zoo", "lstm-tc-small", "--backend", "cpu", "-o", str(out)]) == 0
    assert out.is_file() and "saved the compiled model" in capsys.readouterr().out
    assert main(["run", str(out), "--repeat", "2"]) == 0
    assert "output" in capsys.readouterr().out
    assert main(["compile", "--zoo", "lstm-tc-small", "-o", str(tmp_path / "no" / "m.rammer")]) != 0
    assert "does not exist" in capsys.readouterr().err
