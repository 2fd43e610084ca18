"""A plugin adds an rKernel to the cpu backend through ``rammer_register_rkernels`` and the
scheduler chooses it (the cpu runs the op's tiling with that many rTasks)."""

from __future__ import annotations

import types

import pytest
from helpers import matmul_model

import rammer
from rammer import plugins
from rammer.backends.cpu.compiler import compile_program
from rammer.hookspecs import hookimpl
from rammer.rtask import RKernel


class _ProfiledMatMul:
    """Says one rTask of a MatMul takes almost no time, so a policy picks it over the cpu's own costs."""

    name = "plugin.matmul"
    op_types = frozenset({"MatMul"})

    def candidates(self, node, graph, vdevice):
        return [RKernel(family="plugin.matmul", params={"tasks": 1}, num_rtasks=1, duration_us=1e-6),
                RKernel(family="plugin.matmul", params={"tasks": 3}, num_rtasks=3, duration_us=1e-9)]


@pytest.fixture
def matmul_graph():
    return rammer.load(matmul_model(64))


@pytest.fixture(autouse=True)
def fresh_plugins():
    plugins.reset()
    yield
    plugins.reset()


def _families(compiled):
    return [op.kernel.family for s in compiled.schedules for op in s.ops]


def test_cpu_chooses_a_plugin_rkernel(matmul_graph):
    assert _families(compile_program(matmul_graph, num_veus=2)) == ["cpu.gemm"]

    @hookimpl
    def rammer_register_rkernels(backend, register):
        if backend == "cpu":
            register(_ProfiledMatMul())

    plugins.register_plugin(types.SimpleNamespace(rammer_register_rkernels=rammer_register_rkernels), "profiled")
    compiled = compile_program(matmul_graph, num_veus=2)
    assert _families(compiled) == ["plugin.matmul"]
    # the 3-rTask offer has no cpu tiling with 3 parts on 2 vEUs, so only the runnable one is left
    assert [op.kernel.num_rtasks for s in compiled.schedules for op in s.ops] == [1]
    assert int(compiled.tables.stats["rows"]) >= 1
