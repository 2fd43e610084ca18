from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import rammer
from rammer import zoo
from rammer.backends.ipu.bsp import BSPOrderError, IpuPlacementError
from rammer.backends.ipu.placement import box_volume
from rammer.backends.ipu.simulator import simulate_program
from rammer.vdevice import VEUResources, get_preset

from .graphs import mlp


def _compiled(name: str = "resnext-small", **options):
    return rammer.compile(zoo.build(name), backend="ipu", **options)


def _feeds(compiled) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in compiled.graph.inputs}


@pytest.mark.parametrize("mode", ["merged", "compute-set"])
def test_every_slice_has_exactly_one_owner_and_tensors_are_covered(mode: str) -> None:
    exe = _compiled(mode=mode).executable
    prog, graph = exe.program, exe.graph
    assert prog.slices
    for name, slices in prog.slices.items():
        shape = graph.value_info[name].shape
        owners = np.zeros(shape, dtype=np.int64)
        for s in slices:
            assert 0 <= s.owner < prog.num_tiles
            owners[tuple(slice(a, b) for a, b in s.box)] += 1
        assert (owners == 1).all(), f"{name}: an element has {owners.min()}..{owners.max()} owners"


def test_tile_memory_respected_and_reported() -> None:
    prog = _compiled().executable.program
    assert prog.tile_peak_bytes.max() <= prog.sram_bytes == 624 * 1024
    assert prog.tile_peak_bytes.max() > 0
    # The busiest tile's exchange is part of the reported figures.
    assert prog.exchange_bytes == sum(e.nbytes for e in prog.exchanges) > 0
    assert all(e.nbytes == box_volume(e.box) * 4 for e in prog.exchanges)


def test_model_that_does_not_fit_is_rejected_with_tile_and_tensors(tmp_path) -> None:
    vd = get_preset("gc200")
    tiny = replace(vd, name="gc200-tiny", num_veus=4, veu=VEUResources(6, 4 * 1024))
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny.to_dict()))
    with pytest.raises(IpuPlacementError) as info:
        rammer.compile(mlp(), backend="ipu", vdevice=str(path))
    msg = str(info.value)
    assert "does not fit" in msg and "tile " in msg and "KiB" in msg
    assert "'w1'" in msg or "'h'" in msg or "'x'" in msg


def test_removing_an_exchange_fails() -> None:
    exe = _compiled("alexnet-small").executable
    feeds = _feeds(exe)
    prog = exe.program
    assert prog.exchanges
    # Drop the exchange that a compute step needs (the first one of a superstep > 0).
    victim = next(e for e in prog.exchanges if e.superstep > 0)
    prog.exchanges = [e for e in prog.exchanges if e is not victim]
    with pytest.raises(BSPOrderError, match="neither owns nor received"):
        simulate_program(prog, exe.schedule, exe.graph, feeds)


def test_exchange_before_its_producer_fails() -> None:
    exe = _compiled("alexnet-small").executable
    prog = exe.program
    late = next(e for e in prog.exchanges if e.superstep > 1)
    early = replace(late, superstep=0)
    prog.exchanges = [early if e is late else e for e in prog.exchanges]
    with pytest.raises(BSPOrderError):
        simulate_program(prog, exe.schedule, exe.graph, _feeds(exe))


def test_under_declared_read_gives_nan_not_a_right_answer() -> None:
    exe = _compiled("alexnet-small").executable
    prog = exe.program
    # Run a consumer on a tile that does not hold its inputs, with its reads undeclared.
    from rammer.backends.ipu.simulator import ChipMemory, _compute

    task = next(t for t in prog.tasks if exe.graph.nodes[t.op].op_type == "Relu")
    op = exe.schedule.ops[task.op]
    hidden = replace(op.kernel, access_fn=lambda r: replace(op.kernel.accesses(r), reads=()))
    exe.schedule.ops[task.op] = replace(op, kernel=hidden)
    memory = ChipMemory(prog, exe.graph)
    _compute(task, exe.schedule, exe.graph, memory, task.superstep)
    out = exe.graph.nodes[task.op].outputs[0]
    written = [hidden.accesses(r).writes[0][1] for r in task.rtasks]
    value = memory.state(out).value
    assert written and all(np.isnan(value[tuple(slice(lo, hi) for lo, hi in box)]).all() for box in written)


def test_lowering_refuses_a_schedule_with_an_rtask_lost_or_run_twice() -> None:
    # The ipu compile skips the schedule verifier's barrier check (the supersteps do not use the
    # barriers), so the lowering itself checks that every rTask runs on exactly one vEU.
    from rammer.backends.ipu.codegen import lower

    exe = _compiled("alexnet-small").executable
    schedule = exe.schedule
    lower(schedule, exe.graph)  # the schedule as compiled lowers
    busy = next(v for v, prog in enumerate(schedule.programs) if any(e < schedule.num_rtasks for e in prog))
    task = next(e for e in schedule.programs[busy] if e < schedule.num_rtasks)
    other = (busy + 1) % len(schedule.programs)
    schedule.programs[other] = [*schedule.programs[other], task]  # run twice
    with pytest.raises(BSPOrderError, match="runs 2 times"):
        lower(schedule, exe.graph)
    schedule.programs[other] = schedule.programs[other][:-1]
    schedule.programs[busy] = [e for e in schedule.programs[busy] if e != task]  # lost
    with pytest.raises(BSPOrderError, match="runs 0 times"):
        lower(schedule, exe.graph)
