from __future__ import annotations

import numpy as np
import pytest

import rammer
from rammer import zoo

from .graphs import GRAPHS

SMALL_ZOO = [e.name for e in zoo.list_models() if e.name.endswith("-small")]


def _feeds(compiled, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.dtype(t.dtype)) for t in compiled.graph.inputs}


def _max_rel(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]) / (np.abs(b[k]) + 1e-6), initial=0.0)) for k in b)


def _check(model, **options) -> None:
    ipu = rammer.compile(model, backend="ipu", **options)
    ref = rammer.compile(model, backend="reference")
    feeds = _feeds(ipu)
    got, want = ipu.run(feeds), ref.run(feeds)
    assert _max_rel(got, want) < 1e-4
    report = ipu.executable.report()
    assert report["engine"] == "simulator" and report["simulated"]
    assert report["supersteps"] >= 1 and report["latency_us"] > 0
    assert report["tile_peak_bytes"] <= report["tile_sram_bytes"]


def test_small_zoo_models_are_listed() -> None:
    assert len(SMALL_ZOO) >= 5


@pytest.mark.parametrize("name", SMALL_ZOO)
def test_small_zoo_model_matches_reference(name: str) -> None:
    _check(zoo.build(name))


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("mode", ["merged", "compute-set"])
def test_torch_like_graph_matches_reference(name: str, mode: str) -> None:
    _check(GRAPHS[name](), mode=mode)


@pytest.mark.parametrize("policy", ["wavefront", "op-by-op"])
@pytest.mark.parametrize("mode", ["merged", "compute-set"])
def test_policies_and_modes_on_gc2(policy: str, mode: str) -> None:
    _check(zoo.build("alexnet-small"), policy=policy, mode=mode, vdevice="gc2")


@pytest.mark.parametrize("name", ["lstm-tc-small", "seq2seq-small", "deepspeech2-small", "resnext-small"])
def test_merging_never_adds_supersteps_or_latency(name: str) -> None:
    model = zoo.build(name)
    merged = rammer.compile(model, backend="ipu", mode="merged").executable.program
    waves = rammer.compile(model, backend="ipu", mode="compute-set").executable.program
    assert merged.num_supersteps <= waves.num_supersteps
    assert merged.latency_us <= waves.latency_us + 1e-9
    assert merged.exchange_bytes == waves.exchange_bytes  # same placement: only the supersteps differ


def test_merging_waves_joins_only_waves_without_exchange_between_them() -> None:
    from rammer.backends.ipu.codegen import _merge_waves

    boxes = np.zeros((1, 1, 2), dtype=np.int64)
    # rTask r runs in wave r; rTask 2 reads (remotely) a slice that rTask 1 wrote.
    wave = np.array([0, 1, 2, 3])
    arrays = {"t": (boxes, np.array([0]), np.array([1]))}
    remote = {"t": [(np.array([2]), np.array([1]), np.array([0]), boxes)]}
    assert _merge_waves(wave, remote, arrays).tolist() == [0, 0, 1, 1]
    assert _merge_waves(wave, {}, arrays).tolist() == [0, 0, 0, 0]
