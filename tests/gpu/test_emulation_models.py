"""Every small zoo model, compiled for cuda (and one for rocm), executed by the real CuPy runner on the
CUDA-semantics CPU emulator (the unchanged ``.cu`` under g++ with ``cuda_emu.h``), in both modes,
against reference; and the starvation sweep that runs one model with each block starved in turn."""

from __future__ import annotations

import pytest
from emu_helpers import SMALL_ZOO, compile_for, install_fake_cupy, matches, max_rel_err, reference, run_checked

from rammer.backends.gpu.emulation import Policy

QUICK = {"alexnet-small", "lstm-tc-small"}


def _params():
    for name in SMALL_ZOO:
        for mode in ("persistent", "wave"):
            marks = () if name in QUICK else (pytest.mark.slow,)
            yield pytest.param(name, mode, marks=marks, id=f"{name}-{mode}")


@pytest.mark.parametrize("name,mode", list(_params()))
def test_small_zoo_model_on_cuda_emulator_matches_reference(monkeypatch, name, mode):
    fake = install_fake_cupy(monkeypatch)
    compiled = compile_for(name, "cuda", mode)
    run_checked(compiled, name)  # two runs, fresh feeds: the second moves the epoch
    program = compiled.executable.program
    want_launches = 1 if mode == "persistent" else program.launches
    assert len(fake.launches) == 2 * want_launches  # launches per inference
    if mode == "persistent":
        assert [launch[3][0] for launch in fake.launches] == [0, 1]  # the epoch argument
        assert compiled.executable._runner.epoch == 2


@pytest.mark.parametrize("mode", ["persistent", pytest.param("wave", marks=pytest.mark.slow)])
def test_hip_text_runs_through_the_same_header(monkeypatch, mode):
    """The rocm backend's HIP source (``#include <hip/hip_runtime.h>``, unmasked shuffles, wavefront
    of 64) on an emulated AMD device: no cooperative launch there, the live check guards."""
    fake = install_fake_cupy(monkeypatch, hip=True, sms=110, blocks_per_sm=8)
    compiled = compile_for("alexnet-small", "rocm", mode)
    assert compiled.executable.source.startswith("// HIP")
    run_checked(compiled, "alexnet-small")
    assert fake.warp == 64 and compiled.executable._runner.cooperative is False


@pytest.mark.slow
def test_starving_each_block_in_turn_keeps_results_right(monkeypatch):
    """The starvation sweep on the correct program: whichever block is run only when all others are
    stuck, the result is right (no wait is missing).  The mutation test of a too-low wait count
    shows the same sweep fails when one is."""
    fake = install_fake_cupy(monkeypatch)
    compiled = compile_for("alexnet-small", "cuda", "persistent")
    feeds, want = reference("alexnet-small", 1)
    blocks = compiled.executable.program.blocks
    wrong = []
    for victim in range(blocks):
        fake.policy = Policy("starve", victim=victim)
        got = compiled.run(feeds)
        if not matches(got, want):
            wrong.append((victim, max_rel_err(got, want)))
    assert not wrong, wrong
