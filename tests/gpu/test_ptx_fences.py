"""The fence before the signal's atomic and after the wait, checked in the PTX nvcc makes of the
persistent kernel (the CPU emulation cannot see memory ordering: x86 is TSO)."""

from __future__ import annotations

import shutil

import pytest

from rammer import plugins, zoo
from rammer.backends.cuda.ptx_check import ptx_of, signal_fence_problems
from rammer.frontend import load

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) for the PTX")


@pytest.fixture(scope="module")
def source() -> str:
    exe = plugins.backends()["cuda"].compile(load(zoo.build("alexnet-small", seed=0)), {})
    return exe.source


def test_the_signal_follows_a_fence_and_the_wait_precedes_one(source):
    ptx = ptx_of(source, "sm_90")
    assert "atom.global.add" in ptx
    assert signal_fence_problems(ptx) == []


def test_a_missing_fence_before_the_signal_is_found(source):
    fence_then_signal = "__threadfence();\n                (void)atomicAdd(&counters"
    assert fence_then_signal in source
    broken = source.replace(fence_then_signal, "(void)atomicAdd(&counters")
    problems = signal_fence_problems(ptx_of(broken, "sm_90"))
    assert len(problems) == 1 and "no membar.gl/fence before it" in problems[0]


def test_a_missing_fence_after_the_wait_is_found(source):
    i = source.rindex("__threadfence();")  # the one after the wait loop
    broken = source[:i] + source[i + len("__threadfence();"):]
    problems = signal_fence_problems(ptx_of(broken, "sm_90"))
    assert any("not followed by a fence" in p for p in problems), problems
