"""How many blocks of a compiled kernel can be resident at once on a GPU, from the kernel's
registers and shared memory (what ptxas or the HIP compiler reports) and the device's limits.

A persistent program's blocks spin on each other's counters, so every block must be resident
from the start: a grid larger than the co-resident count would deadlock, and is refused
(:func:`check_grid`).  The limits are per multiprocessor (an SM, or a CDNA compute unit); the
figures are the vendors' published ones for the presets' devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rammer.errors import RammerError

__all__ = ["GpuLimits", "occupancy", "check_grid"]


@dataclass(frozen=True)
class GpuLimits:
    """Resources of one multiprocessor and how a block's use of them is rounded up."""

    #: The compiler's target for this device (``sm_80``, ``gfx90a``).
    arch: str
    #: Multiprocessors (SMs, or CUs of one GCD).
    units: int
    warp: int
    max_threads: int
    max_blocks: int
    #: Registers a warp may draw from: per SM (NVIDIA) or per SIMD and lane (AMD VGPRs).
    registers: int
    #: Allocation granularity: registers per warp (NVIDIA), VGPRs per lane (AMD).
    register_unit: int
    shared_bytes: int
    #: Shared memory the runtime reserves per block (1 KiB on sm_80 and later).
    shared_reserved: int = 0
    #: SIMDs per CU (AMD): waves are spread over them, each with its own VGPR file.
    simds: int = 0
    max_waves_per_simd: int = 0
    #: The target the resource usage is read from when the compiler lacks ``arch`` (CUDA 13's nvcc
    #: has no sm_70: a V100's registers are taken from an sm_75 build).
    build_arch: str = ""


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(limits: GpuLimits, threads: int, registers: int, shared_bytes: int) -> dict[str, Any]:
    """Blocks per multiprocessor for a kernel of ``threads`` per block using ``registers`` per
    thread and ``shared_bytes`` per block, which resource limits it, and the co-resident grid."""
    warps = -(-threads // limits.warp)
    by: dict[str, int] = {"threads": limits.max_threads // threads, "blocks": limits.max_blocks}
    if limits.simds:  # AMD: waves per SIMD from the VGPRs each lane needs
        per_simd = limits.max_waves_per_simd
        if registers:
            per_simd = min(per_simd, limits.registers // _round_up(registers, limits.register_unit))
        by["registers"] = per_simd * limits.simds // warps
    elif registers:
        per_warp = _round_up(registers * limits.warp, limits.register_unit)
        by["registers"] = (limits.registers // per_warp) // warps
    if shared_bytes:
        by["shared memory"] = limits.shared_bytes // (shared_bytes + limits.shared_reserved)
    limited_by = min(by, key=lambda k: by[k])
    per_unit = max(by[limited_by], 0)
    return {"arch": limits.arch, "threads": threads, "registers": registers, "shared_bytes": shared_bytes,
            "blocks_per_unit": per_unit, "limited_by": limited_by, "co_resident": per_unit * limits.units,
            "occupancy": round(per_unit * warps / max(limits.max_threads // limits.warp, 1), 3)}


def check_grid(blocks: int, occ: dict[str, Any], device: str) -> None:
    """Refuse a persistent grid of ``blocks`` that cannot all be resident (``occ`` from
    :func:`occupancy`): its spinning blocks would wait for blocks that never start."""
    if blocks > occ["co_resident"]:
        raise RammerError(
            f"the persistent grid has {blocks} blocks but at most {occ['co_resident']} can be resident at once on "
            f"{device} ({occ['arch']}: {occ['blocks_per_unit']} per multiprocessor, limited by "
            f"{occ['limited_by']}: {occ['registers']} registers per thread, {occ['shared_bytes']} bytes of shared "
            f"memory per block); schedule on at most {occ['co_resident']} vEUs, or use mode='wave'")
