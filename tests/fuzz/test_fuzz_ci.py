"""A bounded differential-fuzzing run in CI: fixed seeds, every backend that runs here against reference.

The long run is ``python ci/fuzz.py --minutes 60`` (docs/reliability.md).  Cases that still fail are
listed in tests/known_failures/fuzz_<backend>.txt, which only shrinks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rammer.fuzzing.campaign import build_case, run_campaign
from rammer.fuzzing.graphs import random_model
from rammer.fuzzing.mutate import mutate
from rammer.fuzzing.oracle import FAILURES, run_case

KNOWN_DIR = Path(__file__).resolve().parent.parent / "known_failures"
#: Fixed seeds: a different range from the long runs' default start, so CI adds coverage.
GRAPH_SEEDS = range(900_000, 901_500)
MUTANT_SEEDS = range(900_000, 901_000)
#: The backends fuzzed here and how many of the seeds each gets.  cpu and cpu-op-by-op take the
#: whole ranges; ipu runs on its simulator and opencl on PoCL's CPU device, smaller ranges (they
#: answer ops they do not compile with UnsupportedOpError: "unsupported", not a finding).  cuda and
#: rocm need a GPU; mcu computes int8 approximations of the float model by design (its own accuracy
#: tests check it, docs/reliability.md).
BACKENDS = {"cpu": 1.0, "cpu-op-by-op": 1.0, "ipu": 0.2, "opencl": 0.2}


def _known(backend: str) -> set[str]:
    path = KNOWN_DIR / f"fuzz_{backend}.txt"
    if not path.exists():
        return set()
    lines = [ln.split("#")[0].strip() for ln in path.read_text().splitlines()]
    return {ln.split()[0] for ln in lines if ln}


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("campaign,seeds", [("graphs", GRAPH_SEEDS), ("mutants", MUTANT_SEEDS)])
def test_bounded_fuzz_run(backend, campaign, seeds, tmp_path):
    from rammer import plugins

    be = plugins.get_backend(backend)
    available = be.availability()
    if not available.ok:
        pytest.skip(f"backend {backend} does not run here: {available.reason}")
    seeds = seeds[:int(len(seeds) * BACKENDS[backend])]
    known_file = KNOWN_DIR / f"fuzz_{backend}.txt"
    res = run_campaign(backend, campaign, seeds, workers=2, timeout_s=120, cache_dir=str(tmp_path / "cache"))
    assert res.cases == len(seeds)
    assert res.counts.get("skipped", 0) <= len(seeds) // 50  # the generator works
    failing = {f"{campaign}:{f['seed']}": f for f in res.findings}
    known = {k for k in _known(backend) if k.startswith(campaign + ":") and int(k.split(":")[1]) in seeds}
    new = {k: v for k, v in failing.items() if k not in known}
    replay = f"python ci/fuzz.py --replay CASE --backends {backend}"
    assert not new, f"new fuzz findings on {backend} ({replay}):\n" + "\n".join(
        f"{k}: {v['kind']}: {v['detail'][:300]}" for k, v in sorted(new.items()))
    fixed = known - set(failing)
    assert not fixed, f"listed as failing but now pass (remove them from {known_file.name}): {sorted(fixed)}"
    if be.capabilities.reference_fallback:
        assert res.counts.get("unsupported", 0) == 0  # it falls back: it never refuses an op
        if campaign == "graphs":
            assert res.counts["ok"] >= len(seeds) * 0.95
    elif campaign == "graphs":
        assert res.counts.get("ok", 0) >= len(seeds) * 0.1  # it compiles a share of what the generator makes


def test_cases_are_determined_by_their_seed():
    a, fa, _ = build_case("graphs", 12345)
    b, fb, _ = build_case("graphs", 12345)
    assert a == b and fa.keys() == fb.keys() and all((fa[k] == fb[k]).all() for k in fa)
    model, _ = random_model(7)
    assert mutate(model, 3) == mutate(model, 3)


def test_the_oracle_catches_a_wrong_backend(monkeypatch):
    """A backend whose results are off must be reported as wrong (the oracle is not vacuous)."""
    import numpy as np

    import rammer
    from rammer import api

    data, feeds, _ = build_case("graphs", 42)
    real_run = api.CompiledModel.run

    def off_by_a_bit(self, feeds_, outputs=None):
        out = real_run(self, feeds_, outputs)
        if self.backend.name == "cpu":
            out = {k: v + np.asarray(0.01, v.dtype) if v.dtype.kind == "f" else v for k, v in out.items()}
        return out

    monkeypatch.setattr(api.CompiledModel, "run", off_by_a_bit)
    assert run_case(data, feeds, "cpu").kind == "wrong"
    del rammer


def test_the_oracle_flags_raw_exceptions(monkeypatch):
    from rammer.backends.cpu import device

    data, feeds, _ = build_case("graphs", 43)

    def boom(self, *args, **kwargs):
        raise KeyError("deep inside")

    # a model given as bytes compiles through compile_keyed (the keyed compile cache), a graph through compile
    monkeypatch.setattr(device.CpuBackend, "compile", boom)
    monkeypatch.setattr(device.CpuBackend, "compile_keyed", boom)
    out = run_case(data, feeds, "cpu")
    # rammer.compile wraps a backend's internal error in a CompileError that only relays it: a finding
    assert out.kind == "vague-error" and "KeyError" in out.detail
    assert "vague-error" in FAILURES


def test_the_oracle_judges_errors_of_models_with_undecodable_names():
    """A mutant's damaged name decodes as bytes; judging the error about it must not crash the oracle."""
    from onnx import TensorProto, helper

    from rammer.errors import ModelLoadError
    from rammer.fuzzing.oracle import _judge_error, _names

    node = helper.make_node("Relu", ["xx"], ["yy"], name="NODEQQ")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("xx", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("yy", TensorProto.FLOAT, [2])])
    data = helper.make_model(graph).SerializeToString().replace(b"NODEQQ", b"NO\xff\xfeQQ")
    assert _names(data) == {"Relu", "xx", "yy"}
    assert _judge_error(ModelLoadError("tensor 'yy' is bad"), data) is None
    assert _judge_error(ModelLoadError("something is bad"), data).kind == "vague-error"


def test_a_case_past_its_limit_is_rerun_once_in_a_fresh_worker_before_it_is_a_hang(tmp_path):
    """Load can push one case past its limit: a hang is a case that runs past it twice, in two workers.

    The stand-in oracle (fuzz_doubles.py) never answers the first run of one case (its retry answers) and
    never answers any run of another."""
    import json

    import fuzz_doubles

    seeds = [11, 12, 13]
    plan = {fuzz_doubles.model_key(build_case("graphs", 11)[0]): "hang-once",
            fuzz_doubles.model_key(build_case("graphs", 12)[0]): "hang"}
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "plan.json").write_text(json.dumps(plan))
    log = tmp_path / "log.jsonl"
    with open(log, "w", encoding="utf-8") as f:
        res = run_campaign("reference", "graphs", seeds, workers=1, timeout_s=1, first_timeout_s=1,
                           cache_dir=str(cache), log=f, case_runner=fuzz_doubles.run_case_as_planned)
    assert res.cases == 3
    assert dict(res.counts) == {"ok": 2, "hang": 1}
    assert res.retried >= 2  # both planned cases; a loaded machine may add a retry of case 13
    (hang,) = res.findings
    assert hang["seed"] == 12 and "retry in a fresh worker" in hang["detail"]
    records = {r["seed"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert records[11]["kind"] == "ok" and records[11]["retried_after_s"] >= 1
