"""The IPU cost model: per-rTask compute time, exchange time and sync cost, as data.

Figures (see docs/ipu.md and the shared notes on Graphcore parts):

* compute: a tile runs an rTask at the vDevice's per-tile rates (``veu_gflops``:
  62.5 TFLOP/s fp32 / 1472 tiles on GC200, 31.1 / 1216 on GC2; ``veu_gbps``: the
  quoted 47.5 TB/s (GC200) / 45 TB/s (GC2) on-chip SRAM bandwidth per tile), plus
  the vDevice's ``rtask_overhead_us`` (vertex start-up);
* exchange: the quoted ~8 TB/s all-to-all exchange of a chip, shared evenly by its
  tiles (about 5.4 GB/s per tile on GC200, i.e. 4 bytes per 1.33 GHz cycle); a
  superstep's exchange lasts as long as its busiest tile's bytes in or out;
* sync: the vDevice's ``barrier_us`` (0.5 us) per superstep;
* code: each distinct rKernel on a tile costs ``CODE_BYTES_PER_KERNEL`` of SRAM and
  each rTask (a Poplar vertex) ``VERTEX_BYTES`` -- round assumptions.

These are estimates for comparing mappings, not measurements of an IPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from rammer.rtask import RKernel
from rammer.vdevice import VDevice

#: Quoted all-to-all exchange bandwidth of one chip, GB/s, per preset.
EXCHANGE_GBPS = {"gc200": 8_000.0, "gc2": 7_700.0}
DEFAULT_EXCHANGE_GBPS = 8_000.0
CODE_BYTES_PER_KERNEL = 2 * 1024
VERTEX_BYTES = 64


@dataclass(frozen=True)
class IpuCostModel:
    flops_per_us: float
    bytes_per_us: float
    rtask_overhead_us: float
    exchange_bytes_per_us_per_tile: float
    sync_us: float

    @classmethod
    def for_vdevice(cls, vd: VDevice, num_tiles: int) -> IpuCostModel:
        base = vd.name.split("x")[0] if vd.name not in EXCHANGE_GBPS else vd.name
        gbps = float(vd.extra.get("exchange_gbps", EXCHANGE_GBPS.get(base, DEFAULT_EXCHANGE_GBPS)))
        return cls(vd.flops_per_us, vd.bytes_per_us, vd.rtask_overhead_us,
                   gbps * 1e3 / max(1, num_tiles), vd.barrier_us)

    def rtask_us(self, kernel: RKernel) -> float:
        """One rTask of ``kernel`` on one tile: the slower of its FLOPs and its SRAM bytes."""
        return self.rtask_overhead_us + max(kernel.flops / self.flops_per_us, kernel.bytes / self.bytes_per_us)

    def exchange_us(self, busiest_tile_bytes: float) -> float:
        return busiest_tile_bytes / self.exchange_bytes_per_us_per_tile

    def describe(self) -> dict[str, float]:
        return {"tile_gflops": self.flops_per_us / 1e3, "tile_sram_gbps": self.bytes_per_us / 1e3,
                "rtask_overhead_us": self.rtask_overhead_us,
                "tile_exchange_gbps": self.exchange_bytes_per_us_per_tile / 1e3, "sync_us": self.sync_us,
                "code_bytes_per_kernel": CODE_BYTES_PER_KERNEL, "vertex_bytes": VERTEX_BYTES}
