"""The corpus (ci/corpus/: 40+ architectures in 9 families, built in code) compiles on ``cpu`` and on
``reference`` and matches onnxruntime, at the reduced "ci" size.

Models that do not yet compile, mismatch, or leave nodes to numpy on a backend are listed in
tests/known_failures/corpus_<backend>.txt with the reason; that list only shrinks: the test fails when a
model not listed fails (a regression) and when a listed one passes (remove it from the list).  The
timed full-size run is ``python ci/corpus_bench.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KNOWN_DIR = Path(__file__).resolve().parent / "known_failures"
if str(ROOT / "ci") not in sys.path:
    sys.path.insert(0, str(ROOT / "ci"))

pytest.importorskip("torch", reason="the corpus is exported from torch (pip install -e '.[torch]')")
pytest.importorskip("transformers", reason="the corpus's transformers are built from transformers configs")
pytest.importorskip("onnxruntime", reason="the corpus is checked against onnxruntime")
pytest.importorskip("skl2onnx", reason="the corpus's traditional-ML models come from skl2onnx")

import corpus  # noqa: E402
import corpus_bench  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning",
                                        "ignore::DeprecationWarning")

#: The issue's minimum count of distinct architectures per family (batch-8 variants not counted).
MINIMUM = {"encoder": 6, "decoder": 4, "speech": 3, "vision-transformer": 5, "cnn": 12, "detection": 4, "rnn": 3,
           "quantized": 3, "traditional-ml": 3}


def known(backend: str) -> dict[str, str]:
    """``name -> reason`` from tests/known_failures/corpus_<backend>.txt (``name  # reason`` lines)."""
    path = KNOWN_DIR / f"corpus_{backend}.txt"
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, reason = line.partition("#")
            if name.strip():
                out[name.strip()] = reason.strip()
    return out


def _architectures() -> list[corpus.Entry]:
    return [e for e in corpus.ENTRIES.values() if e.batch != 8]


def test_the_corpus_has_the_families_and_counts_the_issue_asks_for():
    counts = Counter(e.family for e in _architectures())
    assert sum(counts.values()) >= 40
    for family, minimum in MINIMUM.items():
        assert counts[family] >= minimum, (family, counts[family])
    variants = {e.family for e in corpus.ENTRIES.values() if e.batch == 8}
    assert variants == set(corpus.FAMILIES), set(corpus.FAMILIES) - variants  # a batch-8 variant per family


def test_known_failure_lists_name_corpus_entries():
    for backend in ("cpu", "reference"):
        stray = set(known(backend)) - set(corpus.ENTRIES)
        assert not stray, f"corpus_{backend}.txt names models the corpus lacks: {sorted(stray)}"


def test_the_build_cache_is_keyed_by_the_definition(tmp_path):
    e = corpus.ENTRIES["scaler-linear"]
    first = corpus.build(e, "ci", str(tmp_path))
    assert len(list(tmp_path.glob("*.onnx"))) == 1
    again = corpus.build(e, "ci", str(tmp_path))
    assert again.onnx == first.onnx and len(list(tmp_path.glob("*.onnx"))) == 1  # from the cache
    assert e.cache_key("ci") != e.cache_key("full")
    other = corpus.Entry(e.name, e.family, e.kind, e.builder, batch=8, params=e.params)
    assert other.cache_key("ci") != e.cache_key("ci")


def test_the_comparison_rejects_wrong_outputs():
    import numpy as np

    e = corpus.ENTRIES["bert"]
    want = {"y": np.linspace(-3, 3, 100, dtype=np.float32)}
    assert corpus_bench.compare(e, {"y": want["y"].copy()}, want)[0]
    assert not corpus_bench.compare(e, {"y": want["y"] + 0.01}, want)[0]
    q = corpus.ENTRIES["resnet18-int8-qdq"]
    step = 6 / 255
    assert corpus_bench.compare(q, {"y": want["y"] + 2 * step}, want)[0]  # within the int8 rounding allowed
    assert not corpus_bench.compare(q, {"y": want["y"] + 20 * step}, want)[0]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("name", list(corpus.ENTRIES))
def test_corpus_model_matches_onnxruntime(name, backend):
    entry = corpus.ENTRIES[name]
    result = corpus_bench.check_one(entry, "ci", backend, threads=2)
    if result["status"] == "ok" and result["fallbacks"] and backend == "cpu":
        result = {**result, "status": "fallback", "detail": "; ".join(result["fallbacks"][:5])}
    listed = known(backend)
    where = f"tests/known_failures/corpus_{backend}.txt"
    if name in listed:
        assert result["status"] != "ok", f"{name} now passes on {backend}: remove it from {where}"
        return
    assert result["status"] == "ok", (f"{name} on {backend}: {result['status']}: {result.get('detail')} "
                                      f"(rerun: python ci/corpus_bench.py --check --size ci --models {name})")
