"""Activation memory of the mcu program: operator order and one static arena on one vEU.

The order: the core's :func:`rammer.memory.least_live_order` (among the layers ready to run, the one
after which the fewest activation bytes are live; kept only if its peak is lower than the original
order's).  Offsets come from the core arena planner (:func:`rammer.memory.plan_arena`) in one
memory space "sram", 4-byte aligned.  The network input and output are the caller's buffers
(``model_run(in, out, ...)``), not in the arena.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rammer.errors import CompileError
from rammer.memory import ArenaBuffer, ArenaOp, least_live_order, live_bytes, plan_arena

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


def _layer_ops(model: QModel) -> tuple[list[ArenaOp], dict[int, int]]:
    """The layers as memory ops over tensor ids, and each tensor's bytes."""
    ops = [ArenaOp(tuple(layer.inputs), (layer.output,)) for layer in model.layers]
    return ops, {t: info.nbytes for t, info in model.tensors.items()}


def plan_memory(model: QModel, scratch_bytes: int = 0, ram_budget: int | None = None) -> MemoryPlan:
    layer_ops, sizes = _layer_ops(model)
    io = ({model.input}, {model.output})
    order = least_live_order(layer_ops, sizes, *io)
    layers = [model.layers[i] for i in order]
    arena_tensors = sorted({l.output for l in layers if l.output != model.output})
    index = {t: k for k, t in enumerate(arena_tensors)}
    buffers = [ArenaBuffer(k, "temp", model.tensors[t].nbytes) for k, t in enumerate(arena_tensors)]
    ops = [ArenaOp(tuple(index[t] for t in l.inputs if t in index), tuple(index[t] for t in (l.output,) if t in index))
           for l in layers]
    plan = plan_arena(buffers, ops, keep=(), alignment=ALIGN, main_space="sram")
    offsets = {t: buffers[index[t]].byte_offset for t in arena_tensors}
    _, per = live_bytes(layer_ops, order, sizes, *io)
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
