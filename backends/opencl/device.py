"""The opencl backend's table: dialect, presets, availability and the OpenCL device it runs on.

The device is the first OpenCL device that builds a probe program (PoCL's CPU device on machines
without a GPU) whose "platform device" name contains ``$RAMMER_OPENCL_DEVICE``
(any, when unset).  A persistent program's blocks spin on each other's counters, so they must all be
resident at once: the schedule gets as many vEUs as the device has compute units, never more.  On a CPU device the
default mode is ``wave`` (the table's ``default_modes`` by ``device_kind``): a waiting block would spin
on a core the working blocks need.
PoCL (3.1, Debian's ``pocl-opencl-icd``) runs one work-group per thread of its pool and reports one
compute unit per pool thread: one per core unless ``POCL_MAX_PTHREAD_COUNT`` raises it (set before
the process first touches OpenCL); more blocks than pool threads would spin forever.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from rammer.backend import Availability
from rammer.backends.gpu.backend import DeviceTable, GpuBackend
from rammer.backends.gpu.compiler import GpuProgram
from rammer.vdevice import VDevice

from .kernels import DIALECT

__all__ = ["make_backend", "opencl_device", "TABLE"]


@functools.lru_cache(maxsize=1)
def opencl_device() -> tuple[Any, Any, str]:
    """``(pyopencl, device, "")``, or ``(None, None, why not)``."""
    try:
        import pyopencl as cl
    except ImportError as exc:
        return None, None, f"pyopencl is not installed ({exc}; pip install pyopencl)"
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except Exception as exc:  # no ICD loader, no platform
        return None, None, f"no OpenCL platform ({type(exc).__name__}: {exc}); install a driver or PoCL"
    want = os.environ.get("RAMMER_OPENCL_DEVICE", "").lower()
    devices = [d for d in devices if want in f"{d.platform.name} {d.name}".lower()]
    for device in devices:
        try:
            ctx = cl.Context([device])
            cl.Program(ctx, "__kernel void probe(__global float *x) { x[0] = 1.0f; }").build()
        except Exception:
            continue
        return cl, device, ""
    return None, None, "no OpenCL device builds programs here (install PoCL: apt-get install pocl-opencl-icd)"


def _availability() -> Availability:
    cl, device, why = opencl_device()
    if cl is None:
        return Availability(False, why)
    return Availability(True, f"{device.name.strip()} ({device.platform.name.strip()}, "
                              f"{device.max_compute_units} compute units)")


def _fit(vd: VDevice) -> VDevice:
    cl, device, _ = opencl_device()
    if cl is None or device.max_compute_units >= vd.num_veus:
        return vd
    return vd.with_veus(device.max_compute_units)


def _device_kind() -> str:
    cl, device, _ = opencl_device()
    if cl is None:
        return "gpu"
    return "gpu" if device.type & cl.device_type.GPU else "cpu"


def _executable(program: GpuProgram, options: Mapping[str, Any]) -> Any:
    from .runtime import OpenCLExecutable

    return OpenCLExecutable(program)


TABLE = DeviceTable(
    name="opencl", dialect=DIALECT, language="opencl", compiler=None, presets=("v100", "a100", "h100", "mi250x"),
    description="OpenCL via pyopencl: the whole model as one kernel, launched once per run on a GPU (persistent) "
                "and once per wave on a CPU device such as PoCL's (wave)",
    availability=_availability, executable=_executable, fit_vdevice=_fit, device_kind=_device_kind,
    extra={"runtime": "pyopencl"})


def make_backend() -> GpuBackend:
    return GpuBackend(TABLE)
