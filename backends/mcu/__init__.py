"""The ``mcu`` backend: microcontrollers (Cortex-M), int8 and bit-serial weight-pool kernels.

See docs/mcu.md.  Post-training int8 quantization to the TFLite/CMSIS-NN spec, a network-wide pool of
8-long weight vectors (1-byte indices), bit-serial kernels whose activation precision (2..8 bits) is
chosen at run time, and portable C99 (no heap, no floating point) run here through a host build and
on Cortex-M3/M4 under QEMU (:mod:`.arm`).
"""

from __future__ import annotations

from rammer.hookspecs import hookimpl

from .device import McuBackend


@hookimpl
def rammer_register_backends(register) -> None:
    register(McuBackend())
