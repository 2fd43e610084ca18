"""The built-in policies on the zoo, several vDevices, and plugins."""

from __future__ import annotations

import numpy as np
import pytest
from sched_util import GraphMaker, dependency_violations, execute, zoo_graph

from rammer import plugins
from rammer.errors import PluginError, RammerError
from rammer.hookspecs import hookimpl
from rammer.rtask import RKernel
from rammer.schedule import build_problem, get_policy, op_predecessors, policies, simulate, verify
from rammer.schedule.opbyop import OpByOpPolicy
from rammer.schedule.wavefront import select_kernels
from rammer.vdevice import get_preset

SMALL_ZOO = ["lstm-tc-small", "seq2seq-small", "nasnet-small", "resnext-small", "alexnet-small",
             "deepspeech2-small"]
PRESETS = ["v100", "a100", "h100", "mi250x", "gc200", "cpu", "cortex-m7"]
POLICIES = ["wavefront", "wavefront-fastest", "op-by-op"]


def test_builtin_policies_are_registered():
    assert set(POLICIES) <= set(policies())
    with pytest.raises(RammerError, match="unknown scheduling policy 'nope'; known policies: op-by-op"):
        get_policy("nope")


@pytest.mark.slow
@pytest.mark.parametrize("model", SMALL_ZOO)
@pytest.mark.parametrize("preset", PRESETS)
def test_every_policy_verifies_on_the_zoo(model, preset):
    graph = zoo_graph(model)
    problem = build_problem(graph, get_preset(preset))
    preds = op_predecessors(graph)
    rng = np.random.default_rng(0)
    results = {}
    for name in POLICIES:
        schedule = get_policy(name).schedule(problem)
        verify(schedule, graph)
        sim = simulate(schedule)
        results[name] = sim.makespan_us
        assert 0 < sim.utilization <= 1 + 1e-9
        assert not dependency_violations(schedule, preds, sim.start_us, sim.finish_us)
        # Correct whatever the rTasks really take: random durations, independent executor.
        start, finish = execute(schedule, rng.uniform(0.1, 10.0, schedule.num_rtasks))
        assert not dependency_violations(schedule, preds, start, finish)
    if get_preset(preset).num_veus > 1:
        assert results["wavefront"] < results["op-by-op"]


def test_wavefront_beats_op_by_op_on_a_wide_graph_and_uses_fewer_barriers():
    g = GraphMaker(8, 256, "wide")
    x = g.input()
    branches = [g.op("Tanh", [g.op("Relu", [x])[0]])[0] for _ in range(16)]
    total = branches[0]
    for b in branches[1:]:
        (total,) = g.op("Add", [total, b])
    graph = g.graph([total])
    problem = build_problem(graph, get_preset("v100"))
    wave = get_policy("wavefront").schedule(problem)
    base = get_policy("op-by-op").schedule(problem)
    for s in (wave, base):
        verify(s, graph)
    assert simulate(wave).makespan_us < 0.5 * simulate(base).makespan_us
    assert wave.num_barriers < base.num_barriers


def test_a_chain_on_one_veu_needs_no_barrier():
    g = GraphMaker(1, 64, "chain")
    (y,) = g.op("Relu", [g.input()])
    for _ in range(5):
        (y,) = g.op("Sigmoid", [y])
    graph = g.graph([y])
    s = get_policy("wavefront").schedule(build_problem(graph, get_preset("v100")))
    verify(s, graph)
    assert s.num_barriers == 0 and sum(1 for p in s.programs if p) == 1


def _kernel(n, d):
    return RKernel("k", {"n": n}, n, d)


def test_kernel_selection_fastest_when_the_wave_fits_and_efficient_otherwise():
    class Rop:
        def __init__(self, kernels):
            self.kernels = kernels

        def fastest(self, v):
            return min(self.kernels, key=lambda k: (k.latency_us(v), k.work_us(v)))

        def most_efficient(self, v):
            return min(self.kernels, key=lambda k: (k.work_us(v), k.latency_us(v)))

    class P:
        def __init__(self, rops, num_veus):
            self.rops = rops
            self.vdevice = get_preset("v100").with_veus(num_veus)

    fine, coarse = _kernel(4, 1.0), _kernel(1, 3.0)   # fine: faster, 4 vEU-us; coarse: 3 vEU-us
    # 2 ops x 4 rTasks fit 8 vEUs: fastest kernels.
    choice = select_kernels(P([Rop([fine, coarse]), Rop([fine, coarse])], 8), [0, 1])
    assert all(k is fine for k in choice.values())
    # 8 ops on 8 vEUs do not fit: the efficient kernel, since 8 x 3 / 8 = 3 us of work bounds the wave anyway.
    rops = [Rop([fine, coarse]) for _ in range(8)]
    choice = select_kernels(P(rops, 8), list(range(8)))
    assert all(k is coarse for k in choice.values())
    # One long op among short ones is the bottleneck: it moves to its faster kernel.
    slow_fine, slow_coarse = _kernel(4, 2.0), _kernel(1, 6.0)
    short = [Rop([_kernel(1, 0.5), _kernel(4, 0.2)]) for _ in range(8)]
    choice = select_kernels(P(short + [Rop([slow_fine, slow_coarse])], 8), list(range(9)))
    assert choice[8] is slow_fine
    assert select_kernels(P(rops, 8), list(range(8)), fastest_only=True)[0] is fine


class _ReversePolicy(OpByOpPolicy):
    name = "test-reverse"
    description = "op-by-op filling vEUs from the last"


class _ExtraFamily:
    name = "test.half"
    op_types = frozenset(["Relu"])

    def candidates(self, node, graph, vd):
        return [RKernel(self.name, {"x": 1}, 2, 0.01)]


class _Plugin:
    @hookimpl
    def rammer_register_policies(self, register):
        register(_ReversePolicy())

    @hookimpl
    def rammer_register_rkernels(self, backend, register):
        if backend == "reference":
            register(_ExtraFamily())


def test_plugins_add_policies_and_rkernels():
    plugins.register_plugin(_Plugin(), "test-schedule-plugin")
    try:
        assert "test-reverse" in policies()
        backend = plugins.get_backend("reference")
        g = GraphMaker(4, 64, "p")
        (y,) = g.op("Relu", [g.input()])
        graph = g.graph([y])
        problem = build_problem(graph, backend.vdevice("v100"), backend)
        ids = [k.kernel_id for k in problem.rops[0].kernels]
        assert "test.half[x=1]" in ids and any(i.startswith("elementwise.tile") for i in ids)
        s = get_policy("wavefront").schedule(problem)
        verify(s, graph)
        assert s.ops[0].kernel.family == "test.half"  # the fastest candidate wins a fitting wave
    finally:
        plugins.unregister_plugin("test-schedule-plugin")
    assert "test-reverse" not in policies()


def test_a_policy_without_a_name_is_rejected():
    class Bad:
        @hookimpl
        def rammer_register_policies(self, register):
            register(object())

    plugins.register_plugin(Bad(), "test-bad-policy")
    try:
        with pytest.raises(PluginError, match="not a scheduling policy"):
            policies()
    finally:
        plugins.unregister_plugin("test-bad-policy")


def test_backend_defaults_for_vdevice_and_rkernels():
    backend = plugins.get_backend("reference")
    assert backend.vdevice(None).name == "cpu"
    assert backend.vdevice("mi250x").num_veus == 110


def test_kernel_selection_handles_kernels_tied_with_the_fastest():
    class Rop:
        def __init__(self, fastest, efficient):
            self.kernels = [fastest, efficient]

        def fastest(self, v):
            return self.kernels[0]

        def most_efficient(self, v):
            return self.kernels[1]

    # Op 0's efficient kernel ties its fastest one (another object, same figures) and is the
    # wave's bottleneck; the small ops' 16 fine rTasks do not fit 8 vEUs.
    rops = [Rop(_kernel(1, 10.0), _kernel(1, 10.0))] + [Rop(_kernel(8, 0.1), _kernel(1, 0.5)) for _ in range(2)]

    class P:
        vdevice = get_preset("v100").with_veus(8)

    P.rops = rops
    choice = select_kernels(P(), [0, 1, 2])
    assert choice[0] is rops[0].kernels[1]
    assert choice[1] is rops[1].kernels[1] and choice[2] is rops[2].kernels[1]


def _two_chains() -> tuple:
    g = GraphMaker(4, 64, "two-chains")
    x = g.input()
    ends = []
    for _ in range(2):
        (y,) = g.op("Relu", [x])
        for _ in range(3):
            (y,) = g.op("Tanh", [y])
        ends.append(y)
    return g.graph([g.op("Add", ends)[0]])


def _op_order(schedule) -> list[str]:
    order: list[str] = []
    for entry in schedule.programs[0]:
        if not schedule.is_barrier(entry):
            name = schedule.ops[int(schedule.rtask_op[entry])].name
            if not order or order[-1] != name:
                order.append(name)
    return order


def test_one_veu_runs_each_chain_to_its_end_before_the_next():
    # Interleaving two independent chains on one vEU (a bidirectional RNN's directions) made each
    # op find its weights evicted by the other chain's; depth first, one chain runs whole.
    graph = _two_chains()
    one = get_preset("cpu").with_veus(1)
    s = get_policy("wavefront").schedule(build_problem(graph, one))
    verify(s, graph)
    order = _op_order(s)
    chain_of = {n.name: (0 if i < 4 else 1) for i, n in enumerate(graph.nodes) if n.op_type != "Add"}
    chains = [chain_of[name] for name in order if name in chain_of]
    assert chains == [chains[0]] * 4 + [1 - chains[0]] * 4, order
    assert order[-1].endswith("_Add")


def test_several_veus_keep_the_wavefront_order():
    graph = _two_chains()
    s = get_policy("wavefront").schedule(build_problem(graph, get_preset("cpu").with_veus(2)))
    verify(s, graph)
    assert s.options["waves"] == 5  # the two chains step by step, then the Add
