"""Fixtures for the GPU rKernel tests: an OpenCL context on a device that builds programs (PoCL on
machines without a GPU) and an nvcc/ptxas resource reader."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from rammer.time_limits import scaled_limit


class CL:
    """A pyopencl context with helpers to launch one rendered kernel."""

    def __init__(self, cl, ctx) -> None:
        self.cl, self.ctx, self.queue = cl, ctx, cl.CommandQueue(ctx)

    def build(self, source: str):
        return self.cl.Program(self.ctx, source).build()

    def buffer(self, array: np.ndarray):
        mf = self.cl.mem_flags
        return self.cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(array))

    def output(self, shape, dtype=np.float32):
        out = np.zeros(shape, dtype)
        return out, self.buffer(out)

    def read(self, out: np.ndarray, buf) -> np.ndarray:
        self.cl.enqueue_copy(self.queue, out, buf)
        self.queue.finish()
        return out


@pytest.fixture(scope="session")
def opencl() -> CL:
    cl = pytest.importorskip("pyopencl", reason="needs pyopencl and PoCL (pip install pyopencl "
                                               "pocl-binary-distribution)")
    try:
        platforms = cl.get_platforms()
    except cl.LogicError:
        pytest.skip("no OpenCL platform (pip install pocl-binary-distribution)")
    for device in (d for p in platforms for d in p.get_devices()):
        ctx = cl.Context([device])
        try:
            cl.Program(ctx, "__kernel void probe(__global float *x) { x[0] = 1.0f; }").build()
        except cl.RuntimeError:
            continue
        return CL(cl, ctx)
    pytest.skip("no OpenCL device builds programs here (install PoCL: pip install pocl-binary-distribution)")


@pytest.fixture
def ptxas_usage():
    """``usage(arch, source, tmp_path)``: registers and static shared memory per kernel, as
    ``nvcc --ptxas-options=-v`` reports them (skips without nvcc)."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc (CUDA toolkit)")
    return _ptxas_usage


def _ptxas_usage(arch: str, source: str, tmp_path) -> dict[str, dict[str, int]]:
    src = tmp_path / f"k_{arch}.cu"
    src.write_text(source)
    out = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "--ptxas-options=-v", str(src), "-o",
                          str(tmp_path / f"k_{arch}.cubin")], capture_output=True, text=True, timeout=scaled_limit(300))
    assert out.returncode == 0, out.stderr[-3000:]
    usage: dict[str, dict[str, int]] = {}
    current = None
    for line in out.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1)
            usage[current] = {}
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            usage[current]["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            usage[current]["smem"] = int(s.group(1)) if s else 0
    return usage
