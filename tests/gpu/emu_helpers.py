"""What the CUDA-emulation tests share: the stand-in ``cupy`` installed for one test, models
compiled for cuda/rocm and run through the real CuPy runner on the emulator, checked against
``reference``."""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np
import pytest

import rammer
from rammer import zoo
from rammer.backends.gpu.emulation import Policy, available
from rammer.backends.gpu.emulation.fake_cupy import make_cupy

SMALL_ZOO = [e.name for e in zoo.list_models() if e.name.endswith("-small")]


def need_gxx() -> None:
    why = available()
    if why:
        pytest.skip(f"needs g++ for the CUDA emulator: {why}")


def install_fake_cupy(monkeypatch: pytest.MonkeyPatch, **device: Any):
    """Put a stand-in ``cupy`` (over the CPU emulator) in ``sys.modules`` for this test."""
    need_gxx()
    fake = make_cupy(**device)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


@functools.cache
def zoo_model(name: str):
    return zoo.build(name, seed=0)


@functools.cache
def reference(name: str, seed: int) -> tuple[dict, dict]:
    compiled = rammer.compile(zoo_model(name), backend="reference")
    feeds = compiled.random_feeds(seed=seed)
    return feeds, compiled.run(feeds)


def compile_for(name: str, backend: str = "cuda", mode: str = "persistent"):
    return rammer.compile(zoo_model(name), backend=backend, mode=mode)


def max_rel_err(got: dict, want: dict) -> float:
    return max(float(np.max(np.abs(got[k] - want[k])) / (float(np.max(np.abs(want[k]))) + 1e-12)) for k in want)


def matches(got: dict, want: dict, rtol: float = 1e-4) -> bool:
    return all(got[k].shape == want[k].shape and np.allclose(got[k], want[k], rtol=rtol, atol=1e-5) for k in want)


def run_checked(compiled, name: str, seeds=(1, 2)) -> None:
    """Run ``compiled`` once per seed (fresh feeds each time) and compare with reference."""
    for seed in seeds:
        feeds, want = reference(name, seed)
        got = compiled.run(feeds)
        assert matches(got, want), f"{name}: max relative error {max_rel_err(got, want):.3g}"


def with_policy(fake, policy: Policy) -> None:
    fake.policy = policy
