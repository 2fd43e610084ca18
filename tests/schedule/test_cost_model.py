"""One cost model (rammer.cost.rtask_duration) and one ``cpu`` vDevice (PRESETS["cpu"])."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sched_util import GraphMaker

from rammer.backends.cpu.ops import CostModel
from rammer.backends.cpu.scheduling import cpu_vdevice
from rammer.cost import rtask_duration
from rammer.errors import RammerError
from rammer.kernels_dense import MatMulFamily
from rammer.kernels_generic import ElementwiseFamily
from rammer.vdevice import get_preset


def test_the_cpu_backends_vdevice_is_the_cpu_preset():
    preset = get_preset("cpu")
    mine = cpu_vdevice(3)
    assert mine.num_veus == 3
    assert replace(mine, num_veus=preset.num_veus, description=preset.description) == preset


@pytest.mark.parametrize("blas", [False, True])
def test_the_cpu_cost_model_is_the_core_one(blas):
    vd = get_preset("cpu")
    for flops, nbytes in [(1e6, 1e3), (1e3, 1e6), (0.0, 0.0)]:
        assert CostModel().task_us(flops, nbytes, blas) == rtask_duration(vd, flops, nbytes, contraction=blas)
    # loops run at the loop rate, contractions at the peak
    assert CostModel().task_us(1.2e6, 0, blas) == pytest.approx(0.15 + (1e6 / 60e3 * 1.2 if blas else 100.0))


def test_loop_rate_defaults_to_the_peak():
    v100 = get_preset("v100")
    assert v100.loop_gflops is None and v100.loop_flops_per_us == v100.flops_per_us
    assert rtask_duration(v100, 1e6, 0, contraction=False) == rtask_duration(v100, 1e6, 0, contraction=True)
    with pytest.raises(RammerError, match="positive"):
        replace(v100, loop_gflops=0.0)


def test_generic_families_cost_loops_and_contractions_by_the_vdevice():
    gm = GraphMaker(64, 64)
    x = gm.input()
    (y,) = gm.op("Sigmoid", [x])  # 8 FLOPs per element: compute-bound at the loop rate
    w = gm.const("w", np.ones((64, 64), "float32"))
    (z,) = gm.op("MatMul", [y, w])
    g = gm.graph([z])
    cpu = get_preset("cpu")
    fast = replace(cpu, loop_gflops=cpu.veu_gflops)
    ew, mm = g.nodes
    slow_ew = ElementwiseFamily().candidates(ew, g, cpu)
    fast_ew = ElementwiseFamily().candidates(ew, g, fast)
    assert min(k.duration_us for k in slow_ew) > min(k.duration_us for k in fast_ew)
    assert [k.duration_us for k in MatMulFamily().candidates(mm, g, cpu)] == \
        [k.duration_us for k in MatMulFamily().candidates(mm, g, fast)]  # contractions: the peak either way
