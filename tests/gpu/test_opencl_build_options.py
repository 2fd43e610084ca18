"""The OpenCL build options: PoCL's CPU device builds a program with little work without its
optimiser (a first launch of seconds, not a minute) and one with much work per rKernel with it (a
full-size model runs about 10x faster), other devices with their driver's defaults, and the
environment variable overrides both."""

from __future__ import annotations

from types import SimpleNamespace

from rammer.backends.opencl.runtime import POCL_BUILD_OPTIONS, POCL_OPTIMISE_FLOPS_PER_KERNEL, build_options

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


def _program(flops_per_op: float, ops: int, kernels: int) -> SimpleNamespace:
    op = SimpleNamespace(kernel=SimpleNamespace(flops=flops_per_op / 4, num_rtasks=4))
    return SimpleNamespace(schedule=SimpleNamespace(ops=[op] * ops), report={"kernels": [f"k{i}" for i in range(kernels)]})


def test_pocl_optimises_a_program_with_much_work_per_rkernel(monkeypatch):
    monkeypatch.delenv("RAMMER_OPENCL_BUILD_OPTIONS", raising=False)
    limit = POCL_OPTIMISE_FLOPS_PER_KERNEL
    assert build_options(POCL, _program(limit, ops=3, kernels=2)) == ""  # 1.5x the limit per rKernel
    assert build_options(POCL, _program(limit, ops=3, kernels=4)) == POCL_BUILD_OPTIONS  # 0.75x
    assert build_options(POCL, _program(0.0, ops=0, kernels=0)) == POCL_BUILD_OPTIONS
    assert build_options(GPU, _program(0.0, ops=1, kernels=1)) == ""
    monkeypatch.setenv("RAMMER_OPENCL_BUILD_OPTIONS", "-cl-opt-disable")
    assert build_options(POCL, _program(limit, ops=30, kernels=1)) == "-cl-opt-disable"
