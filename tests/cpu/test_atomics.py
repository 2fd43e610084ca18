"""The llvmlite atomics and the barrier wait used by the CPU backend's workers."""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from rammer.backends.cpu.atomics import atomic_add, atomic_max, cpu_relax, load_acquire, store_release, wait_at_least


@njit
def _single_thread_ops(a):
    old = atomic_add(a, 1, 5)
    old2 = atomic_add(a, 1, -2)
    store_release(a, 2, 42)
    m = atomic_max(a, 3, 7)
    m2 = atomic_max(a, 3, 3)
    cpu_relax()
    return old, old2, load_acquire(a, 1), load_acquire(a, 2), m, m2, a[3]


def test_atomic_ops_have_the_right_values():
    a = np.zeros(4, np.int64)
    assert _single_thread_ops(a) == (0, 5, 3, 42, 0, 7, 7)


@njit(parallel=True)
def _contend(a, n, threads):
    for _thread in prange(threads):
        for _ in range(n):
            atomic_add(a, 0, 1)


def test_atomic_add_is_atomic_across_threads():
    threads = max(2, numba.config.NUMBA_NUM_THREADS)
    a = np.zeros(8, np.int64)
    _contend(a, 100_000, threads)
    assert a[0] == 100_000 * threads


@njit
def _wait(a, idx, target, abort, max_sleeps):
    return wait_at_least(a, idx, target, abort, max_sleeps)


def test_wait_returns_at_once_when_satisfied_and_reports_abort_and_timeout():
    a = np.zeros(16, np.int64)
    a[0] = 5
    assert _wait(a, 0, 5, 8, 10) == 0
    a[8] = 1  # another worker failed
    assert _wait(a, 0, 6, 8, 10) == 1
    a[8] = 0
    assert _wait(a, 0, 6, 8, 2) == 2  # timed out after two sleeps


@njit(parallel=True)
def _handoff(flags, data, rounds):
    # vEU 0 publishes data[r] then flag r; vEU 1 waits for the flag and checks the data.
    bad = np.zeros(2, np.int64)
    for v in prange(2):
        for r in range(1, rounds + 1):
            if v == 0:
                data[r % 64] = r
                store_release(flags, 0, r)
                wait_at_least(flags, 8, r, 16, 1_000_000)
            else:
                wait_at_least(flags, 0, r, 16, 1_000_000)
                if data[r % 64] != r:
                    bad[1] += 1
                store_release(flags, 8, r)
    return bad.sum()


def test_release_acquire_handoff_publishes_data():
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    if numba.config.NUMBA_NUM_THREADS < 2:
        return
    flags = np.zeros(24, np.int64)
    data = np.zeros(64, np.int64)
    assert _handoff(flags, data, 20_000) == 0
