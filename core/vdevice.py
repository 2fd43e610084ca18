"""The vDevice: a number of homogeneous vEUs, as the scheduler sees hardware.

A vEU (virtual execution unit) runs one rTask at a time, in the order its
program says: a persistent thread block pinned to a GPU SM or AMD CU, a CPU
core, an IPU tile, an MCU core.  A :class:`VDevice` declares how many vEUs a
device has, the resources one vEU offers an rTask (threads, local memory:
shared memory / LDS / SRAM / L2), and the figures the analytic cost models
of :mod:`rammer.kernels_generic` and the simulator use:

* ``veu_gflops``: fp32 peak of one vEU (what a tuned contraction, a GEMM or
  a convolution, reaches);
* ``loop_gflops``: fp32 rate of one vEU on other code (elementwise loops,
  reductions); unset where it is the peak (GPUs, IPUs);
* ``veu_gbps``: memory bandwidth one vEU gets *when every vEU is busy* (the
  device's bandwidth divided by its vEUs; a fair-share model, so a schedule
  that leaves vEUs idle is not credited with the bandwidth they leave over);
* ``rtask_overhead_us``: the fixed cost of starting one rTask (reading the
  task table, computing tile indices, a block-wide sync);
* ``barrier_us``: the cost of one barrier rTask once the rTasks it waits for
  are done (polling completion flags in global memory, a BSP sync...);
* ``kernel_launch_us``: the gap between two dependent kernel launches in the
  two-layer, op-by-op execution of today's frameworks.

Presets are plain data (:data:`PRESETS`); the figures are public peak numbers
of each part divided per vEU, and the overheads are round figures of the
order reported for each kind of device.  They are estimates for comparing
schedules, not measurements.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .errors import RammerError


@dataclass(frozen=True)
class VEUResources:
    """What one vEU offers a single rTask."""

    #: Hardware threads an rTask may use (a PTB's size on a GPU, 1 per CPU core).
    threads: int
    #: Fast local memory an rTask may use: GPU shared memory / LDS, an IPU
    #: tile's SRAM, a CPU core's L2, an MCU's SRAM.
    local_mem_bytes: int


#: Where a vDevice's constants may live (``VDevice.constant_memory``).
CONSTANT_MEMORIES = ("global", "local", "flash")


@dataclass(frozen=True)
class VDevice:
    """A virtual device: ``num_veus`` homogeneous vEUs."""

    name: str
    kind: str
    num_veus: int
    veu: VEUResources
    veu_gflops: float
    veu_gbps: float
    rtask_overhead_us: float
    barrier_us: float
    kernel_launch_us: float
    #: True where every operand must live in the vEU's local memory (IPU
    #: tiles, MCUs): an rTask's whole working set must then fit there.
    local_memory_only: bool = False
    description: str = ""
    #: fp32 rate of one vEU outside tuned contractions (None: ``veu_gflops``).
    loop_gflops: float | None = None
    #: Where constants (weights) live: ``"global"`` (device memory, with the
    #: tensors), ``"local"`` (the vEUs' local memory: an IPU tile's SRAM) or
    #: ``"flash"`` (an MCU's flash, read in place: no local memory needed).
    constant_memory: str = "global"
    #: Bytes of device memory for tensors (global memory; an MCU's SRAM); 0: not modelled.
    memory_bytes: int = 0
    #: Bytes for constants where they live apart from the tensors (flash); 0: not modelled.
    constant_bytes: int = 0
    #: Whether the vDevice's programs read which rTasks each barrier waits for.  False where a
    #: barrier is a device-wide sync whatever it lists (an IPU's supersteps each end in one): the
    #: scheduler then records each barrier's whole wait group, a superset of its waits that is still
    #: a valid schedule, instead of the members it may leave out (37 M positions, hundreds of MB, for
    #: densenet121 on a GC200's 1,472 tiles).
    exact_waits: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_veus < 1:
            raise RammerError(f"vDevice '{self.name}' needs at least one vEU, got {self.num_veus}")
        if self.veu_gflops <= 0 or self.veu_gbps <= 0 or (self.loop_gflops is not None and self.loop_gflops <= 0):
            raise RammerError(f"vDevice '{self.name}' needs positive veu_gflops, veu_gbps and loop_gflops")
        if min(self.rtask_overhead_us, self.barrier_us, self.kernel_launch_us) < 0:
            raise RammerError(f"vDevice '{self.name}' has a negative overhead")
        if self.constant_memory not in CONSTANT_MEMORIES:
            raise RammerError(f"vDevice '{self.name}': constant_memory must be one of "
                              f"{', '.join(CONSTANT_MEMORIES)}, got {self.constant_memory!r}")
        if self.memory_bytes < 0 or self.constant_bytes < 0:
            raise RammerError(f"vDevice '{self.name}' has a negative memory size")

    # Throughputs in the unit the cost models use (per microsecond).
    @property
    def flops_per_us(self) -> float:
        return self.veu_gflops * 1e3

    @property
    def bytes_per_us(self) -> float:
        return self.veu_gbps * 1e3

    @property
    def loop_flops_per_us(self) -> float:
        return (self.veu_gflops if self.loop_gflops is None else self.loop_gflops) * 1e3

    def with_veus(self, num_veus: int) -> VDevice:
        """The same vEUs, ``num_veus`` of them (tests, what-if studies)."""
        return replace(self, num_veus=int(num_veus), name=f"{self.name}x{num_veus}")

    def summary(self) -> str:
        return (f"{self.name}: {self.num_veus} vEUs x ({self.veu.threads} threads, "
                f"{self.veu.local_mem_bytes // 1024} KiB), {self.veu_gflops:.3g} GFLOP/s and "
                f"{self.veu_gbps:.3g} GB/s per vEU")

    # -- plain data --------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VDevice:
        d = dict(data)
        try:
            veu = d.pop("veu")
            d["veu"] = veu if isinstance(veu, VEUResources) else VEUResources(**veu)
            return cls(**d)
        except TypeError as exc:
            raise RammerError(f"invalid vDevice description: {exc}") from None


KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: vDevice presets, as data.  Per-vEU figures are written as device totals
#: divided by the vEU count so the public numbers stay visible.  ``num_veus``
#: ``"auto"`` means "the cores of this machine".
PRESETS: dict[str, dict[str, Any]] = {
    "v100": dict(
        kind="gpu", num_veus=80, veu=dict(threads=1024, local_mem_bytes=96 * KiB),
        veu_gflops=15_700 / 80, veu_gbps=900 / 80,
        rtask_overhead_us=0.2, barrier_us=1.0, kernel_launch_us=3.0, memory_bytes=32 * GiB,
        description="NVIDIA V100 SXM2: 80 SMs, one persistent thread block per SM",
    ),
    "a100": dict(
        kind="gpu", num_veus=108, veu=dict(threads=1024, local_mem_bytes=164 * KiB),
        veu_gflops=19_500 / 108, veu_gbps=1_555 / 108,
        rtask_overhead_us=0.2, barrier_us=1.0, kernel_launch_us=3.0, memory_bytes=40 * GiB,
        description="NVIDIA A100 40GB: 108 SMs, one persistent thread block per SM",
    ),
    "h100": dict(
        kind="gpu", num_veus=132, veu=dict(threads=1024, local_mem_bytes=228 * KiB),
        veu_gflops=67_000 / 132, veu_gbps=3_350 / 132,
        rtask_overhead_us=0.15, barrier_us=0.8, kernel_launch_us=2.5, memory_bytes=80 * GiB,
        description="NVIDIA H100 SXM5: 132 SMs, one persistent thread block per SM",
    ),
    "mi250x": dict(
        kind="gpu", num_veus=110, veu=dict(threads=1024, local_mem_bytes=64 * KiB),
        veu_gflops=23_950 / 110, veu_gbps=1_600 / 110,
        rtask_overhead_us=0.25, barrier_us=1.2, kernel_launch_us=4.0, memory_bytes=64 * GiB,
        description="AMD MI250X, one GCD: 110 CUs, one persistent workgroup per CU",
    ),
    "gc200": dict(
        kind="ipu", num_veus=1472, veu=dict(threads=6, local_mem_bytes=624 * KiB),
        veu_gflops=62_500 / 1472, veu_gbps=47_500 / 1472,
        rtask_overhead_us=0.1, barrier_us=0.5, kernel_launch_us=1.5,
        local_memory_only=True, constant_memory="local", memory_bytes=1472 * 624 * KiB, exact_waits=False,
        description="Graphcore GC200 IPU: 1472 tiles x 6 threads, 624 KiB SRAM per tile",
    ),
    "gc2": dict(
        kind="ipu", num_veus=1216, veu=dict(threads=6, local_mem_bytes=256 * KiB),
        veu_gflops=31_100 / 1216, veu_gbps=45_000 / 1216,
        rtask_overhead_us=0.1, barrier_us=0.5, kernel_launch_us=1.5,
        local_memory_only=True, constant_memory="local", memory_bytes=1216 * 256 * KiB, exact_waits=False,
        description="Graphcore GC2 IPU (Mk1): 1216 tiles x 6 threads, 256 KiB SRAM per tile",
    ),
    # The cpu backend's vDevice too (one source): per-core figures measured on the
    # CPU backend's kernels (GEMM micro-kernel vs elementwise loops, streaming from L3),
    # the cost of reading one task row, and of a barrier row / a parallel-region launch.
    "cpu": dict(
        kind="cpu", num_veus="auto", veu=dict(threads=1, local_mem_bytes=2048 * KiB),
        veu_gflops=60.0, loop_gflops=12.0, veu_gbps=20.0,
        rtask_overhead_us=0.15, barrier_us=0.1, kernel_launch_us=1.5,
        description="this machine's CPU: one vEU per core, running a persistent worker thread",
    ),
    "cortex-m7": dict(
        kind="mcu", num_veus=1, veu=dict(threads=1, local_mem_bytes=512 * KiB),
        veu_gflops=0.43, veu_gbps=0.4,
        rtask_overhead_us=1.0, barrier_us=0.0, kernel_launch_us=2.0,
        local_memory_only=True, constant_memory="flash", memory_bytes=512 * KiB, constant_bytes=2 * MiB,
        description="an Arm Cortex-M7 MCU at 216 MHz with 512 KiB SRAM and 2 MiB flash for weights (single vEU)",
    ),
}


def preset_names() -> list[str]:
    return list(PRESETS)


def get_preset(name: str) -> VDevice:
    """The vDevice of preset ``name``, or of a JSON file ``name`` ending in .json."""
    if name.endswith(".json"):
        try:
            with open(name, encoding="utf-8") as f:
                return VDevice.from_dict(json.load(f))
        except OSError as exc:
            raise RammerError(f"cannot read vDevice file '{name}': {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise RammerError(f"vDevice file '{name}' is not valid JSON: {exc}") from None
    key = name.lower()
    if key not in PRESETS:
        raise RammerError(
            f"unknown vDevice preset '{name}'; known presets: {', '.join(PRESETS)} "
            "(or give a .json file with the fields of rammer.vdevice.VDevice)"
        )
    data = dict(PRESETS[key])
    if data["num_veus"] == "auto":
        data["num_veus"] = os.cpu_count() or 1
    return VDevice.from_dict({"name": key, **data})
