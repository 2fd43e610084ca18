"""Facts about the machine a benchmark ran on, stored with every result.

Numbers from two machines are only comparable when you know what the
machines were, so ``results.json`` carries the CPU model and core counts, the
GPU (if any) and the versions of every package that can change a timing.
Everything here is best effort: a fact that cannot be found is ``None``,
never an exception.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from typing import Any

#: Distributions whose versions change timings (import names differ for some).
_PACKAGES = ("rammer", "numpy", "numba", "onnx", "onnxruntime", "onnxruntime-gpu", "torch", "onnx2torch",
             "matplotlib")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def cpu_model() -> str | None:
    info = _read("/proc/cpuinfo")
    if info:
        for key in ("model name", "Hardware", "Processor", "cpu model"):
            m = re.search(rf"^{key}\s*:\s*(.+)$", info, re.MULTILINE)
            if m:
                return m.group(1).strip()
    if platform.system() == "Darwin" and shutil.which("sysctl"):
        out = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
        if out:
            return out
    return platform.processor() or None


def physical_cores() -> int | None:
    """Distinct (package, core) pairs in /proc/cpuinfo; None where unknown."""
    info = _read("/proc/cpuinfo")
    if not info:
        return None
    pairs = set()
    for block in info.strip().split("\n\n"):
        phys = re.search(r"^physical id\s*:\s*(\d+)", block, re.MULTILINE)
        core = re.search(r"^core id\s*:\s*(\d+)", block, re.MULTILINE)
        if phys and core:
            pairs.add((phys.group(1), core.group(1)))
    return len(pairs) or None


def memory_gib() -> float | None:
    info = _read("/proc/meminfo")
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", info or "", re.MULTILINE)
    return round(int(m.group(1)) / 2**20, 1) if m else None


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def gpus() -> list[str]:
    """Names of the GPUs this process could use (NVIDIA via nvidia-smi, AMD via rocm-smi)."""
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
        if out:
            return [line.strip() for line in out.splitlines() if line.strip()]
    if shutil.which("rocm-smi"):
        out = _run(["rocm-smi", "--showproductname"])
        if out:
            names = re.findall(r"Card (?:series|model)\s*:\s*(.+)", out)
            return [n.strip() for n in names] or ["AMD GPU (rocm-smi)"]
    return []


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    # CuPy ships as one of several wheels (cupy-cuda12x, cupy-rocm-6-0...).
    versions["cupy"] = None
    for dist in importlib.metadata.distributions():
        metadata: Any = dist.metadata  # an email Message; the PackageMetadata protocol has no get()
        dname = (metadata.get("Name") or "").lower()
        if dname == "cupy" or dname.startswith("cupy-"):
            versions["cupy"] = f"{dist.version} ({dname})"
            break
    return versions


def machine_facts(name: str | None = None) -> dict[str, Any]:
    """Everything worth knowing to compare timings; ``name`` labels the machine."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "name": name or platform.node() or "unknown",
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "physical_cores": physical_cores(),
        "memory_gib": memory_gib(),
        "gpus": gpus(),
        "os": f"{platform.system()} {platform.release()}",
        "arch": platform.machine(),
        "python": platform.python_version(),
        "versions": package_versions(),
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def describe(facts: dict[str, Any]) -> str:
    """One line for tables and chart titles."""
    cores = facts.get("physical_cores") or facts.get("logical_cpus")
    parts = [f"{facts.get('cpu_model') or 'unknown CPU'} ({cores} cores)"]
    gpu_list = facts.get("gpus") or []
    parts.append("GPU: " + ("; ".join(gpu_list) if gpu_list else "none"))
    return ", ".join(parts)
