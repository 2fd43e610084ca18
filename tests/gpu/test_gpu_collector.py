"""The GPU compile runs with Python's cyclic collector paused (rammer.gc_freeze.collector_paused): its
passes over the program's per-rTask objects took a third of a full-size compile.  It is enabled
again afterwards, also when the compile fails, and a process that disabled it keeps it off."""

from __future__ import annotations

import gc

import pytest

from rammer import gc_freeze as collector
from rammer import plugins, zoo
from rammer.errors import RammerError
from rammer.frontend import load


def test_compile_pauses_the_collector_and_resumes_it(monkeypatch):
    be = plugins.backends()["cuda"]
    seen: list[bool] = []
    real = type(be).program

    def program(self, graph, options):
        seen.append(gc.isenabled())
        return real(self, graph, options)

    monkeypatch.setattr(type(be), "program", program)
    graph = load(zoo.build("alexnet-small", seed=0))
    assert gc.isenabled()
    be.compile(graph, {})
    assert seen == [False] and gc.isenabled()

    def failing(self, graph, options):
        seen.append(gc.isenabled())
        raise RammerError("no program")

    monkeypatch.setattr(type(be), "program", failing)
    with pytest.raises(RammerError, match="no program"):
        be.compile(graph, {})
    assert seen == [False, False] and gc.isenabled()


def test_a_process_that_disabled_the_collector_keeps_it_off():
    gc.disable()
    try:
        with collector.collector_paused():
            with collector.collector_paused():  # nested (two compiles at once): the outer one resumes
                assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with collector.collector_paused():
        with collector.collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
