"""A plugin adds an rKernel to the opencl backend through ``rammer_register_rkernels`` and the core
scheduler chooses it (the GPU runs its own tiling with that many rTasks; the plugin's figures cost it).
No device needed: the program is built, not run."""

from __future__ import annotations

import types

import pytest
from helpers import matmul_model

import rammer
from rammer import plugins
from rammer.backends.gpu.compiler import gpu_rkernels
from rammer.hookspecs import hookimpl
from rammer.rtask import RKernel


class _ProfiledMatMul:
    """Offers a MatMul in as many rTasks as each of the GPU's tilings (almost free, so a policy picks
    it over the GPU's own costs), and in a count no tiling has."""

    name = "plugin.matmul"
    op_types = frozenset({"MatMul"})

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def candidates(self, node, graph, vdevice):
        return [RKernel(family="plugin.matmul", params={"tasks": n}, num_rtasks=n, duration_us=1e-9)
                for n in self.counts]


@pytest.fixture(autouse=True)
def fresh_plugins():
    plugins.reset()
    yield
    plugins.reset()


def _register(for_backend: str, family: _ProfiledMatMul) -> None:
    @hookimpl
    def rammer_register_rkernels(backend, register):
        if backend == for_backend:
            register(family)

    plugins.register_plugin(types.SimpleNamespace(rammer_register_rkernels=rammer_register_rkernels),
                            f"profiled-{for_backend}")


def _families(prog) -> list[str]:
    return [op.kernel.family for op in prog.schedule.ops]


def test_opencl_chooses_a_plugin_rkernel():
    matmul_graph = rammer.load(matmul_model(64))
    backend = plugins.backends()["opencl"]
    before = backend.program(matmul_graph, {})
    assert all(f.startswith("gpu.") for f in _families(before))
    graph = backend.prepare_graph(matmul_graph).graph
    tilings = sorted({k.num_rtasks for k in gpu_rkernels(graph.nodes[0], graph, backend.vdevice(None))})
    impossible = max(tilings) * 1000 + 7  # no tiling has this many rTasks: not offered to the scheduler

    _register("cuda", _ProfiledMatMul(tilings))  # another backend's plugin changes nothing here
    assert _families(backend.program(matmul_graph, {})) == _families(before)

    _register("opencl", _ProfiledMatMul([*tilings, impossible]))
    prog = backend.program(matmul_graph, {})
    assert _families(prog) == ["plugin.matmul"]
    chosen = prog.schedule.ops[0].kernel.num_rtasks
    assert chosen in tilings
    assert prog.report["rtasks"] == chosen
    assert [o.kernel.num_rtasks for o in prog.schedule.ops if o.kernel.num_rtasks == impossible] == []
    assert "rammer_main" in prog.source("opencl")
