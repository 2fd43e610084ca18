"""What the driver, the task tables and the executable share, without numba: the layout of a task
row and of a vEU's counter line, the walk's status codes, the kernel entries' names and the cpu set
words of the driver's affinity calls.

A cache hit that runs a native image (:mod:`.image_runtime`) reads these without importing the
numba modules that define the driver (:mod:`.driver`) and the entries (:mod:`.entries`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np

#: Parameters per task row after the kernel id and scratch offset.
ROW_PARAMS = 8
#: The kernel id of a barrier row.
BARRIER = 0
#: Progress counters sit 64 bytes apart (one cache line per vEU).
STRIDE = 8
#: Words of a vEU's counter line past its progress counter: when one of its kernels reports an
#: error, the row it was running (plus one; 0: none) and the kernel's own status, for the runtime
#: to name the op and node (written only on that path: the rows that succeed pay nothing).
FAILED_ROW = 1
FAILED_CODE = 2
#: walk status codes
KERNEL_FAILED = 3
STATUS = {0: "ok", 1: "aborted because another vEU failed", 2: "barrier timed out (a scheduling bug?)",
          KERNEL_FAILED: "a kernel reported an error"}

#: The kernels with an entry (``entries.entry_<name>``; ``entries`` checks the two agree).
KERNELS = frozenset({
    "k_ew", "k_gemm", "k_copy", "k_pad", "k_gather", "k_resize", "k_dwconv", "k_pool", "k_reduce",
    "k_softmax", "k_layernorm", "k_copy_many", "k_convp", "k_cumsum", "k_tree", "k_gather_elements", "k_quantize",
    "k_dequantize", "k_dynquant", "k_byte_table", "k_matmul_int", "k_qlinearconv", "k_gemm_int8", "k_qconv_int8",
    "k_qdwconv", "k_qlinear_matmul", "k_attention", "k_gemm_lda", "k_rnn", "k_qadd", "k_argreduce",
})

#: cpu_set_t as glibc defines it: 1024 bits.
CPUSET_WORDS = 16


def cpuset_words(cores: Iterable[int]) -> np.ndarray:
    """The cores as an int64 array in glibc's cpu_set_t layout (the driver's affinity calls)."""
    words = np.zeros(CPUSET_WORDS, dtype=np.int64)
    for c in cores:
        if 0 <= c < CPUSET_WORDS * 64:
            words[c // 64] |= np.int64(1) << np.int64(c % 64) if c % 64 < 63 else np.int64(-(1 << 63))
    return words


def available_cores() -> list[int]:
    """The cores this process may run on (``scheduling.available_cores``, without the scheduler's
    imports)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def default_veus() -> int:
    """``scheduling.default_veus`` without importing numba when it is not loaded yet: one vEU per
    core this process may use, but no more than numba's thread count, which before numba starts
    is ``NUMBA_NUM_THREADS`` or the cores this process may use (numba's own default)."""
    import sys

    numba = sys.modules.get("numba")
    if numba is not None:
        return max(1, min(len(available_cores()), numba.get_num_threads()))
    cores = available_cores()
    raw = os.environ.get("NUMBA_NUM_THREADS")
    try:
        threads = int(raw) if raw else len(cores)
    except ValueError:  # numba reports it when it starts
        import numba as started

        threads = started.get_num_threads()
    return max(1, min(len(cores), threads))
