"""A schedule's JSON is self-contained: op types, attributes, tensors (with arena offsets once
placed) and every rTask's tile, enough to render a program from the JSON alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sched_util import zoo_graph

from rammer.interpreter import run_graph
from rammer.ir import Graph, Node, TensorInfo
from rammer.schedule import Schedule, build_problem, get_policy, verify
from rammer.schedule.records import decode_attr
from rammer.vdevice import get_preset


def _schedule(model: str, preset: str = "v100", policy: str = "wavefront") -> Schedule:
    graph = zoo_graph(model)
    return get_policy(policy).schedule(build_problem(graph, get_preset(preset).with_veus(8)))


@pytest.mark.parametrize("model,preset", [("nasnet-small", "v100"), ("lstm-tc-small", "gc200"),
                                          ("resnext-small", "cortex-m7")])
def test_written_and_read_back_it_has_the_same_content(model, preset, tmp_path):
    sched = _schedule(model, preset)
    sched.place({t: 64 * k for k, t in enumerate(sorted(zoo_graph(model).value_info))})
    path = tmp_path / "s.json"
    sched.to_json(str(path))
    back = Schedule.from_json(str(path))
    assert json.dumps(back.to_dict(), sort_keys=True) == json.dumps(sched.to_dict(), sort_keys=True)
    assert back.offsets == sched.offsets
    verify(back, zoo_graph(model))


def test_each_operator_carries_its_node_tensors_and_tiles():
    graph = zoo_graph("nasnet-small")
    data = _schedule("nasnet-small").to_dict()
    by_name = {op["name"]: op for op in data["operators"]}
    for node in graph.nodes:
        op = by_name[node.name]
        assert op["op_type"] == node.op_type
        assert [t["name"] for t in op["inputs"]] == list(node.inputs)
        assert [t["name"] for t in op["outputs"]] == list(node.outputs)
        for t in op["inputs"] + op["outputs"]:
            info = graph.value_info[t["name"]]
            assert t["dtype"] == info.dtype and tuple(t["shape"]) == info.shape
            assert t.get("constant", False) == (t["name"] in graph.initializers)
        for key, value in node.attrs.items():
            got = decode_attr(op["attrs"][key])
            assert np.array_equal(np.asarray(got), np.asarray(value)), (node.name, key)
        assert len(op["rtasks"]) == op["num_rtasks"]
    conv = next(op for op in data["operators"] if op["op_type"] == "Conv")
    assert conv["params"] and conv["rtasks"][0]["writes"][0][0] == 0  # slot 0 of the outputs, a box


def test_a_program_renders_from_the_json_alone():
    """Run the schedule from its JSON only (plus the model's constants): each rTask computes its
    op on the op's inputs and writes only its tile's output boxes, in a valid program order."""
    graph = zoo_graph("resnext-small")
    data = json.loads(json.dumps(_schedule("resnext-small").to_dict()))
    rng = np.random.default_rng(0)
    env = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in graph.inputs}
    env.update({k: np.asarray(v) for k, v in graph.initializers.items()})
    ops = data["operators"]
    first = [op["first_rtask"] for op in ops]
    done = set()
    cursor = [0] * len(data["programs"])
    results: dict[int, list[np.ndarray]] = {}
    progress = True
    while progress:
        progress = False
        for v, prog in enumerate(data["programs"]):
            while cursor[v] < len(prog):
                entry = prog[cursor[v]]
                if "barrier" in entry:
                    if not set(entry["barrier"]) <= done:
                        break
                else:
                    i = next(k for k in range(len(ops)) if first[k] <= entry["id"] < first[k] + ops[k]["num_rtasks"])
                    op = ops[i]
                    if i not in results:  # the whole op on its inputs, from the JSON's description
                        infos = {t["name"]: TensorInfo(t["name"], t["dtype"], tuple(t["shape"]))
                                 for t in op["inputs"] + op["outputs"] if t["name"]}
                        node = Node(op["op_type"], tuple(t["name"] for t in op["inputs"]),
                                    tuple(t["name"] for t in op["outputs"]), op["name"], "",
                                    {k: decode_attr(a) for k, a in op["attrs"].items()})
                        ins = [infos[t["name"]] for t in op["inputs"] if t["name"]]
                        outs = [infos[t["name"]] for t in op["outputs"] if t["name"]]
                        one = Graph(op["name"], tuple(ins), tuple(outs), (node,), {}, infos, graph.opset)
                        results[i] = list(run_graph(one, {t.name: env[t.name] for t in ins}))
                        for t in outs:
                            env.setdefault(t.name, np.full(t.shape, np.nan, t.dtype))
                    for slot, box in op["rtasks"][entry["id"] - op["first_rtask"]]["writes"]:
                        name = op["outputs"][slot]["name"]
                        region = tuple(slice(lo, hi) for lo, hi in box)
                        env[name][region] = results[i][slot][region]
                done.add(entry["id"])
                cursor[v] += 1
                progress = True
    assert all(c == len(p) for c, p in zip(cursor, data["programs"]))
    want = run_graph(graph, {t.name: env[t.name] for t in graph.inputs})
    for t, w in zip(graph.outputs, want):
        np.testing.assert_allclose(env[t.name], w, rtol=1e-5, atol=1e-5)


def test_schedules_without_the_self_contained_fields_still_load():
    data = _schedule("alexnet-small").to_dict()
    for op in data["operators"]:
        for key in ("attrs", "inputs", "outputs", "rtasks"):
            op.pop(key)
    old = Schedule.from_dict(data)
    assert old.ops[0].inputs == () and old.num_rtasks == data["num_rtasks"]


@pytest.mark.parametrize("model", ["nasnet-small", "lstm-tc-small"])
def test_cpu_task_tables_render_the_same_from_the_json(model, tmp_path):
    """Written to JSON and read back, the cpu backend's schedules render (through its table
    writer, over the same lowered ops) to the same task tables, byte for byte."""
    from rammer.backends.cpu.codegen import build_tables
    from rammer.backends.cpu.compiler import compile_program
    from rammer.backends.cpu.graph_passes import prepare
    from rammer.lower.operator import split_at_host

    compiled = compile_program(prepare(zoo_graph(model)), 2, "wavefront")
    back = []
    for k, sched in enumerate(compiled.schedules):
        path = tmp_path / f"s{k}.json"
        sched.to_json(str(path))
        back.append(Schedule.from_json(str(path)))
    seg_ops = [s for s in split_at_host(compiled.lowered.ops) if isinstance(s, list)]
    scratch_base = compiled.program.arena_bytes - compiled.tables.scratch_bytes - 64
    tables = build_tables(seg_ops, back, compiled.lowered.buffers, compiled.program.num_veus, scratch_base)
    for name in ("T", "X", "R"):
        assert getattr(tables, name).tobytes() == getattr(compiled.tables, name).tobytes(), name
    assert tables.kernel_names == compiled.tables.kernel_names
    assert tables.scratch_bytes == compiled.tables.scratch_bytes
