"""ONNX's node test cases, for the ops the backend claims.

A case is generated when every op in it is claimed (``capabilities.ops``, or
every op of rammer's registry when that is None).  Its outputs are compared
with ONNX's expected outputs within the looser of the case's tolerance and
the backend's declared one.

Cases whose shape-deciding inputs (a Reshape's shape, a TopK's k) are graph
inputs are compiled per value at run time, as :mod:`rammer.onnx_backend`
does for ONNX's own runner.

Two kinds of case are not held against the backend: those rammer's frontend
cannot import (unsupported element types, sequences: skipped, with the
frontend's reason), and those rammer's ``reference`` backend fails as well
(expected to fail, with the reference's reason): a backend is checked
against rammer's semantics, and where rammer's own specification falls short
there is nothing to conform to.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import pytest

from .plugin import get_target
from .target import REFERENCE, Target, first_line, make_target


@functools.lru_cache(maxsize=1)
def _all_cases() -> tuple[Any, ...]:
    from onnx.backend.test.loader import load_node_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(load_node_model_tests())


_OPS_OF_CASE: dict[str, frozenset[tuple[str, str]]] = {}


def _ops_of(case: Any) -> frozenset[tuple[str, str]]:
    if case.name not in _OPS_OF_CASE:
        _OPS_OF_CASE[case.name] = frozenset(_case_ops(case.model))
    return _OPS_OF_CASE[case.name]


def _case_ops(model: Any) -> set[tuple[str, str]]:
    """(domain, op_type) of every node, looking inside subgraphs and model-local functions."""
    functions = {(f.domain, f.name): f for f in model.functions}
    ops: set[tuple[str, str]] = set()
    stack = [list(model.graph.node)]
    seen_functions: set[tuple[str, str]] = set()
    while stack:
        for node in stack.pop():
            key = (node.domain, node.op_type)
            if key in functions:
                if key not in seen_functions:
                    seen_functions.add(key)
                    stack.append(list(functions[key].node))
                continue
            ops.add(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
            for attr in node.attribute:
                if attr.HasField("g"):
                    stack.append(list(attr.g.node))
                for g in attr.graphs:
                    stack.append(list(g.node))
    return ops


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "node_case" not in metafunc.fixturenames:
        return
    target: Target = get_target(metafunc.config)
    params = [pytest.param(case, id=case.name) for case in _all_cases()
              if all(target.claims_op(op, domain) for domain, op in _ops_of(case))]
    if not params:
        params = [pytest.param(None, id="no-claimed-ops", marks=pytest.mark.skip(
            reason="the backend's capabilities.ops claim none of the ops of ONNX's node test cases"))]
    metafunc.parametrize("node_case", params)


def _run_case(target: Target, graph: Any, case: Any, rtol: float, atol: float) -> str | None:
    """None when ``target`` passes ``case``, else what went wrong."""
    from onnx.backend.test.runner import Runner

    try:
        compiled = target.compile(graph)
    except pytest.skip.Exception:
        raise
    except Exception as exc:
        return f"compile failed: {first_line(exc)}"
    target.require_run()
    initializers = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in initializers]
    wanted = {t.name for t in compiled.inputs}
    for inputs, expected in case.data_sets:
        feeds = {n: v if isinstance(v, list) else np.asarray(v) for n, v in zip(names, inputs) if n in wanted}
        try:
            outs = compiled.run(feeds)
            got = [outs[t.name] for t in compiled.outputs]
        except Exception as exc:
            return f"run failed: {first_line(exc)}"
        try:
            Runner.assert_similar_outputs(expected, got, rtol=rtol, atol=atol)
        except Exception as exc:  # AssertionError, or a crash on outputs of the wrong kind
            return f"outputs differ from ONNX's expected outputs: {first_line(exc)[:600]}"
    return None


def _run_specialised(backend_name: str, case: Any, rtol: float, atol: float) -> str | None:
    """Like :func:`_run_case`, through rammer's ONNX-backend adapter, which
    compiles one specialisation per value of the shape-deciding inputs."""
    from onnx.backend.test.runner import Runner

    from ..errors import UnsupportedOpError
    from ..onnx_backend import RammerBackend

    try:
        rep = RammerBackend.for_backend(backend_name).prepare(case.model)
    except Exception as exc:
        return f"compile failed: {first_line(exc)}"
    for inputs, expected in case.data_sets:
        try:
            got = rep.run([v if isinstance(v, list) else np.asarray(v) for v in inputs])
        except UnsupportedOpError as exc:
            # Refusing an op (naming node and reason) is a correct answer; only its specialised
            # form showed which attributes the case uses.
            pytest.skip(f"backend '{backend_name}' refuses this case at its specialised shapes ({first_line(exc)})")
        except Exception as exc:
            return f"run failed: {first_line(exc)}"
        try:
            Runner.assert_similar_outputs(expected, list(got), rtol=rtol, atol=atol)
        except Exception as exc:
            return f"outputs differ from ONNX's expected outputs: {first_line(exc)[:600]}"
    return None


def _model_dtypes(model: Any) -> set[str]:
    from ..dtypes import from_onnx

    infos = list(model.graph.input) + list(model.graph.output)
    return {from_onnx(vi.type.tensor_type.elem_type) for vi in infos if vi.type.HasField("tensor_type")}


def test_node_case(node_case: Any, conformance_target: Target) -> None:
    from ..errors import RammerError, ShapeError
    from ..frontend import load

    target = conformance_target
    target.skip_if_quantized("ONNX's node cases")
    rtol, atol = target.tolerance(node_case.rtol, node_case.atol)
    try:
        graph = load(node_case.model)
    except ShapeError as exc:
        if exc.needs_constant is None:
            pytest.skip(f"rammer's frontend cannot import this case, whatever the backend ({first_line(exc)})")
        # A shape-deciding input (a Reshape's shape, a TopK's k...) is a graph input:
        # compile per value at run time, as rammer.onnx_backend does.
        target.require_run()
        extra = _model_dtypes(node_case.model) - set(target.caps.dtypes)
        if extra:
            pytest.skip(f"uses dtype(s) {', '.join(sorted(extra))} outside the backend's declared "
                        f"capabilities.dtypes ({', '.join(sorted(target.caps.dtypes))})")
        problem = _run_specialised(target.name, node_case, rtol, atol)
        if problem is None:
            return
        reference_problem = _run_specialised(REFERENCE, node_case, node_case.rtol, node_case.atol)
        if reference_problem is not None:
            pytest.xfail(f"rammer's reference backend fails this case too ({reference_problem[:300]})")
        pytest.fail(f"backend '{target.name}' (specialised on shape inputs): {problem}", pytrace=False)
    except RammerError as exc:
        pytest.skip(f"rammer's frontend cannot import this case, whatever the backend ({first_line(exc)})")
    target.skip_unless_dtypes(graph)
    target.skip_unless_compilable(graph)
    problem = _run_case(target, graph, node_case, rtol, atol)
    if problem is None:
        return
    reference_problem = _run_case(make_target(REFERENCE), graph, node_case, node_case.rtol, node_case.atol)
    if reference_problem is not None:
        pytest.xfail(f"rammer's reference backend fails this case too ({reference_problem[:300]})")
    pytest.fail(f"backend '{target.name}': {problem}", pytrace=False)
