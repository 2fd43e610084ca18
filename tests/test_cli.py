from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from helpers import add_relu_model, make_model
from onnx import TensorProto, helper

import rammer
from rammer.cli import main


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(add_relu_model(), str(path))
    return str(path)


def test_backends_table(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "reference" in out and "available" in out


def test_backends_table_fits_100_columns_and_notes_are_not_why_nots(capsys, monkeypatch):
    from rammer.backend import Availability

    table_ = rammer.plugins.backends()
    long_note = "runs on a simulated device named " + "x" * 150  # an available backend's long note
    long_why = "no such device here: " + "the driver is missing; " * 8
    monkeypatch.setattr(table_["reference"], "availability", lambda: Availability(True, long_note))
    monkeypatch.setattr(table_["mcu"], "availability", lambda: Availability(False, long_why))
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    why_not = out.split("why not:")[1].split("notes:")[0]
    notes = out.split("notes:")[1]
    assert "mcu" in why_not and "reference" not in why_not
    assert "reference" in notes and "x" * 60 in notes  # a long unbroken word keeps its own line
    assert main(["backends", "--json"]) == 0
    data = {b["name"]: b for b in json.loads(capsys.readouterr().out)}
    assert data["reference"]["why_not"] == "" and data["reference"]["note"] == long_note
    assert data["mcu"]["why_not"] == long_why


def test_backends_json(capsys):
    assert main(["backends", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ref = next(b for b in data if b["name"] == "reference")
    assert ref["available"] is True and ref["capabilities"]["ops"] is None


def test_run_prints_outputs_and_latency_and_saves(model_path, tmp_path, capsys):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    out_file = tmp_path / "out.npz"
    rc = main(["run", model_path, "--backend", "reference", "--input", f"x={tmp_path / 'x.npy'}",
               "--repeat", "3", "--output", str(out_file), "--seed", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "output r: float32[2, 3]" in out and "latency: mean" in out and "p99" in out
    saved = np.load(out_file)["r"]
    assert saved.shape == (2, 3) and (saved >= 0).all()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_inspect(model_path, capsys):
    assert main(["inspect", model_path]) == 0
    out = capsys.readouterr().out
    assert "2 nodes" in out and "Add" in out and "FLOPs" in out


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["/nonexistent/model.onnx"], "does not exist"),
        (["--backend", "nope"], "unknown backend 'nope'"),
        (["--input", "x=/nonexistent.npy"], "cannot read"),
    ],
)
def test_errors_are_one_line_without_traceback(model_path, argv_tail, message, capsys):
    argv = ["run"] + ([model_path] if not argv_tail[0].startswith("/") else []) + argv_tail
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_wrong_input_shape_is_reported(model_path, tmp_path, capsys):
    np.save(tmp_path / "bad.npy", np.zeros((4, 4), np.float32))
    assert main(["run", model_path, "-b", "reference", "--input", f"x={tmp_path / 'bad.npy'}"]) != 0
    assert "'x' has shape [4, 4]" in capsys.readouterr().err


def test_malformed_protobuf(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffnot a model")
    assert main(["run", str(bad), "-b", "reference"]) != 0
    assert "not a valid ONNX model" in capsys.readouterr().err


def test_unsupported_ops_are_all_listed(tmp_path, capsys):
    model = make_model(
        [helper.make_node("FooOp", ["x"], ["a"], name="foo1"), helper.make_node("BarOp", ["a"], ["b"], name="bar1"),
         helper.make_node("FooOp", ["b"], ["c"], name="foo2")],
        [("x", TensorProto.FLOAT, [2])], [("c", TensorProto.FLOAT, [2])],
    )
    path = tmp_path / "u.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["run", str(path), "-b", "reference"]) != 0
    err = capsys.readouterr().err
    assert "2 unsupported op type(s)" in err
    assert "FooOp (opset 17) at nodes foo1, foo2" in err and "BarOp" in err and "bar1" in err


def test_debug_shows_traceback(capsys):
    assert main(["--debug", "run", "/nonexistent.onnx"]) != 0
    assert "Traceback" in capsys.readouterr().err


def test_console_script_entry_point():
    proc = subprocess.run([sys.executable, "-m", "rammer.cli", "backends"], capture_output=True, text=True)
    assert proc.returncode == 0 and "reference" in proc.stdout


# -- friction items (issue 27) -------------------------------------------------------


def _dynamic_batch_model(tmp_path):
    model = add_relu_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    path = tmp_path / "dyn.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_debug_is_accepted_after_the_subcommand_too(capsys):
    assert main(["run", "/nonexistent.onnx", "--debug"]) != 0
    assert "Traceback" in capsys.readouterr().err
    assert main(["run", "/nonexistent.onnx"]) != 0
    assert "Traceback" not in capsys.readouterr().err


def test_batch_binds_dim_0_of_an_onnx_file(tmp_path, capsys):
    path = _dynamic_batch_model(tmp_path)
    assert main(["run", path, "-b", "reference", "--batch", "4", "--repeat", "1"]) == 0
    assert "output r: float32[4, 3]" in capsys.readouterr().out


def test_batch_on_a_model_without_a_dynamic_batch_is_an_error(model_path, capsys):
    assert main(["run", model_path, "-b", "reference", "--batch", "4"]) != 0
    err = capsys.readouterr().err
    assert "--batch 4: no input of the model has a dynamic dim 0" in err and "x[2, 3]" in err


def test_zero_batch_from_shape_runs_cleanly(tmp_path, capsys):
    path = _dynamic_batch_model(tmp_path)
    assert main(["run", path, "-b", "reference", "--shape", "x=0,3", "--repeat", "1"]) == 0
    assert "output r: float32[0, 3]" in capsys.readouterr().out
    assert main(["run", path, "-b", "reference", "--shape", "x=-1,3"]) != 0
    assert "dims must be 0 or more" in capsys.readouterr().err


def test_output_into_a_missing_folder_fails_before_running(model_path, tmp_path, capsys, monkeypatch):
    import rammer

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled although -o cannot be written")

    monkeypatch.setattr(rammer, "compile", no_compile)
    assert main(["run", model_path, "-o", str(tmp_path / "missing" / "out.npz")]) != 0
    assert "folder" in capsys.readouterr().err


def test_npz_and_big_endian_inputs(model_path, tmp_path, capsys):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "one.npz", anything=x)
    np.savez(tmp_path / "named.npz", x=x, other=np.ones(3))
    np.savez(tmp_path / "two.npz", a=x, b=x)
    np.save(tmp_path / "be.npy", x.astype(">f4"))
    for path in ("one.npz", "named.npz", "be.npy"):
        assert main(["run", model_path, "-b", "reference", "-i", f"x={tmp_path / path}", "--repeat", "1",
                     "--json"]) == 0, path
        assert json.loads(capsys.readouterr().out)["outputs"]["r"]["shape"] == [2, 3]
    assert main(["run", model_path, "-b", "reference", "-i", f"x={tmp_path / 'two.npz'}"]) != 0
    assert "holds arrays ['a', 'b'] and none is named 'x'" in capsys.readouterr().err


def test_folder_or_file_shadowing_the_package_is_named(tmp_path, capsys, monkeypatch):
    from rammer.cli import shadowing_paths

    (tmp_path / "rammer").mkdir()
    (tmp_path / "rammer.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert shadowing_paths() == [str(tmp_path / "rammer"), str(tmp_path / "rammer.py")]
    assert main(["backends"]) == 0
    err = capsys.readouterr().err
    assert f"the folder '{tmp_path / 'rammer'}' has the package's name" in err and "rename it" in err
    # A script run there really imports the shadow (a module file always wins over the installed
    # package), so the warning is not a false alarm.
    proc = subprocess.run([sys.executable, "-c", "import rammer; rammer.compile"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "AttributeError" in proc.stderr


def test_no_shadow_warning_in_an_ordinary_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["backends"]) == 0
    assert "package's name" not in capsys.readouterr().err


def test_tree_strategy_flag_reaches_the_ml_lowering(tmp_path, capsys):
    sklearn = pytest.importorskip("sklearn", reason="needs scikit-learn")
    pytest.importorskip("skl2onnx", reason="needs skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    X, y = load_iris(return_X_y=True)
    est = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(X, y)
    path = tmp_path / "rf.onnx"
    path.write_bytes(to_onnx(est, X[:1].astype("float32"), options={"zipmap": False}).SerializeToString())
    for strategy in ("gemm", "perfect_tree_traversal"):
        assert main(["run", str(path), "--backend", "reference", "--batch", "4", "--tree-strategy", strategy,
                     "--repeat", "1"]) == 0
    assert "output" in capsys.readouterr().out
    del sklearn
