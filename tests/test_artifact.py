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
    assert man["format"] == "rammer.compiled/1" and man["backend"] == "cpu"
    assert {"model.onnx", "tables.npz", "consts.bin", "meta.json", "schedules.json"} <= set(man["files"])


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
    _rewrite(path, old, edit_manifest("format", "rammer.compiled/0"))
    with pytest.raises(ArtifactError, match="format 'rammer.compiled/0'"):
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
