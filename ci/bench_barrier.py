"""Microbenchmark of the CPU backend's cross-thread barrier and worker launch.

Measures, with the same atomics and worker launch the runtime uses:

* ``launch``: starting N persistent workers for one inference (a numba
  ``prange`` over vEU ids on the OpenMP/TBB/workqueue layer) and joining them;
* ``barrier``: one all-to-all barrier round (every vEU publishes its progress
  with a release store and waits until every other vEU's counter reaches the
  round with acquire loads);
* ``ping-pong``: one round trip between two vEUs (two one-way hand-offs);
* ``python-threads``: for comparison, the launch cost of N Python threads
  calling a ``nogil`` numba driver.

Run: ``python ci/bench_barrier.py [--veus N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import numba
import numpy as np
from numba import njit, prange

from rammer.backends.cpu.atomics import load_acquire, store_release, wait_at_least

#: Counters sit on their own 64-byte cache line (8 int64) so that vEUs
#: publishing progress do not invalidate each other's lines.
STRIDE = 8


@njit(nogil=True, cache=True)
def _barrier_rounds(counters, v, n, rounds):
    abort = n * STRIDE
    for r in range(1, rounds + 1):
        store_release(counters, v * STRIDE, r)
        for u in range(n):
            if u != v:
                if wait_at_least(counters, u * STRIDE, r, abort, 1000000) != 0:
                    return 1
    return 0


@njit(parallel=True, nogil=True, cache=True)
def barrier_bench(counters, n, rounds):
    status = np.zeros(n, np.int64)
    for v in prange(n):
        status[v] = _barrier_rounds(counters, v, n, rounds)
    return status.sum()


@njit(nogil=True, cache=True)
def _pingpong(counters, v, rounds):
    other = 1 - v
    for r in range(1, rounds + 1):
        if v == 0:
            store_release(counters, 0, r)
            wait_at_least(counters, STRIDE, r, 2 * STRIDE, 1000000)
        else:
            wait_at_least(counters, 0, r, 2 * STRIDE, 1000000)
            store_release(counters, STRIDE, r)
    return load_acquire(counters, other * STRIDE)


@njit(parallel=True, nogil=True, cache=True)
def pingpong_bench(counters, rounds):
    for v in prange(2):
        _pingpong(counters, v, rounds)


@njit(parallel=True, nogil=True, cache=True)
def launch_bench(counters, n):
    for v in prange(n):
        store_release(counters, v * STRIDE, load_acquire(counters, v * STRIDE) + 1)


@njit(nogil=True, cache=True)
def _touch(counters, v):
    store_release(counters, v * STRIDE, load_acquire(counters, v * STRIDE) + 1)


def python_threads_launch(counters: np.ndarray, n: int) -> None:
    threads = [threading.Thread(target=_touch, args=(counters, v)) for v in range(1, n)]
    for t in threads:
        t.start()
    _touch(counters, 0)
    for t in threads:
        t.join()


def _median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--veus", type=int, default=numba.config.NUMBA_NUM_THREADS)
    parser.add_argument("--rounds", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    n = args.veus
    if n > numba.config.NUMBA_NUM_THREADS:
        print(f"--veus {n} exceeds numba's {numba.config.NUMBA_NUM_THREADS} threads", file=sys.stderr)
        return 2
    numba.set_num_threads(n)
    counters = np.zeros((n + 1) * STRIDE, np.int64)

    launch_bench(counters, n)  # compile
    launch = _median_us(lambda: launch_bench(counters, n), 2000)

    def one_barrier_run() -> None:
        counters[:] = 0
        if barrier_bench(counters, n, args.rounds) != 0:
            raise RuntimeError("barrier benchmark timed out")

    one_barrier_run()
    barrier = (_median_us(one_barrier_run, args.repeat) - launch) / args.rounds

    pingpong = float("nan")
    if n >= 2:
        def one_pingpong_run() -> None:
            counters[:] = 0
            pingpong_bench(counters, args.rounds)

        one_pingpong_run()
        pingpong = (_median_us(one_pingpong_run, args.repeat) - launch) / args.rounds

    _touch(counters, 0)
    pythreads = _median_us(lambda: python_threads_launch(counters, n), 500)

    print(f"threading layer: {numba.threading_layer()}, vEUs: {n}")
    print(f"worker launch+join (prange):       {launch:8.2f} us")
    print(f"worker launch+join (Python threads): {pythreads:6.2f} us")
    print(f"all-to-all barrier round:          {barrier:8.3f} us")
    print(f"ping-pong round trip (2 hand-offs): {pingpong:7.3f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
