"""Every ONNX node-suite model rammer can load gets kernels whose tiles
partition its outputs, and schedules that verify (robustness across ops,
ranks, dtypes and odd shapes)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rammer
from rammer.errors import RammerError
from rammer.schedule import build_problem, get_policy, verify
from rammer.vdevice import get_preset


def _loadable_cases():
    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in load_node_model_tests():
            try:
                yield case.name, rammer.load(case.model)
            except RammerError:
                continue  # unsupported by the frontend: counted in docs/benchmarks.md
            except Exception:  # noqa: BLE001 - the node suite has cases the checker rejects
                continue


def _check_writes(rop, graph) -> None:
    node = rop.node
    for kernel in rop.kernels:
        counts = {s: np.zeros(graph.value_info[o].shape, dtype=np.int32) for s, o in enumerate(node.outputs) if o}
        for r in range(kernel.num_rtasks):
            access = kernel.accesses(r)
            for slot, box in access.writes:
                counts[slot][tuple(slice(lo, hi) for lo, hi in box)] += 1
            for slot, box in access.reads:
                shape = graph.value_info[node.inputs[slot]].shape
                assert len(box) == len(shape) and all(0 <= lo <= hi <= d for (lo, hi), d in zip(box, shape)), \
                    f"{node.label} {kernel.kernel_id}: read box {box} outside input {slot} {shape}"
        for slot, c in counts.items():
            assert c.size == 0 or (c == 1).all(), f"{node.label} {kernel.kernel_id}: output {slot} not partitioned"


@pytest.mark.slow
def test_node_suite_models_schedule_and_verify():
    vdevices = [get_preset("v100").with_veus(6), get_preset("gc200").with_veus(16)]
    count = 0
    for name, graph in _loadable_cases():
        for vd in vdevices:
            try:
                problem = build_problem(graph, vd)
            except RammerError as exc:
                pytest.fail(f"{name} on {vd.name}: {exc}")
            for rop in problem.rops:
                _check_writes(rop, graph)
            for policy in ("wavefront", "op-by-op"):
                verify(get_policy(policy).schedule(problem), graph)
        count += 1
    assert count > 1000
