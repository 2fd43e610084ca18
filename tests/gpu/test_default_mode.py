"""The execution mode a GPU backend picks when the caller names none: by the kind of device programs run
on (the table's ``default_modes``): a GPU keeps the persistent program (one launch per run); a CPU
OpenCL device such as PoCL's runs wave mode, since a persistent block waiting for another spins on a
core the working blocks need (docs/gpu.md; docs/benchmarks.md, s13-gpu).  The tests that check
persistent behaviour on PoCL (waits, signals, counters) name ``mode="persistent"`` themselves."""

from __future__ import annotations

import dataclasses

import numpy as np
from gpu_helpers import model, need_opencl, vi
from onnx import helper

import rammer
from rammer import plugins
from rammer.backends.cuda.device import TABLE as CUDA_TABLE
from rammer.backends.gpu.backend import GpuBackend
from rammer.backends.opencl.device import TABLE as OPENCL_TABLE


def _softmax_model():
    return model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
                 [vi("x", [32, 48])], [vi("y", [32, 48])])


def test_the_default_mode_follows_the_device_kind():
    for kind, mode in (("gpu", "persistent"), ("cpu", "wave"), ("accelerator", "persistent")):
        table = dataclasses.replace(OPENCL_TABLE, device_kind=lambda kind=kind: kind)
        assert table.default_mode() == mode, kind
        backend = GpuBackend(table)
        assert backend.capabilities.extra["default_mode"] == mode
        program = backend.program(rammer.load(_softmax_model()), {})
        assert program.mode == mode and program.report["mode"] == mode
        # naming a mode always wins over the default
        other = "wave" if mode == "persistent" else "persistent"
        assert backend.program(rammer.load(_softmax_model()), {"mode": other}).mode == other


def test_cuda_programs_stay_persistent_by_default():
    assert CUDA_TABLE.default_mode() == "persistent"
    program = GpuBackend(CUDA_TABLE).program(rammer.load(_softmax_model()), {})
    assert program.mode == "persistent" and program.launches == 1


def test_opencl_on_a_cpu_device_runs_wave_mode_by_default_and_persistent_when_named():
    need_opencl()
    backend = plugins.get_backend("opencl")
    want_mode = "wave" if backend.capabilities.device == "cpu" else "persistent"
    m = _softmax_model()
    feeds = {"x": np.random.default_rng(0).standard_normal((32, 48)).astype(np.float32)}
    want = rammer.compile(m, backend="reference").run(feeds)["y"]
    default = rammer.compile(m, backend="opencl")
    assert default.executable.report["mode"] == want_mode
    persistent = rammer.compile(m, backend="opencl", mode="persistent")
    assert persistent.executable.report["mode"] == "persistent"
    assert persistent.executable.report["launches_per_run"] == 1
    for compiled in (default, persistent, default, persistent):  # second runs: the next epoch / the same waves
        np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-4, atol=1e-6)
