"""The CuPy runner of the cuda and rocm backends: one RawModule, the arena and the counters on
the device, one launch per run (per wave in wave mode).

What makes it safe to keep behind a server for days:

- **No counter wrap.**  A persistent block waits until ``counters[j] >= epoch * signals_j + k``;
  the counters are 32-bit.  Before a run whose targets could pass ``2**31 - 1`` the counters are
  zeroed (a host-to-device copy, ordered after every earlier launch) and the epoch restarts at 0
  (:attr:`CupyRunner.epoch_limit`).
- **Exception-safe epochs.**  From the launch until the epoch has moved and the device has
  finished, the counters are marked unknown; any exception in between (a failed launch, a
  device error, ``KeyboardInterrupt``) leaves them so, and the next run zeroes them first.
- **One run at a time.**  A lock per runner (one per compiled model): two threads never launch
  with the same epoch or write the arena's inputs under each other.
- **Co-residency.**  A persistent grid spins on itself, so every block must be resident from the
  start.  Before the first launch the grid is checked against the *live* device: its
  multiprocessor count and the blocks per multiprocessor the occupancy API gives for this
  kernel (registers, shared memory, threads), falling back to the device's properties.  On CUDA
  the persistent kernel is also launched cooperatively (``cuLaunchCooperativeKernel``), which
  fails at once rather than hang when the grid cannot be co-resident (CuPy 13+ shrinks such a
  grid with a warning instead: that warning is turned into the same error before anything is
  launched).  CuPy refuses cooperative launches on HIP, and a cooperative build needs the device
  runtime library; there (``cooperative_unavailable`` says why) the live check is the guard.
- **No CuPy elementwise kernels** (they need NVRTC and the CUDA headers at run time even for a
  slice assignment): inputs go in with ``ndarray.set``, outputs come back with ``ndarray.get``,
  the counters are zeroed with ``ndarray.set``; the only kernel launched is the program's own.

The CuPy surface used is small and listed in ``docs/gpu.md``; :mod:`.emulation.fake_cupy`
implements exactly that surface over the CPU emulator, which is how CI executes this file.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from rammer.errors import RammerError

from .compiler import KERNEL_NAME, GpuProgram
from .guards import check_guards
from .lower_ints import ArenaFeeds, ArenaOutputs
from .occupancy import GpuLimits, check_grid, occupancy

__all__ = ["CupyRunner", "COUNTER_MAX", "live_residency"]

#: The largest value a 32-bit counter (and a wait target) may reach.
COUNTER_MAX = 2 ** 31 - 1
_INSTALL_HINT = ("CuPy compiles the program with NVRTC and needs the CUDA headers: install "
                 "'cupy-cuda12x[ctk]' (or 'cupy-cuda13x[ctk]', or pip install -e '.[cuda]' in the rammer checkout), or a CUDA toolkit")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _device_name(props: Mapping[str, Any]) -> str:
    name = props.get("name", b"GPU")
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def live_residency(cupy: Any, fn: Any, threads: int, table: GpuLimits | None) -> tuple[dict[str, Any], str]:
    """How many blocks of ``fn`` (``threads`` per block) the live device holds at once, and its
    name.  Blocks per multiprocessor come from the occupancy API for this very kernel; when the
    API is missing, from the live device's properties (threads, blocks, registers and shared
    memory per multiprocessor) with the register rounding of ``table``."""
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(rt.getDevice())
    name, units = _device_name(props), int(props["multiProcessorCount"])
    regs, smem = int(fn.num_regs), int(fn.shared_size_bytes)
    try:
        per_unit = int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, 0))
        occ = {"arch": name, "threads": threads, "registers": regs, "shared_bytes": smem, "blocks_per_unit": per_unit,
               "limited_by": "the occupancy API", "co_resident": per_unit * units, "source": "occupancy API"}
    except Exception:  # noqa: BLE001 - an older CuPy or a HIP build without the call: compute it
        warp = int(props.get("warpSize", table.warp if table else 32))
        live = GpuLimits(
            arch=name, units=units, warp=warp,
            max_threads=int(props.get("maxThreadsPerMultiProcessor", table.max_threads if table else 2048)),
            max_blocks=int(props.get("maxBlocksPerMultiProcessor", table.max_blocks if table else 16)),
            registers=int(props.get("regsPerMultiprocessor", table.registers if table else 65536)),
            register_unit=table.register_unit if table else 256,
            shared_bytes=int(props.get("sharedMemPerMultiprocessor", table.shared_bytes if table else 48 * 1024)),
            shared_reserved=table.shared_reserved if table else 0,
            simds=table.simds if table else 0, max_waves_per_simd=table.max_waves_per_simd if table else 0)
        occ = dict(occupancy(live, threads, regs, smem), source="device properties")
    occ["units"] = units
    return occ, name


class CupyRunner:
    """Runs one compiled program on the current CuPy device; thread-safe (one run at a time)."""

    def __init__(self, cupy: Any, program: GpuProgram, source: str, limits: GpuLimits | None,
                 gpu_name: str = "GPU") -> None:
        self.cp, self.p, self.gpu_name = cupy, program, gpu_name
        self.lock = threading.Lock()
        hip = bool(getattr(cupy.cuda.runtime, "is_hip", False))
        self.cooperative = program.mode == "persistent" and not hip
        #: Why the cooperative build failed, when it did and the plain one was used instead.
        self.cooperative_unavailable = ""
        try:
            self.fn = self._build(source, self.cooperative)
        except Exception as exc:  # noqa: BLE001 - CuPy raises many types; all end here
            if not self.cooperative:
                raise RammerError(f"CuPy could not build the program for the {gpu_name} ({_first_line(exc)}); "
                                  f"{_INSTALL_HINT}") from exc
            # A cooperative build links the device runtime (-rdc); without it, a plain launch guarded
            # by the live co-residency check below.
            try:
                self.fn = self._build(source, False)
            except Exception:  # noqa: BLE001
                raise RammerError(f"CuPy could not build the program for the {gpu_name} ({_first_line(exc)}); "
                                  f"{_INSTALL_HINT}") from exc
            self.cooperative, self.cooperative_unavailable = False, _first_line(exc)
        self.residency: dict[str, Any] | None = None
        if program.mode == "persistent":
            occ, name = live_residency(cupy, self.fn, program.block_threads, limits)
            check_grid(program.blocks, occ, f"{name} (live: {occ['units']} multiprocessors, "
                                            f"{occ['blocks_per_unit']} blocks each from the {occ['source']})")
            self.residency = occ
        self.arena = cupy.asarray(program.constant_arena())
        self.counters = cupy.zeros(max(program.blocks, 1), dtype=cupy.int32)
        self.tables = [cupy.asarray(t) for t in program.tables.values()]
        self.from_arena = ArenaOutputs(program)  # integer/bool outputs back in their dtype, checked
        self.to_arena = ArenaFeeds(program)  # integer/bool feeds as exact float32 values, checked
        ptab = program.tables.get("ptab")
        # A block signals at most once per segment: segments per block bound signals_j.
        most = int(np.max(np.diff(ptab[:program.blocks + 1]))) if ptab is not None and program.blocks else 1
        #: Runs (epochs 0 .. epoch_limit - 1) before the counters are zeroed: every wait target
        #: ``epoch * signals_j + k <= (epoch + 1) * signals_j`` stays at most :data:`COUNTER_MAX`.
        self.epoch_limit = max(COUNTER_MAX // max(most, 1) - 1, 1)
        self.epoch = 0
        self.resets = 0
        #: True while the device's counters may not match ``epoch`` (set from launch to completion).
        self.counters_unknown = False

    def _build(self, source: str, cooperative: bool) -> Any:
        module = self.cp.RawModule(code=source, enable_cooperative_groups=cooperative)
        fn = module.get_function(KERNEL_NAME)
        int(fn.num_regs)  # compiles now: a missing NVRTC or header fails here, not mid-run
        return fn

    def _zero_counters(self) -> None:
        """Zero the counters after every earlier launch has finished, and restart the epoch."""
        self.cp.cuda.runtime.deviceSynchronize()
        self.counters.set(np.zeros(self.counters.size, np.int32))
        self.epoch, self.counters_unknown = 0, False
        self.resets += 1

    def _launch_error(self, exc: BaseException) -> RammerError:
        text = _first_line(exc)
        if "COOPERATIVE_LAUNCH_TOO_LARGE" in str(exc).upper() or "GRID SIZE WILL BE REDUCED" in str(exc).upper():
            occ = self.residency or {}
            return RammerError(f"the {self.gpu_name} refused the cooperative launch of {self.p.blocks} blocks: at most "
                               f"{occ.get('co_resident', '?')} can be resident at once ({text}); schedule on fewer "
                               f"vEUs or use mode='wave'")
        return RammerError(f"the {self.gpu_name} failed running {self.p.graph_name or 'the model'} ({text}); the "
                           f"counters are zeroed before the next run")

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.lock:
            return self._run(feeds)

    def launch(self) -> None:
        """Run the program once on the inputs already in the arena (no host copies): what a caller
        timing the device alone measures (``ci/gpu_check.py``)."""
        with self.lock:
            if self.counters_unknown or self.epoch >= self.epoch_limit:
                self._zero_counters()
            self._launch()

    def _launch(self) -> None:
        cp, p = self.cp, self.p
        self.counters_unknown = True
        try:
            with warnings.catch_warnings():
                # CuPy 13+ shrinks a cooperative grid that is too large (with a warning) instead of
                # failing: a persistent grid missing blocks would spin forever, so that is an error here.
                warnings.filterwarnings("error", message=".*grid size will be reduced.*")
                if p.mode == "wave":
                    for wave in range(p.launches):
                        self.fn((p.blocks,), (p.block_threads,),
                                (self.arena, self.counters, np.int32(wave), *self.tables))
                else:
                    self.fn((p.blocks,), (p.block_threads,),
                            (self.arena, self.counters, np.int32(self.epoch), *self.tables))
            cp.cuda.get_current_stream().synchronize()
        except Exception as exc:  # noqa: BLE001 - re-raised as one clear line; counters stay 'unknown'
            raise self._launch_error(exc) from exc
        self.epoch += 1
        self.counters_unknown = False

    def _run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        p = self.p
        if self.counters_unknown or self.epoch >= self.epoch_limit:
            self._zero_counters()
        for name in p.inputs:
            off, shape = p.tensors[name]
            size = int(np.prod(shape))
            self.arena[off:off + size].set(np.ascontiguousarray(self.to_arena(name, feeds[name]).ravel(), np.float32))
        self._launch()
        read = {}
        for name in [*p.outputs, *(g.tensor for g in p.guards)]:
            off, shape = p.tensors[name]
            read[name] = self.arena[off:off + int(np.prod(shape))].get().reshape(shape)
        check_guards(p.guards, read)  # an If's unreachable branch selected at run time is its error
        return {name: self.from_arena(name, read[name]) for name in p.outputs}
