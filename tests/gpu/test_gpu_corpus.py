"""The corpus (ci/corpus/, "ci" size) on the GPU backends: which models compile (the lowering that
opencl, cuda and rocm share), against a checked-in list that only shrinks, and the models whose
integer position ids, CumSum, GatherElements or attention masks once kept them off the GPU, run on
opencl (PoCL) and on the CUDA-semantics emulator against reference.

With ``FAMILY_MODELS`` below, every corpus family has at least one model run on both targets in CI.
The whole corpus run (all 52 models on both; about 4.5 minutes of CPU, too long for CI's budget) is
``python ci/gpu_coverage.py --corpus --run opencl,emulator`` (docs/benchmarks.md has its table)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import rammer
from rammer import plugins
from rammer.errors import RammerError
from rammer.ml import lower_ml
from rammer.ml.strategy import compiles_tree_kernel

ROOT = Path(__file__).resolve().parents[2]
KNOWN = ROOT / "tests" / "known_failures" / "corpus_opencl.txt"
if str(ROOT / "ci") not in sys.path:
    sys.path.insert(0, str(ROOT / "ci"))

pytest.importorskip("torch", reason="the corpus is exported from torch (pip install -e '.[torch]')")
pytest.importorskip("transformers", reason="the corpus's transformers are built from transformers configs")
pytest.importorskip("skl2onnx", reason="the corpus's traditional-ML models come from skl2onnx")

import corpus  # noqa: E402
import gpu_coverage  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning",
                                        "ignore::DeprecationWarning")


def _known() -> dict[str, str]:
    out = {}
    for line in KNOWN.read_text().splitlines():
        name, _, reason = line.partition("#")
        if name.strip():
            out[name.strip()] = reason.strip()
    return out


def _refusal(entry: corpus.Entry) -> str | None:
    """Why the GPU backends refuse the entry's ci-size model (the first node's reason), or None."""
    built = corpus.build(entry, "ci")
    be = plugins.get_backend("opencl", compile_only=True)
    try:
        # ai.onnx.ml nodes become tensor ops first, as rammer.compile does for every backend
        graph = lower_ml(rammer.load(built.onnx, {k: v.shape for k, v in built.feeds.items()}),
                         device=be.capabilities.device, tree_kernel=compiles_tree_kernel(be.capabilities))
        bad = be.unsupported_nodes(graph)
    except RammerError as exc:
        return str(exc)
    if not bad:
        return None
    from rammer.backends.gpu.compiler import unsupported

    return unsupported(be.prepare_graph(graph).graph)[0][1]


def test_known_failures_name_corpus_entries():
    assert not set(_known()) - set(corpus.ENTRIES)


@pytest.mark.slow
def test_every_corpus_model_compiles_for_the_gpu_backends_except_the_listed():
    known = _known()
    refused = {name: _refusal(entry) for name, entry in corpus.ENTRIES.items()}
    new = {name: why for name, why in refused.items() if why and name not in known}
    fixed = sorted(name for name in known if not refused.get(name))
    assert not new, f"corpus models the GPU backends no longer compile: {new}"
    assert not fixed, f"now compile on the GPU backends; remove them from {KNOWN.name}: {fixed}"


#: Models that compiled for the first time with integer programs, CumSum and GatherElements
#: (roberta, mpnet, opt, deberta) and gpt2, whose masked attention row gave NaN.
NEWLY_RUN = ["roberta", "mpnet", "opt", "deberta", "gpt2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NEWLY_RUN)
def test_newly_covered_corpus_models_run_on_opencl_against_reference(name):
    if not plugins.get_backend("opencl").availability().ok:
        pytest.skip("needs an OpenCL device (PoCL here: apt-get install pocl-opencl-icd)")
    built = corpus.build(corpus.ENTRIES[name], "ci")
    feeds = dict(built.feeds)
    if "attention_mask" in feeds:  # a mask whose first position is 0: a fully masked attention row
        mask = np.array(feeds["attention_mask"])
        mask[..., 0] = 0
        feeds["attention_mask"] = mask
    line = gpu_coverage.run_model(name, built.onnx, feeds, "opencl")
    assert " ok " in line, line


@pytest.mark.slow
@pytest.mark.parametrize("name", ["roberta", "gpt2"])
def test_newly_covered_corpus_models_run_on_the_cuda_emulator(name):
    from rammer.backends.gpu.emulation import available

    if available():
        pytest.skip(f"needs g++ for the CUDA emulator: {available()}")
    built = corpus.build(corpus.ENTRIES[name], "ci")
    line = gpu_coverage.run_model(name, built.onnx, built.feeds, "emulator")
    assert " ok " in line, line


def _runs_against_reference(name: str, target: str) -> None:
    """The ci-size corpus model ``name`` matches reference on ``target`` (opencl or the CUDA
    emulator), or the test skips naming what the target needs."""
    if target == "opencl" and not plugins.get_backend("opencl").availability().ok:
        pytest.skip("needs an OpenCL device (PoCL here: apt-get install pocl-opencl-icd)")
    if target == "emulator":
        from rammer.backends.gpu.emulation import available

        if available():
            pytest.skip(f"needs g++ for the CUDA emulator: {available()}")
    built = corpus.build(corpus.ENTRIES[name], "ci")
    line = gpu_coverage.run_model(name, built.onnx, built.feeds, target)
    assert " ok " in line, line


#: The traditional-ML models (ai.onnx.ml trees, scaler, normalizer, linear classifier, each with an
#: int64 label output) run on the GPU through the core's ML lowering (rammer.ml) and integer outputs;
#: the QOperator model through the QLinearConv rKernel.
ML_MODELS = ["gradient-boosting", "random-forest", "random-forest-rows8", "scaler-linear", "mobilenet-v2-int8-qop"]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["opencl", "emulator"])
@pytest.mark.parametrize("name", ML_MODELS)
def test_ml_and_qoperator_corpus_models_run_against_reference(name, target):
    _runs_against_reference(name, target)


#: One model of each corpus family that the tests above do not run, on both targets: with them,
#: every family runs in CI on opencl and on the CUDA emulator (the cheapest of each family in
#: the whole-corpus run; all 52 models on both targets: ``python ci/gpu_coverage.py --corpus --run
#: opencl,emulator``, about 4.5 minutes of CPU, docs/benchmarks.md).
FAMILY_MODELS = {"cnn": "densenet", "detection": "yolo-det", "rnn": "lstm-lm", "speech": "whisper-encoder",
                 "vision-transformer": "deit"}


def test_every_corpus_family_runs_in_ci_on_both_targets():
    on_both = set(FAMILY_MODELS.values()) | set(ML_MODELS) | {"roberta", "gpt2"}
    families = {entry.family for entry in corpus.ENTRIES.values()}
    covered = {corpus.ENTRIES[name].family for name in on_both}
    assert families <= covered, f"corpus families no test runs on the GPU targets: {sorted(families - covered)}"
    assert all(corpus.ENTRIES[name].family == family for family, name in FAMILY_MODELS.items())


@pytest.mark.slow
@pytest.mark.parametrize("target", ["opencl", "emulator"])
@pytest.mark.parametrize("name", sorted(FAMILY_MODELS.values()))
def test_one_corpus_model_per_family_runs_against_reference(name, target):
    _runs_against_reference(name, target)
