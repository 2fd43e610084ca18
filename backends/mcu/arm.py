"""The generated C on Cortex-M: arm-none-eabi-gcc builds, runs under QEMU (semihosting), exact
instruction counts with unicorn, flash/RAM with arm-none-eabi-size.

* QEMU boards: ``mps2-an385`` (Cortex-M3), ``mps2-an386`` (Cortex-M4).  The program is loaded at 0x0
  (SSRAM): a two-word vector table [stack top, entry], then text, rodata, data and bss all in that
  RAM (rdimon's start-up does not copy .data from flash).  QEMU is used for correctness only: its
  timing is not a cycle model.
* unicorn (Cortex-M4 model) runs ``model_run`` alone from the same ELF and counts executed
  instructions per layer (each layer is its own non-inlined function), exact and repeatable.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

from .codegen import CFLAGS, Source
from .host import write_source

CPUS = {"cortex-m3": "mps2-an385", "cortex-m4": "mps2-an386"}
TOOLS = ("arm-none-eabi-gcc", "qemu-system-arm")

LINK_LD = """
ENTRY(_start)
MEMORY { RAM (rwx) : ORIGIN = 0x00000000, LENGTH = 4M }
SECTIONS
{
    .text : {
        KEEP(*(.vectors))
        *(.text*)
        KEEP(*(.init)) KEEP(*(.fini))
        *(.rodata*)
        . = ALIGN(4);
    } > RAM
    .ARM.extab : { *(.ARM.extab* .gnu.linkonce.armextab.*) } > RAM
    .ARM.exidx : { __exidx_start = .; *(.ARM.exidx*) __exidx_end = .; } > RAM
    .preinit_array : { PROVIDE_HIDDEN(__preinit_array_start = .); KEEP(*(.preinit_array)) PROVIDE_HIDDEN(__preinit_array_end = .); } > RAM
    .init_array : { PROVIDE_HIDDEN(__init_array_start = .); KEEP(*(SORT(.init_array.*))) KEEP(*(.init_array)) PROVIDE_HIDDEN(__init_array_end = .); } > RAM
    .fini_array : { PROVIDE_HIDDEN(__fini_array_start = .); KEEP(*(.fini_array)) PROVIDE_HIDDEN(__fini_array_end = .); } > RAM
    .data : { . = ALIGN(4); *(.data*) . = ALIGN(4); } > RAM
    .bss : { . = ALIGN(4); __bss_start__ = .; *(.bss*) *(COMMON) . = ALIGN(4); __bss_end__ = .; } > RAM
    . = ALIGN(8);
    end = .; __end__ = .;
    __stack_top = ORIGIN(RAM) + LENGTH(RAM);
}
"""

STARTUP_C = """
extern void _start(void);
extern char __stack_top;
__attribute__((section(".vectors"), used)) static const void *const vectors[2] = {&__stack_top, (const void *)_start};
"""


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _harness(inputs: np.ndarray, bits: list[int], in_bytes: int, out_bytes: int) -> str:
    data = ",\n".join("    {" + ", ".join(str(int(v)) for v in row) + "}" for row in inputs.reshape(len(inputs), -1))
    return f"""#include <stdio.h>
#include <stdint.h>
#include "model.h"
static const int8_t inputs[{len(inputs)}][{in_bytes}] = {{
{data}
}};
static const int bits[{len(bits)}] = {{{", ".join(map(str, bits))}}};
static int8_t output[{out_bytes}];
int main(void)
{{
    int b, n, i;
    for (b = 0; b < {len(bits)}; ++b)
        for (n = 0; n < {len(inputs)}; ++n) {{
            if (model_run(inputs[n], output, bits[b]) != 0) {{ printf("error\\n"); return 1; }}
            printf("%d %d", bits[b], n);
            for (i = 0; i < {out_bytes}; ++i) printf(" %d", output[i]);
            printf("\\n");
        }}
    printf("done\\n");
    return 0;
}}
"""


@dataclass
class ArmBuild:
    elf: str
    cpu: str
    folder: str
    #: arm-none-eabi-size of the model object: text (code + const data = flash), data, bss (RAM).
    text: int = 0
    data: int = 0
    bss: int = 0


def build(src: Source, cpu: str, inputs: np.ndarray, bits: list[int], in_bytes: int, out_bytes: int,
          folder: str | None = None, opt: str = "-O2") -> ArmBuild:
    """An ELF for ``cpu`` running ``model_run`` on ``inputs`` at each of ``bits``, printing outputs."""
    folder = folder or tempfile.mkdtemp(prefix=f"rammer-mcu-{cpu}-")
    write_source(src, folder)
    with open(os.path.join(folder, "main.c"), "w") as f:
        f.write(_harness(inputs, bits, in_bytes, out_bytes))
    with open(os.path.join(folder, "startup.c"), "w") as f:
        f.write(STARTUP_C)
    with open(os.path.join(folder, "link.ld"), "w") as f:
        f.write(LINK_LD)
    arch = ["-mcpu=" + cpu, "-mthumb", "-mfloat-abi=soft"]
    cc = "arm-none-eabi-gcc"

    def run(cmd: list[str]) -> None:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=folder)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-4000:]}")

    run([cc, *arch, *CFLAGS, opt, "-c", "model.c", "-o", "model.o"])
    run([cc, *arch, "-std=c99", "-Wall", "-Wextra", "-Werror", opt, "-c", "main.c", "-o", "main.o"])
    run([cc, *arch, opt, "-c", "startup.c", "-o", "startup.o"])
    run([cc, *arch, "--specs=rdimon.specs", "-T", "link.ld", "main.o", "model.o", "startup.o", "-o", "fw.elf"])
    out = ArmBuild(os.path.join(folder, "fw.elf"), cpu, folder)
    if shutil.which("arm-none-eabi-size"):
        done = subprocess.run(["arm-none-eabi-size", "model.o"], capture_output=True, text=True, cwd=folder)
        nums = re.findall(r"^\s*(\d+)\s+(\d+)\s+(\d+)", done.stdout, re.M)
        if nums:
            out.text, out.data, out.bss = map(int, nums[0])
    return out


def run_qemu(elf: ArmBuild, timeout: float = 120.0) -> dict[tuple[int, int], np.ndarray]:
    """Outputs printed by the harness: (bits, sample) -> int8 output."""
    board = CPUS[elf.cpu]
    cmd = ["qemu-system-arm", "-M", board, "-nographic", "-monitor", "none", "-serial", "none",
           "-semihosting-config", "enable=on,target=native", "-kernel", elf.elf]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.splitlines()
    if "done" not in lines:
        raise RuntimeError(f"QEMU ({board}) did not finish the run (rc {done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    found = {}
    for line in lines:
        parts = line.split()
        if len(parts) > 2 and parts[0].isdigit():
            found[(int(parts[0]), int(parts[1]))] = np.array([int(v) for v in parts[2:]], np.int8)
    return found


# ---- unicorn: exact instruction counts on the Cortex-M4 model ------------------------------------

def _thumb_count(code: bytes) -> int:
    """Instructions in a block of Thumb-2 code (a halfword 0b11101/0b11110/0b11111... starts a 32-bit one)."""
    n, i = 0, 0
    while i + 1 < len(code):
        hw = code[i] | (code[i + 1] << 8)
        i += 4 if (hw >> 11) in (0b11101, 0b11110, 0b11111) else 2
        n += 1
    return n


class UnicornM4:
    """``model_run`` of an ELF on unicorn's Cortex-M4, counting instructions per layer function."""

    STACK_TOP = 0x00400000
    IO = 0x00380000
    SENTINEL = 0x00370000

    def __init__(self, elf_path: str, layer_functions: dict[int, str]):
        from elftools.elf.elffile import ELFFile
        from unicorn import UC_ARCH_ARM, UC_MODE_MCLASS, UC_MODE_THUMB, Uc
        from unicorn.arm_const import UC_CPU_ARM_CORTEX_M4

        self.uc = Uc(UC_ARCH_ARM, UC_MODE_THUMB | UC_MODE_MCLASS)
        self.uc.ctl_set_cpu_model(UC_CPU_ARM_CORTEX_M4)
        self.uc.mem_map(0, 4 * 1024 * 1024)
        with open(elf_path, "rb") as f:
            elf = ELFFile(f)
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD":
                    self.uc.mem_write(seg["p_paddr"], seg.data())
            syms = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()}
        self.entry = syms["model_run"] & ~1
        self.layer_at = {syms[name] & ~1: li for li, name in layer_functions.items()}
        self._sizes: dict[int, int] = {}

    def run(self, x: np.ndarray, out_bytes: int, act_bits: int, per_layer: bool = True):
        from unicorn import UC_HOOK_BLOCK
        from unicorn.arm_const import UC_ARM_REG_LR, UC_ARM_REG_R0, UC_ARM_REG_R1, UC_ARM_REG_R2, UC_ARM_REG_SP

        uc = self.uc
        data = np.ascontiguousarray(x, np.int8).tobytes()
        uc.mem_write(self.IO, data)
        out_addr = self.IO + ((len(data) + 7) & ~7)
        uc.reg_write(UC_ARM_REG_R0, self.IO)
        uc.reg_write(UC_ARM_REG_R1, out_addr)
        uc.reg_write(UC_ARM_REG_R2, act_bits)
        uc.reg_write(UC_ARM_REG_SP, self.STACK_TOP - 64)
        uc.reg_write(UC_ARM_REG_LR, self.SENTINEL | 1)
        counts: dict[int, int] = {}
        state = {"layer": -1}
        sizes = self._sizes
        layer_at = self.layer_at

        def on_block(u, address, size, _):
            li = layer_at.get(address)
            if li is not None:
                state["layer"] = li
            key = (address << 16) | size
            n = sizes.get(key)
            if n is None:
                n = sizes[key] = _thumb_count(bytes(u.mem_read(address, size)))
            counts[state["layer"]] = counts.get(state["layer"], 0) + n

        hook = uc.hook_add(UC_HOOK_BLOCK, on_block)
        try:
            uc.emu_start(self.entry | 1, self.SENTINEL)
        finally:
            uc.hook_del(hook)
        y = np.frombuffer(bytes(uc.mem_read(out_addr, out_bytes)), np.int8).copy()
        return y, counts

    def count_code_hook(self, x: np.ndarray, out_bytes: int, act_bits: int) -> int:
        """The total by a per-instruction hook (slow), to check the per-block count."""
        from unicorn import UC_HOOK_CODE
        from unicorn.arm_const import UC_ARM_REG_LR, UC_ARM_REG_R0, UC_ARM_REG_R1, UC_ARM_REG_R2, UC_ARM_REG_SP

        uc = self.uc
        uc.mem_write(self.IO, np.ascontiguousarray(x, np.int8).tobytes())
        uc.reg_write(UC_ARM_REG_R0, self.IO)
        uc.reg_write(UC_ARM_REG_R1, self.IO + ((x.size + 7) & ~7))
        uc.reg_write(UC_ARM_REG_R2, act_bits)
        uc.reg_write(UC_ARM_REG_SP, self.STACK_TOP - 64)
        uc.reg_write(UC_ARM_REG_LR, self.SENTINEL | 1)
        n = [0]

        def on_code(u, address, size, _):
            n[0] += 1

        hook = uc.hook_add(UC_HOOK_CODE, on_code)
        try:
            uc.emu_start(self.entry | 1, self.SENTINEL)
        finally:
            uc.hook_del(hook)
        return n[0]
