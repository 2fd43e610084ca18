"""A persistent program (relu -> tiled MatMul -> softmax, three waves on two blocks with counter
barriers, the table-driven entry kernel of backends/gpu/entry.py) runs on PoCL for three launches
without resetting its counters and matches numpy; its CUDA text compiles with nvcc; removing
barriers is refused before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

from rammer.backends.gpu import entry
from rammer.backends.gpu import kernels as gk
from rammer.backends.gpu import program as gp
from rammer.codegen.dialects import DIALECTS
from rammer.codegen.render import neutral, render_module

M, K, N, T, BLOCK = 32, 40, 48, 16, 256
X, W, H, Z, Y = 0, M * K, M * K + K * N, 2 * M * K + K * N, 2 * M * K + K * N + M * N
ARENA = Y + M * N
KERNELS = {"relu": gk.elementwise("relu", "Relu", BLOCK), "mm": gk.matmul_tiled("mm", T),
           "softmax": gk.softmax_rows("softmax", BLOCK)}


def _waves() -> list[list[gp.Task]]:
    relu = [gp.Task("relu", r, (X, H, M * K), reads=((X + r * BLOCK, BLOCK),), writes=((H + r * BLOCK, BLOCK),))
            for r in range(-(-M * K // BLOCK))]
    tiles_n = -(-N // T)
    mm = []
    for r in range(-(-M // T) * tiles_n):
        r0, c0 = (r // tiles_n) * T, (r % tiles_n) * T
        rows = range(r0, min(r0 + T, M))
        mm.append(gp.Task("mm", r, (H, W, Z, M, N, K),
                          reads=tuple((H + i * K, K) for i in rows) + ((W, K * N),),
                          writes=tuple((Z + i * N + c0, min(T, N - c0)) for i in rows)))
    soft = [gp.Task("softmax", r, (Z, Y, N), reads=((Z + r * N, N),), writes=((Y + r * N, N),)) for r in range(M)]
    return [relu, mm, soft]


def _expected(x, w):
    z = np.maximum(x, 0) @ w
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_persistent_program_runs_on_pocl_across_launches(opencl):
    # Barrier rKernels (the tiled MatMul, softmax) inside the table loops, thread 0 spinning on
    # the other block's counter: the shapes PoCL must compile correctly (shared/notes/gpu.md).
    programs = gp.from_waves(_waves(), blocks=2)
    kernels, tables = entry.persistent_kernel("net", KERNELS, programs, BLOCK)
    prog = opencl.build(render_module(kernels, DIALECTS["opencl"]))
    rng = np.random.default_rng(7)
    w = rng.standard_normal((K, N)).astype(np.float32) * 0.3
    counters = opencl.buffer(np.zeros(2, np.int32))
    bufs = [opencl.buffer(t) for t in tables.values()]
    for epoch in range(3):  # the counters are never reset: the epoch moves the targets
        x = rng.standard_normal((M, K)).astype(np.float32)
        arena = np.zeros(ARENA, np.float32)
        arena[X:X + M * K], arena[W:W + K * N] = x.ravel(), w.ravel()
        abuf = opencl.buffer(arena)
        prog.net(opencl.queue, (2 * BLOCK,), (BLOCK,), abuf, counters, np.int32(epoch), *bufs)
        out = opencl.read(arena, abuf)
        np.testing.assert_allclose(out[Y:].reshape(M, N), _expected(x, w), rtol=1e-4, atol=1e-6)
    seen = np.zeros(2, np.int32)
    opencl.read(seen, counters)
    assert seen.tolist() == [6, 6]  # two signals per block per launch (after waves 0 and 1)


def test_segments_keep_program_order():
    programs = gp.from_waves(_waves(), blocks=3)
    for steps in programs:
        again: list = []
        for seg in entry.segments(steps):
            assert len({c.op for c in seg.calls}) <= 1  # one operator per segment: no order needed inside
            again += seg.calls + ([gp.Signal()] if seg.signal else []) + seg.waits
        assert again == steps


def test_cuda_and_opencl_programs_are_one_template():
    kernels, _ = entry.persistent_kernel("net", KERNELS, gp.from_waves(_waves(), blocks=3), BLOCK)
    assert (neutral(render_module(kernels, DIALECTS["cuda"], mark=True))
            == neutral(render_module(kernels, DIALECTS["opencl"], mark=True)))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_the_persistent_program(arch, tmp_path, ptxas_usage):
    kernels, _ = entry.persistent_kernel("net", KERNELS, gp.from_waves(_waves(), blocks=4), BLOCK)
    usage = ptxas_usage(arch, render_module(kernels, DIALECTS["cuda"]), tmp_path)
    assert usage["net"]["smem"] == 2 * T * T * 4  # the pooled buffer: the largest rKernel's shared memory
    assert 0 < usage["net"]["registers"] <= 255


def test_removed_barriers_are_caught_before_running():
    with pytest.raises(gp.ProgramError, match="race: relu rTask .* mm rTask"):
        entry.persistent_kernel("net", KERNELS, gp.from_waves(_waves(), blocks=2, barriers=False), BLOCK)
    programs = gp.from_waves(_waves(), blocks=2)
    one_wait_gone = [programs[0], [s for s in programs[1] if s != gp.Wait(0, 2)]]
    with pytest.raises(gp.ProgramError, match="race: mm rTask .* softmax rTask"):
        gp.check_races(one_wait_gone)
    gp.check_races(gp.from_waves(_waves(), blocks=1, barriers=False))  # one block: program order suffices


def test_an_rkernel_with_barriers_must_fill_the_block():
    with pytest.raises(gp.ProgramError, match="every thread must pass every barrier"):
        gp.device_function(gk.softmax_rows("s", 128), 256)
    fn, _ = gp.device_function(gk.elementwise("e", "Relu", 128), 256)  # no barriers: guarded instead
    assert fn.device and fn.params[0].name == "rtask_id"


def _reference_ptab(kernels: dict, programs: list) -> np.ndarray:
    """The ptab built segment by segment (the form the array-built one replaced)."""
    table = entry._CallTable(kernels)
    per_block = [entry.segments(p) for p in programs]
    starts, records, pairs, count = [0], [], [], 0
    for segs in per_block:
        for seg in segs:
            records += table.ranges(seg.calls) + [int(seg.signal), count, count + len(seg.waits)]
            count += len(seg.waits)
            pairs += seg.waits
        starts.append(starts[-1] + len(segs))
    totals = gp.signals_per_block(programs)
    waits = [x for blk, cnt in pairs for x in (blk, cnt, totals[blk])]
    return np.asarray(starts + records + waits, np.int32)


def test_array_built_tables_match_segment_by_segment():
    # Calls of one op in runs (one segment), op -1 calls (a segment each), two kernels in one
    # segment, signals after signals, an empty block: every cut rule of segments().
    programs = gp.from_waves(_waves(), blocks=3)
    programs = [[gp.Call(s.kernel, s.rtask_id, s.args, s.reads, s.writes, op=s.rtask_id % 2)
                 if isinstance(s, gp.Call) and s.kernel == "relu" else s for s in p] for p in programs]
    programs.append([])
    programs[0] = programs[0][:2] + [gp.Signal()] + programs[0][2:]
    _, tables = entry.persistent_kernel("net", KERNELS, programs, BLOCK, check=False)
    np.testing.assert_array_equal(tables["ptab"], _reference_ptab(KERNELS, programs))


def test_race_check_refuses_a_step_index_of_other_programs():
    programs = gp.from_waves(_waves(), blocks=2)
    gp.check_races(programs, gp.step_index(programs))  # the shared index: same answer as without
    with pytest.raises(gp.ProgramError, match="step index of other programs"):
        gp.check_races(programs, gp.step_index(programs[:1] + [programs[1][:-1]]))
