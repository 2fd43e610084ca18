"""Activation memory of the mcu program: operator order and one static arena on one vEU.

The order: among the layers ready to run, the one after which the fewest activation bytes are live
(ties: the original order); the greedy order is kept only if its planned peak is lower than the
original's.  Offsets come from the core arena planner (:func:`rammer.memory.plan_arena`) in one
memory space "sram", 4-byte aligned.  The network input and output are the caller's buffers
(``model_run(in, out, ...)``), not in the arena.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rammer.errors import CompileError
from rammer.memory import ArenaBuffer, ArenaOp, plan_arena

from .quantize import QLayer, QModel

ALIGN = 4


@dataclass
class MemoryPlan:
    order: list[int]  # indices into model.layers
    offsets: dict[int, int]  # tensor id -> arena offset (input/output: not in the arena)
    arena_bytes: int
    #: Activation bytes live while each layer runs (by layer index), arena tensors and caller buffers.
    live_bytes: dict[int, int] = field(default_factory=dict)
    unshared_bytes: int = 0


def _peak_order(model: QModel, order: list[int]) -> tuple[int, dict[int, int]]:
    """Peak live activation bytes of running the layers in ``order`` (no fragmentation)."""
    last_use: dict[int, int] = {}
    for pos, li in enumerate(order):
        for t in model.layers[li].inputs:
            last_use[t] = pos
    live = {model.input}
    peak, per = 0, {}
    for pos, li in enumerate(order):
        layer = model.layers[li]
        live.add(layer.output)
        now = sum(model.tensors[t].nbytes for t in live)
        per[li] = now
        peak = max(peak, now)
        live = {t for t in live if last_use.get(t, len(order)) > pos or t == model.output}
    return peak, per


def _greedy_order(model: QModel) -> list[int]:
    produced = {model.input}
    remaining = list(range(len(model.layers)))
    readers: dict[int, int] = {}
    for layer in model.layers:
        for t in layer.inputs:
            readers[t] = readers.get(t, 0) + 1
    order: list[int] = []
    live = {model.input}
    while remaining:
        ready = [i for i in remaining if all(t in produced for t in model.layers[i].inputs)]

        def after(i: int) -> int:
            layer = model.layers[i]
            freed = sum(model.tensors[t].nbytes for t in set(layer.inputs) if readers[t] == 1)
            return model.tensors[layer.output].nbytes - freed

        best = min(ready, key=lambda i: (after(i), i))
        order.append(best)
        remaining.remove(best)
        layer = model.layers[best]
        produced.add(layer.output)
        live.add(layer.output)
        for t in layer.inputs:
            readers[t] -= 1
    return order


def plan_memory(model: QModel, scratch_bytes: int = 0, ram_budget: int | None = None) -> MemoryPlan:
    original = list(range(len(model.layers)))
    greedy = _greedy_order(model)
    order = min((original, greedy), key=lambda o: _peak_order(model, o)[0])
    layers = [model.layers[i] for i in order]
    arena_tensors = sorted({l.output for l in layers if l.output != model.output})
    index = {t: k for k, t in enumerate(arena_tensors)}
    buffers = [ArenaBuffer(k, "temp", model.tensors[t].nbytes) for k, t in enumerate(arena_tensors)]
    ops = [ArenaOp(tuple(index[t] for t in l.inputs if t in index), tuple(index[t] for t in (l.output,) if t in index))
           for l in layers]
    plan = plan_arena(buffers, ops, keep=(), alignment=ALIGN, main_space="sram")
    offsets = {t: buffers[index[t]].byte_offset for t in arena_tensors}
    _, per = _peak_order(model, order)
    result = MemoryPlan(order, offsets, plan.dynamic_bytes, per, plan.unshared_bytes)
    if ram_budget is not None:
        check_budget(model, result, scratch_bytes, ram_budget)
    return result


def check_budget(model: QModel, plan: MemoryPlan, scratch_bytes: int, ram_budget: int) -> None:
    io = model.input_tensor.nbytes + model.output_tensor.nbytes
    need = plan.arena_bytes + scratch_bytes + io
    if need <= ram_budget:
        return
    li = max(plan.live_bytes, key=plan.live_bytes.get)
    layer: QLayer = model.layers[li]
    tensors = ", ".join(f"tensor {t} {list(model.tensors[t].shape)} = {model.tensors[t].nbytes} bytes"
                        for t in (*layer.inputs, layer.output))
    raise CompileError(
        f"the model needs {need} bytes of RAM (arena {plan.arena_bytes}, kernel scratch {scratch_bytes}, "
        f"input+output {io}) but the budget is {ram_budget}; the peak is at layer '{layer.name}' "
        f"({layer.kind}: {tensors}, {plan.live_bytes[li]} activation bytes live); use fewer channels or a "
        f"larger stride before it")
