"""The emulator header's own semantics on small hand-written kernels: warp shuffles, atomics,
``__shared__`` per block, guard pages naming an out-of-bounds access, the watchdog and the
deadlock report on a spin nobody ends."""

from __future__ import annotations

import numpy as np
import pytest
from emu_helpers import need_gxx

from rammer.backends.gpu.emulation import EmulatorError, Policy
from rammer.backends.gpu.emulation.fake_cupy import make_cupy

KERNELS = r'''
extern "C" __global__ void warp_sum(const float *x, float *out) {
    float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
    if ((threadIdx.x & 31) == 0) out[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = v;
}
extern "C" __global__ void block_sum(const float *x, float *out, int *count) {
    __shared__ float part[256];
    part[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) { out[blockIdx.x] = part[0]; atomicAdd(count, 1); }
}
extern "C" __global__ void overrun(float *a, int n) { a[n + threadIdx.x] = 1.0f; }
extern "C" __global__ void add_one(float *a, int n) { if (threadIdx.x < n) a[threadIdx.x] += 1.0f; }
extern "C" __global__ void spin_forever(int *flag) {
    if (threadIdx.x == 0) { while (atomicAdd(&flag[blockIdx.x], 0) == 0) {} }
    __syncthreads();
}
'''


@pytest.fixture(scope="module")
def emu():
    need_gxx()
    cp = make_cupy()
    return cp, cp.RawModule(code=KERNELS)


def test_warp_shuffle_reduces_each_warp(emu):
    cp, mod = emu
    x = np.random.default_rng(0).standard_normal(2 * 128).astype(np.float32)
    out = cp.zeros(8, dtype=np.float32)
    mod.get_function("warp_sum")((2,), (128,), (cp.asarray(x), out))
    np.testing.assert_allclose(out.get(), x.reshape(8, 32).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", [Policy(), Policy("random", seed=7), Policy("starve", victim=0)])
def test_shared_memory_is_per_block_and_atomics_count(emu, policy):
    cp, mod = emu
    cp.policy = policy
    x = np.random.default_rng(1).standard_normal(5 * 256).astype(np.float32)
    out, count = cp.zeros(5, dtype=np.float32), cp.zeros(1, dtype=np.int32)
    mod.get_function("block_sum")((5,), (256,), (cp.asarray(x), out, count))
    np.testing.assert_allclose(out.get(), x.reshape(5, 256).sum(axis=1), rtol=1e-4, atol=1e-4)
    assert count.get()[0] == 5
    cp.policy = Policy()


def test_an_out_of_bounds_write_is_named(emu):
    cp, mod = emu
    a = cp.zeros(10, dtype=np.float32)
    with pytest.raises(EmulatorError, match=r"out-of-bounds access .* block 0 thread (6|7|8|9|1\d|2\d|3\d) .*"
                                            r"bytes past the end of a"):
        mod.get_function("overrun")((1,), (32,), (a, np.int32(4)))


def test_a_spin_nobody_ends_is_a_named_deadlock(emu):
    cp, mod = emu
    flag = cp.zeros(3, dtype=np.int32)
    with pytest.raises(EmulatorError, match=r"deadlock: .*block 0 thread 0 spins on flag\[0\] = 0"):
        mod.get_function("spin_forever")((3,), (64,), (flag,))
    flag.set(np.array([1, 1, 1], np.int32))
    mod.get_function("spin_forever")((3,), (64,), (flag,))  # the emulator is usable again


def test_the_stand_in_refuses_what_a_gpu_would_do_wrongly(emu):
    """The stand-in is strict where a runner could go wrong on a GPU: a Python int for an int
    parameter (CuPy passes 8 bytes), a slice assignment (a CuPy elementwise kernel)."""
    cp, mod = emu
    fn = mod.get_function("add_one")
    a = cp.zeros(4, dtype=np.float32)
    with pytest.raises(TypeError, match=r"argument 1 \(n\) takes i4 but CuPy would pass i8"):
        fn((1,), (4,), (a, 4))
    with pytest.raises(TypeError, match=r"argument 0 \(a\) points to f4, got a int32 array"):
        fn((1,), (4,), (cp.zeros(4, dtype=np.int32), np.int32(4)))
    with pytest.raises(RuntimeError, match="elementwise kernel"):
        a[0:2] = cp.asarray(np.ones(2, np.float32))
    fn((1,), (4,), (a, np.int32(3)))
    assert a.get().tolist() == [1.0, 1.0, 1.0, 0.0]
