"""Models exported by torch.onnx load as static graphs and match onnxruntime.

For each architecture in tests/torch_models.py (BERT, GPT-2, ResNet-18,
MobileNetV2, ViT, LSTM, bidirectional LSTM; small widths, random weights)
and each way torch writes ONNX:

* ``dynamo``: ``torch.onnx.export``'s default (the dynamo exporter, with its
  onnxscript optimizer), opset 18;
* ``dynamo-raw``: the same export before that optimizer ran: the shape
  arithmetic (Shape/Gather/Concat/Expand/CastLike, SplitToSequence...) is
  still there and rammer has to fold it;
* ``torchscript``: the older exporter (``dynamo=False``), opset 17;

``rammer.compile(path, backend="reference")`` must give a graph free of shape
computations whose outputs match onnxruntime's on the same inputs with

    max |rammer - ort| / max(1, |ort|)  <=  1e-4       (elementwise)

i.e. a relative error with an absolute floor of 1e-4 for values below 1.
Exports are cached for the session; the file takes ~30 s, mostly exporting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed; the torch.onnx export tests need it "
                                            '(pip install -e ".[torch]")')
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is needed to compare against")

import torch_models  # noqa: E402

import rammer  # noqa: E402

# slow: torch.onnx exports of whole models, then compiles of them (left out of the quick subset)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")]

TOLERANCE = 1e-4
#: Ops that compute shapes, or exist only to describe them; none may survive import.
SHAPE_OPS = {"Shape", "Size", "ConstantOfShape", "Range", "CastLike", "SplitToSequence", "SequenceAt",
             "SequenceConstruct", "ConcatFromSequence", "If", "Identity", "Constant"}
VARIANTS = ["dynamo", "dynamo-raw", "torchscript"]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(1, |want|), elementwise."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    return float(np.max(np.abs(got64 - want64) / np.maximum(1.0, np.abs(want64)))) if want.size else 0.0


class Exports:
    """Exports each (model, variant) once per session, into one temp folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.done: dict[tuple[str, str], tuple[Path, dict[str, np.ndarray]]] = {}

    def get(self, name: str, variant: str, dynamic: bool = False) -> tuple[Path, dict[str, np.ndarray]]:
        key = (name, variant + ("-dynamic" if dynamic else ""))
        if key not in self.done:
            self._export(name, variant, dynamic)
        return self.done[key]

    def _export(self, name: str, variant: str, dynamic: bool) -> None:
        tag = "-dynamic" if dynamic else ""
        if variant == "torchscript":
            path = self.folder / f"{name}-torchscript{tag}.onnx"
            try:
                feeds = torch_models.export_torchscript(name, str(path), dynamic=dynamic)
            except Exception as exc:  # the deprecated exporter may go away; the dynamo one must work
                pytest.skip(f"torch's TorchScript exporter failed on {name}: {type(exc).__name__}: {exc}")
            self.done[(name, f"torchscript{tag}")] = (path, feeds)
            return
        pytest.importorskip("onnxscript", reason="torch's dynamo exporter needs onnxscript")
        raw = self.folder / f"{name}-dynamo-raw{tag}.onnx"
        optimized = self.folder / f"{name}-dynamo{tag}.onnx"
        feeds = torch_models.export_dynamo(name, str(raw), str(optimized), dynamic=dynamic)
        self.done[(name, f"dynamo-raw{tag}")] = (raw, feeds)
        self.done[(name, f"dynamo{tag}")] = (optimized, feeds)


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Exports:
    return Exports(tmp_path_factory.mktemp("torch_onnx"))


def _compare(path: Path, feeds: dict[str, np.ndarray], compile_model: Callable[[], rammer.CompiledModel]) -> None:
    compiled = compile_model()
    graph = compiled.graph
    left = sorted(SHAPE_OPS & set(graph.op_counts()))
    assert not left, f"shape computations survived import: {left}"
    for node in graph.nodes:
        if node.op_type in ("Reshape", "Expand", "Tile", "Slice"):
            dynamic = [i for i in node.inputs[1:] if i and i not in graph.initializers]
            assert not dynamic, f"{node.label} takes its shape/indices from run-time tensors {dynamic}"
    got = compiled(feeds)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    assert [o.name for o in compiled.outputs] == [o.name for o in session.get_outputs()]
    for out, ref in zip(compiled.outputs, want):
        assert got[out.name].dtype == ref.dtype and got[out.name].shape == ref.shape, out.name
        error = relative_error(got[out.name], ref)
        assert error <= TOLERANCE, f"output '{out.name}': relative error {error:.3g} > {TOLERANCE}"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", list(torch_models.CASES))
def test_export_loads_static_and_matches_onnxruntime(exports: Exports, name: str, variant: str) -> None:
    path, feeds = exports.get(name, variant)
    _compare(path, feeds, lambda: rammer.compile(path, backend="reference"))


@pytest.mark.parametrize("name, variant", [("bert", "torchscript"), ("lstm", "torchscript"),
                                           ("gpt2", "dynamo-raw"), ("gpt2", "dynamo")])
def test_dynamic_export_binds_dims_from_input_shapes(exports: Exports, name: str, variant: str) -> None:
    path, feeds = exports.get(name, variant, dynamic=True)
    first = next(iter(feeds))
    with pytest.raises(rammer.errors.ShapeError, match=rf"'{first}' dim 0 \(\w+\)"):
        rammer.load(path)
    shapes = {k: v.shape for k, v in feeds.items()}
    _compare(path, feeds, lambda: rammer.compile(path, backend="reference", input_shapes=shapes))


def test_raw_dynamo_export_folds_to_the_optimized_size(exports: Exports) -> None:
    # The exporter's own optimizer and rammer's import fold the same shape arithmetic away.
    raw, _ = exports.get("bert", "dynamo-raw")
    optimized, _ = exports.get("bert", "dynamo")
    raw_graph, opt_graph = rammer.load(raw), rammer.load(optimized)
    assert len(onnx.load(str(raw)).graph.node) > 1.5 * len(raw_graph.nodes)
    assert len(raw_graph.nodes) <= len(opt_graph.nodes) + 4  # two extra Transposes per layer at most


def test_initializers_kept_as_inputs_are_constants(tmp_path: Path) -> None:
    # keep_initializers_as_inputs=True lists every weight among the graph inputs (as IR < 4 did).
    path = tmp_path / "resnet18-weights-as-inputs.onnx"
    try:
        feeds = torch_models.export_torchscript("resnet18", str(path), initializers_as_inputs=True)
    except Exception as exc:
        pytest.skip(f"torch's TorchScript exporter failed: {type(exc).__name__}: {exc}")
    assert len(onnx.load(str(path)).graph.input) > len(feeds)
    _compare(path, feeds, lambda: rammer.compile(path, backend="reference"))
