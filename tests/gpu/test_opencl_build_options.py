"""The OpenCL build options: PoCL's CPU device builds without its optimiser (a first launch of
seconds, not a minute), other devices with their driver's defaults, and the environment variable
overrides both."""

from __future__ import annotations

from types import SimpleNamespace

from rammer.backends.opencl.runtime import POCL_BUILD_OPTIONS, build_options

POCL = SimpleNamespace(type=2, platform=SimpleNamespace(name="Portable Computing Language"))
GPU = SimpleNamespace(type=4, platform=SimpleNamespace(name="NVIDIA CUDA"))


def test_pocl_cpu_builds_unoptimised_and_other_devices_with_defaults(monkeypatch):
    monkeypatch.delenv("RAMMER_OPENCL_BUILD_OPTIONS", raising=False)
    assert build_options(POCL) == POCL_BUILD_OPTIONS == "-cl-opt-disable"
    assert build_options(GPU) == ""


def test_the_environment_overrides_the_default(monkeypatch):
    monkeypatch.setenv("RAMMER_OPENCL_BUILD_OPTIONS", "")
    assert build_options(POCL) == ""
    monkeypatch.setenv("RAMMER_OPENCL_BUILD_OPTIONS", "-cl-fast-relaxed-math")
    assert build_options(GPU) == "-cl-fast-relaxed-math"
