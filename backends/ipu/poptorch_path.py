"""Running on a real IPU through poptorch, when it is importable.

UNTESTED HERE: poptorch ships only in Graphcore's Poplar SDK, which is not on
the package registries this project builds with; the tests only check the
guard (with a fake module).  The IR is rebuilt as a torch module op by op
(a small table; other ops are refused at compile time, never run wrongly)
and run with ``poptorch.inferenceModel``.  poptorch places per IPU, not per
tile, so the tile mapping and superstep program are exported as JSON next to
it for Poplar tooling (``compile(..., export_json=path)``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rammer.errors import BackendUnavailableError, UnsupportedOpError
from rammer.ir import Graph


def poptorch_status() -> tuple[bool, str]:
    """Whether poptorch can be imported, and if not why."""
    try:
        importlib.import_module("poptorch")
    except Exception as exc:  # ImportError, or a broken SDK install
        return False, f"poptorch not importable: {type(exc).__name__}"
    return True, "poptorch importable"


def _torch_ops(torch: Any) -> dict[str, Callable[..., Any]]:
    F = torch.nn.functional
    return {
        "Add": lambda n, a, b: a + b, "Sub": lambda n, a, b: a - b, "Mul": lambda n, a, b: a * b,
        "Div": lambda n, a, b: a / b, "MatMul": lambda n, a, b: torch.matmul(a, b),
        "Relu": lambda n, x: torch.relu(x), "Sigmoid": lambda n, x: torch.sigmoid(x),
        "Tanh": lambda n, x: torch.tanh(x), "Identity": lambda n, x: x,
        "Gemm": lambda n, a, b, c=None: (
            n.attrs.get("alpha", 1.0) * ((a.T if n.attrs.get("transA") else a) @ (b.T if n.attrs.get("transB") else b))
            + (0 if c is None else n.attrs.get("beta", 1.0) * c)),
        "Softmax": lambda n, x: F.softmax(x, dim=n.attrs.get("axis", -1)),
    }


def build_torch_module(graph: Graph, torch: Any) -> Any:
    """A ``torch.nn.Module`` computing ``graph`` (the ops of the table above)."""
    table = _torch_ops(torch)
    missing = sorted({n.op_type for n in graph.nodes if n.op_type not in table or n.domain not in ("", "ai.onnx")})
    if missing:
        raise UnsupportedOpError(f"ipu backend, poptorch path: ops {', '.join(missing)} have no torch lowering "
                                 "here; use engine='simulator'")

    class IRModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.consts = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in graph.initializers.items()}

        def forward(self, *inputs: Any) -> Any:
            env = dict(self.consts)
            env.update({t.name: x for t, x in zip(graph.inputs, inputs)})
            for node in graph.nodes:
                out = table[node.op_type](node, *[env[i] if i else None for i in node.inputs])
                env[node.outputs[0]] = out
            return tuple(env[t.name] for t in graph.outputs)

    return IRModule()


def build_poptorch_runner(graph: Graph, schedule: Any, program: Any, required: bool = False
                          ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]] | None:
    """A function running ``graph`` with ``poptorch.inferenceModel``; None (simulator) when poptorch
    is absent or an op has no torch lowering, unless ``required``."""
    ok, why = poptorch_status()
    if not ok:
        if required:
            raise BackendUnavailableError(f"ipu backend: engine='poptorch' needs the Poplar SDK ({why})")
        return None
    poptorch = importlib.import_module("poptorch")
    import torch

    try:
        module = build_torch_module(graph, torch)
    except UnsupportedOpError:
        if required:
            raise
        return None
    opts = poptorch.Options()
    if not poptorch.ipuHardwareIsAvailable():
        opts.useIpuModel(True)
    model = poptorch.inferenceModel(module.eval(), opts)

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(feeds[t.name])) for t in graph.inputs]
        outs = model(*args)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        return {t.name: np.asarray(o.detach().numpy()) for t, o in zip(graph.outputs, outs)}

    return run
