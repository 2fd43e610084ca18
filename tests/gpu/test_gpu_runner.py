"""The CuPy runner (rammer.backends.gpu.runner) made safe, executed on the stand-in cupy over the CUDA
emulator: the counters never wrap, an exception cannot desynchronise counters and epoch, runs from
two threads are ordered, a grid the device cannot hold fails at once with the limit named, and the
runner launches no CuPy elementwise kernel and passes its arguments with the kernel's types."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from emu_helpers import compile_for, install_fake_cupy, matches, reference, run_checked

from rammer.backends.gpu import runner as gpu_runner
from rammer.backends.gpu.emulation import Policy
from rammer.backends.gpu.runner import COUNTER_MAX
from rammer.errors import RammerError

MODEL = "alexnet-small"


def _signals(program) -> np.ndarray:
    """Signals each block sends per run (its segments with the signal flag set)."""
    ptab, blocks = program.tables["ptab"], program.blocks
    k = 2 * (len(program.kernels) - 1)
    rec = k + 3
    out = np.zeros(blocks, np.int64)
    for b in range(blocks):
        for s in range(int(ptab[b]), int(ptab[b + 1])):
            out[b] += int(ptab[blocks + 1 + s * rec + k] != 0)
    return out


def test_epoch_near_the_limit_resets_the_counters_before_they_wrap(monkeypatch):
    install_fake_cupy(monkeypatch)
    compiled = compile_for(MODEL)
    run_checked(compiled, MODEL, seeds=(1,))
    runner = compiled.executable._runner
    program = compiled.executable.program
    signals = _signals(program)
    # the runner bounds a block's signals by its segments: the last epoch whose targets fit in 32 bits
    # at that bound, then one more run would pass 2**31
    most = int(np.max(np.diff(program.tables["ptab"][:program.blocks + 1])))
    assert signals.max() <= most
    assert runner.epoch_limit * most <= COUNTER_MAX < (runner.epoch_limit + 2) * most
    runner.epoch = runner.epoch_limit - 1
    runner.counters.set((runner.epoch * signals).astype(np.int32))  # what the counters hold after those runs
    run_checked(compiled, MODEL, seeds=(2,))
    assert runner.epoch == runner.epoch_limit and runner.resets == 0
    run_checked(compiled, MODEL, seeds=(1,))  # this run's targets would wrap: zeroed first
    assert runner.resets == 1 and runner.epoch == 1
    assert np.array_equal(runner.counters.get(), signals.astype(np.int32))


def test_an_exception_after_the_launch_does_not_desynchronise_epoch_and_counters(monkeypatch):
    fake = install_fake_cupy(monkeypatch)
    compiled = compile_for(MODEL)
    run_checked(compiled, MODEL, seeds=(1,))
    runner = compiled.executable._runner
    real = runner.fn

    class LaunchThenFail:
        def __call__(self, *args, **kw):
            real(*args, **kw)  # the kernel ran and moved the counters ...
            raise KeyboardInterrupt  # ... then the caller is interrupted before the epoch moves

    runner.fn = LaunchThenFail()
    feeds, _ = reference(MODEL, 2)
    with pytest.raises(KeyboardInterrupt):
        compiled.run(feeds)
    assert runner.counters_unknown and runner.epoch == 1
    runner.fn = real
    fake.policy = Policy("random", seed=3)
    run_checked(compiled, MODEL, seeds=(2, 1))
    assert runner.resets == 1 and runner.epoch == 2
    assert np.array_equal(runner.counters.get(), 2 * _signals(compiled.executable.program).astype(np.int32))


def test_a_failed_launch_is_one_clear_error(monkeypatch):
    install_fake_cupy(monkeypatch)
    compiled = compile_for(MODEL)
    # the divergence mutation's source (test_emulation_mutations.py): its library is already built
    source = compiled.executable.source
    compiled.executable.source = source.replace("__syncthreads();", "if (threadIdx.x < 128) __syncthreads();", 1)
    feeds, _ = reference(MODEL, 1)
    with pytest.raises(RammerError, match=r"failed running alexnet-small .*divergence"):
        compiled.run(feeds)


def test_two_threads_share_one_compiled_model(monkeypatch):
    install_fake_cupy(monkeypatch)
    compiled = compile_for(MODEL)
    results: dict[int, list[bool]] = {1: [], 2: []}

    def worker(seed: int) -> None:
        feeds, want = reference(MODEL, seed)
        for _ in range(4):
            results[seed].append(matches(compiled.run(feeds), want))

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {1: [True] * 4, 2: [True] * 4}
    assert compiled.executable._runner.epoch == 8


def test_a_grid_the_live_device_cannot_hold_is_refused_before_launch(monkeypatch):
    fake = install_fake_cupy(monkeypatch, sms=2, blocks_per_sm=4)
    compiled = compile_for(MODEL)  # 108 blocks (the a100 preset); the device holds 8
    feeds, _ = reference(MODEL, 1)
    with pytest.raises(RammerError, match=r"108 blocks but at most 8 can be resident .*live: 2 multiprocessors, "
                                          r"4 blocks each from the occupancy API"):
        compiled.run(feeds)
    assert fake.launches == []


def test_the_occupancy_falls_back_to_the_live_device_properties(monkeypatch):
    fake = install_fake_cupy(monkeypatch, sms=3, blocks_per_sm=2)
    del fake.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor  # an older CuPy
    compiled = compile_for(MODEL)
    feeds, _ = reference(MODEL, 1)
    with pytest.raises(RammerError, match=r"at most 6 can be resident .*from the device properties"):
        compiled.run(feeds)


@pytest.mark.parametrize("too_large", ["shrink", "error"])
def test_a_cooperative_launch_too_large_fails_at_once_naming_the_limit(monkeypatch, too_large):
    """CuPy 13+ shrinks a cooperative grid that is too large (a warning): the runner makes it an
    error before the launch; an older CuPy passes on the driver's error."""
    fake = install_fake_cupy(monkeypatch, sms=2, blocks_per_sm=4)
    fake.cooperative_too_large = too_large
    monkeypatch.setattr(gpu_runner, "check_grid", lambda *a, **k: None)  # as if the check had been fooled
    compiled = compile_for(MODEL)
    feeds, _ = reference(MODEL, 1)
    with pytest.raises(RammerError, match=r"refused the cooperative launch of 108 blocks: at most 8"):
        compiled.run(feeds)
    assert fake.launches == []


def test_without_cooperative_launch_a_non_resident_grid_is_a_named_deadlock_not_a_hang(monkeypatch):
    """What the cooperative launch and the live check prevent: on HIP (no cooperative launch in
    CuPy) with the check fooled, the grid deadlocks; the emulator names it instead of hanging."""
    # 4 resident blocks: alexnet-small's work is on its first 8 of 110 blocks, blocks 0-3 wait on 4-7
    install_fake_cupy(monkeypatch, hip=True, sms=1, blocks_per_sm=4)
    monkeypatch.setattr(gpu_runner, "check_grid", lambda *a, **k: None)
    compiled = compile_for(MODEL, "rocm")
    feeds, _ = reference(MODEL, 1)
    with pytest.raises(RammerError, match=r"deadlock.*106 blocks never started \(4 resident at once\)"):
        compiled.run(feeds)


def test_a_cupy_without_nvrtc_fails_with_the_install_line(monkeypatch):
    fake = install_fake_cupy(monkeypatch)

    def no_nvrtc(**kw):
        raise RuntimeError("CuPy failed to load libnvrtc.so.12: OSError: cannot open shared object file")

    fake.RawModule = no_nvrtc
    compiled = compile_for(MODEL)
    feeds, _ = reference(MODEL, 1)
    with pytest.raises(RammerError, match=r"could not build the program.*cupy-cuda12x\[ctk\]"):
        compiled.run(feeds)


def test_wave_mode_passes_the_wave_index_and_needs_no_residency(monkeypatch):
    fake = install_fake_cupy(monkeypatch, sms=1, blocks_per_sm=1)  # waves need no co-residency
    compiled = compile_for(MODEL, mode="wave")
    run_checked(compiled, MODEL, seeds=(1,))
    waves = compiled.executable.program.launches
    assert [launch[3][0] for launch in fake.launches] == list(range(waves))


def test_a_cooperative_build_that_fails_falls_back_to_a_plain_launch(monkeypatch):
    fake = install_fake_cupy(monkeypatch)
    real = fake.RawModule

    def no_device_runtime(**kw):
        if kw.get("enable_cooperative_groups"):
            raise RuntimeError("nvrtc: cannot link -rdc code: libcudadevrt.a not found")
        return real(**kw)

    fake.RawModule = no_device_runtime
    compiled = compile_for(MODEL)
    run_checked(compiled, MODEL, seeds=(1,))
    runner = compiled.executable._runner
    assert runner.cooperative is False and "libcudadevrt" in runner.cooperative_unavailable
