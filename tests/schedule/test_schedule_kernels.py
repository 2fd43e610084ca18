"""vDevice presets and the generic rKernel families."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from sched_util import GraphMaker, zoo_graph

from rammer.errors import RammerError, ScheduleError
from rammer.kernel_families import generic_families
from rammer.kernels_generic import Tiling, candidates_from, chunk_block, pareto
from rammer.rtask import RKernel, RTaskResources, build_roperators, rtask_dependencies
from rammer.vdevice import PRESETS, VDevice, get_preset

SMALL_ZOO = ["lstm-tc-small", "seq2seq-small", "nasnet-small", "resnext-small", "alexnet-small",
             "deepspeech2-small"]


def _candidates(node, graph, vd):
    return candidates_from(generic_families(), node, graph, vd)


# -- vDevice ------------------------------------------------------------------

def test_presets_have_the_documented_veu_counts():
    counts = {name: get_preset(name).num_veus for name in PRESETS}
    assert counts["v100"] == 80 and counts["a100"] == 108 and counts["h100"] == 132
    assert counts["mi250x"] == 110 and counts["gc200"] == 1472
    assert get_preset("gc200").veu.threads == 6
    assert counts["cpu"] == (os.cpu_count() or 1)


def test_vdevice_round_trips_through_json(tmp_path):
    vd = get_preset("h100")
    assert VDevice.from_dict(json.loads(json.dumps(vd.to_dict()))) == vd
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({**vd.to_dict(), "name": "mine", "num_veus": 3}))
    mine = get_preset(str(path))
    assert mine.name == "mine" and mine.num_veus == 3 and mine.veu == vd.veu


def test_unknown_preset_and_bad_vdevice_are_clear_errors():
    with pytest.raises(RammerError, match="known presets: v100"):
        get_preset("v1000")
    with pytest.raises(RammerError, match="at least one vEU"):
        get_preset("v100").with_veus(0)


# -- tiling -------------------------------------------------------------------

@pytest.mark.parametrize("shape,chunk", [((1, 1024), 64), ((2, 3, 7, 5), 10), ((4, 4), 100), ((3, 5), 1)])
def test_tilings_partition_the_tensor(shape, chunk):
    tiling = Tiling(shape, chunk_block(shape, chunk))
    hits = np.zeros(shape, dtype=int)
    for i in range(tiling.count):
        hits[tuple(slice(lo, hi) for lo, hi in tiling.box(i))] += 1
    assert (hits == 1).all()
    assert tiling.block_size <= max(chunk, shape[-1])


def test_pareto_keeps_only_undominated_kernels():
    def k(n, d):
        return RKernel("f", {"n": n}, n, d)

    kept = pareto([k(1, 9.0), k(2, 5.0), k(3, 4.0), k(4, 5.0), k(8, 1.5), k(16, 1.4)], num_veus=8)
    # (latency, work) on 8 vEUs: 1 -> (9, 9), 2 -> (5, 10), 3 -> (4, 12), 4 -> (5, 20): slower and more
    # work than 3; 8 -> (1.5, 12): as much work as 3 but faster; 16 -> (2.8, 22.4): two rounds.
    assert sorted(x.num_rtasks for x in kept) == [1, 2, 8]


# -- families on every zoo model -----------------------------------------------------

def _writes_partition_outputs(rop, graph) -> None:
    """Every kernel's rTasks write each output element exactly once."""
    node = rop.node
    for kernel in rop.kernels:
        counters = {}
        for slot, name in enumerate(node.outputs):
            if name:
                counters[slot] = np.zeros(graph.value_info[name].shape, dtype=np.int32)
        for r in range(kernel.num_rtasks):
            acc = kernel.accesses(r)
            for slot, box in acc.writes:
                counters[slot][tuple(slice(lo, hi) for lo, hi in box)] += 1
            for slot, box in acc.reads:
                shape = graph.value_info[node.inputs[slot]].shape
                assert len(box) == len(shape) and all(0 <= lo < hi <= d for (lo, hi), d in zip(box, shape)), \
                    (node.name, kernel.kernel_id, slot, box, shape)
        for slot, c in counters.items():
            assert (c == 1).all(), f"{node.name} {kernel.kernel_id} output {slot}: counts {np.unique(c)}"


@pytest.mark.parametrize("model", SMALL_ZOO)
def test_every_zoo_op_gets_kernels_whose_tiles_partition_its_outputs(model):
    graph = zoo_graph(model)
    vd = get_preset("v100")
    rops = build_roperators(graph, vd, _candidates)
    seen = set()
    for rop in rops:
        assert rop.kernels
        assert all(k.duration_us > vd.rtask_overhead_us * 0.999 for k in rop.kernels)
        key = (rop.node.op_type, tuple(graph.value_info[o].shape for o in rop.node.outputs if o))
        if key not in seen:
            seen.add(key)
            _writes_partition_outputs(rop, graph)
    # The fallback is only used where no family applies.
    assert not [r.node.op_type for r in rops if r.kernels[0].family == "whole"]


def test_finer_tiles_are_faster_but_do_more_work():
    g = GraphMaker(1, 1024)
    x = g.input()
    w = g.const("w", np.zeros((1024, 1024), np.float32))
    (y,) = g.op("MatMul", [x, w])
    graph = g.graph([y])
    vd = get_preset("v100")
    kernels = sorted(_candidates(graph.nodes[0], graph, vd), key=lambda k: k.num_rtasks)
    assert len(kernels) >= 3
    latencies = [k.latency_us(vd.num_veus) for k in kernels]
    works = [k.work_us(vd.num_veus) for k in kernels]
    assert latencies == sorted(latencies, reverse=True)
    assert works == sorted(works)


def test_local_memory_only_devices_drop_kernels_that_do_not_fit():
    g = GraphMaker(1, 4096)
    x = g.input()
    w = g.const("w", np.zeros((4096, 4096), np.float32))  # 64 MiB of weights
    (y,) = g.op("MatMul", [x, w])
    graph = g.graph([y])
    ipu = get_preset("gc200")
    rops = build_roperators(graph, ipu, _candidates)
    assert rops[0].kernels
    assert all(k.resources.local_mem_bytes <= ipu.veu.local_mem_bytes for k in rops[0].kernels)
    # the whole matrix never fits one tile: few rTasks only with a K loop staging slices of A and B
    assert all(k.num_rtasks > 100 or "k_slice" in k.params for k in rops[0].kernels)
    # A vEU too small for any tiling is reported with the node's name.
    tiny = VDevice.from_dict({**ipu.to_dict(), "veu": {"threads": 6, "local_mem_bytes": 64}})
    with pytest.raises(ScheduleError, match="n0_MatMul.*no rKernel can run it"):
        build_roperators(graph, tiny, _candidates)


def test_rtask_dependencies_follow_tiles():
    g = GraphMaker(1, 256)
    x = g.input()
    (a,) = g.op("Relu", [x])
    (b,) = g.op("Sigmoid", [a])
    w = g.const("w", np.zeros((256, 256), np.float32))
    (c,) = g.op("MatMul", [b, w])
    graph = g.graph([c])
    vd = get_preset("v100")
    relu, sig, mm = (build_roperators(graph, vd, _candidates)[i] for i in range(3))
    k_relu = max(relu.kernels, key=lambda k: k.num_rtasks)
    k_sig = max(sig.kernels, key=lambda k: k.num_rtasks)
    assert k_relu.num_rtasks == k_sig.num_rtasks == 4
    # Same tiling: each Sigmoid tile reads exactly the Relu tile it matches.
    assert rtask_dependencies(relu.node, k_relu, sig.node, k_sig) == [[0], [1], [2], [3]]
    # A MatMul tile reads the whole row of its input: every Sigmoid tile.
    k_mm = max(mm.kernels, key=lambda k: k.num_rtasks)
    deps = rtask_dependencies(sig.node, k_sig, mm.node, k_mm)
    assert all(d == [0, 1, 2, 3] for d in deps)


def test_resources_fit_checks_both_limits():
    veu = get_preset("v100").veu
    assert RTaskResources(1024, 96 * 1024).fits(veu)
    assert not RTaskResources(1025, 0).fits(veu)
    assert not RTaskResources(1, 96 * 1024 + 1).fits(veu)
    assert math.isclose(get_preset("v100").flops_per_us * 80, 15.7e6)
