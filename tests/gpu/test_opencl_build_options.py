"""The OpenCL build options: PoCL's CPU device builds a program with little work without its
optimiser (a first launch of seconds, not a minute) and one with much work per rKernel with it (a
full-size model runs about 10x faster), other devices with their driver's defaults, and the
environment variable overrides both."""

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


def _program(flops: float, rtasks: int, kernels: int) -> SimpleNamespace:
    op = SimpleNamespace(kernel=SimpleNamespace(flops=flops / rtasks, num_rtasks=rtasks))
    return SimpleNamespace(schedule=SimpleNamespace(ops=[op]), report={"kernels": [f"k{i}" for i in range(kernels)]})


def test_pocl_optimises_a_program_whose_unoptimised_run_would_cost_more_than_half_the_build(monkeypatch):
    monkeypatch.delenv("RAMMER_OPENCL_BUILD_OPTIONS", raising=False)
    # ResNet-18 at 224 px and MobileViT at 256 px (4.0 and 1.0 GFLOP, 14,313 and 87,916 rTasks, 7 and 12
    # rKernels) ran 34 s and 22 s unoptimised: optimised.  resnet18-ci (0.02 GFLOP, 420 rTasks) is not.
    assert build_options(POCL, _program(3.96e9, 14313, 7)) == ""
    assert build_options(POCL, _program(1.02e9, 87916, 12)) == ""
    assert build_options(POCL, _program(0.02e9, 420, 7)) == POCL_BUILD_OPTIONS
    assert build_options(POCL, _program(0.0, 1, 0)) == POCL_BUILD_OPTIONS
    assert build_options(GPU, _program(3.96e9, 14313, 7)) == ""
    monkeypatch.setenv("RAMMER_OPENCL_BUILD_OPTIONS", "-cl-opt-disable")
    assert build_options(POCL, _program(3.96e9, 14313, 7)) == "-cl-opt-disable"
