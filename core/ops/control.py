"""Control flow: If, Loop and Scan.

Their bodies are :class:`~rammer.ir.Graph` attributes, already imported with
static shapes; ``ctx.run_graph(body, feeds)`` runs one (the runtime resolves
names the body reads from enclosing scopes).  Shapes must stay static, so:

* If's outputs are its branches' outputs; when the condition is not a
  constant, both branches must agree on every output's dtype and shape;
* Loop's carried values keep the body's output shapes, and its scan outputs
  get the trip count as leading dimension, which must be known statically (a
  constant ``M`` and a condition the body cannot turn false);
* Scan's trip count is the length of its scan inputs' scanned axis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np

from ..errors import OpExecutionError
from ..ir import Graph, Node, TensorInfo
from .misc import needs_constant
from .registry import OpContext, OutSpec, normalize_axis, register_op
from .tensor import int_list


def _body(ctx: OpContext, key: str) -> Graph:
    body = ctx.attr(key)
    if not isinstance(body, Graph):
        raise ctx.fail(f"attribute '{key}' must be a graph")
    return body


def _run(ctx: OpContext, body: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    if ctx.run_graph is None:
        raise ctx.fail("this runtime cannot run subgraphs (no run_graph)")
    return [np.asarray(v) for v in ctx.run_graph(body, feeds)]


def _check_body_inputs(ctx: OpContext, body: Graph, first: int, given: list[tuple[str, tuple[int, ...]] | None],
                       what: str) -> None:
    """The body's inputs from ``first`` on were imported with the types the body declares; the
    values the node passes in must have those types, or the body was inferred for other shapes."""
    for k, (t, want) in enumerate(zip(body.inputs[first:], given)):
        if want is not None and (t.dtype, tuple(t.shape)) != (want[0], tuple(want[1])):
            raise ctx.fail(f"{what} {k} is {want[0]}{list(want[1])} but the body's input '{t.name}' declares "
                           f"{t.dtype}{list(t.shape)}; fix the body's input types (or the node's inputs)")


def _specs(infos: tuple[TensorInfo, ...] | list[TensorInfo]) -> list[OutSpec]:
    return [(t.dtype, t.shape) for t in infos]


# -- If -----------------------------------------------------------------------------


def _infer_if(ctx: OpContext) -> list[OutSpec]:
    then_g, else_g = _body(ctx, "then_branch"), _body(ctx, "else_branch")
    n = len(ctx.node.outputs)
    for g in (then_g, else_g):
        if len(g.outputs) != n:
            raise ctx.fail(f"branch '{g.name}' has {len(g.outputs)} outputs, the node has {n}")
    cond = ctx.values[0] if ctx.values else None
    if cond is not None:
        return _specs((then_g if bool(np.asarray(cond).reshape(-1)[0]) else else_g).outputs)
    for i, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs)):
        if (a.dtype, a.shape) != (b.dtype, b.shape):
            raise needs_constant(ctx, 0, ctx.fail(
                f"output {i} is {a.dtype}{list(a.shape)} in the then-branch but {b.dtype}{list(b.shape)} "
                f"in the else-branch, and the condition '{ctx.node.inputs[0]}' is only known at run time; "
                f"rammer needs one static shape per tensor (make the condition a constant or the branches agree)"
            ))
    return _specs(then_g.outputs)


#: Domain of rammer's own internal ops (never in a user's model).
RAMMER_DOMAIN = "ai.rammer"


def _infer_unreachable(ctx: OpContext) -> list[OutSpec]:
    return [(d, tuple(int(x) for x in s)) for d, s in zip(ctx.attr("dtypes"), ctx.attr("shapes"))]


@register_op("Unreachable", infer=_infer_unreachable, domain=RAMMER_DOMAIN, foldable=False)
def unreachable(ctx: OpContext) -> tuple[np.ndarray, ...]:
    """Stands for a branch that cannot run at the compiled shapes; running it is the error."""
    raise OpExecutionError(str(ctx.attr("message")))


def unreachable_branch(name: str, outputs: tuple[TensorInfo, ...] | list[TensorInfo], message: str,
                       opset: Mapping[str, int] | None = None) -> Graph:
    """A branch with ``outputs``' types whose only node fails with ``message`` when run."""
    outs = tuple(TensorInfo(f"{name}_out{i}", t.dtype, t.shape) for i, t in enumerate(outputs))
    node = Node("Unreachable", (), tuple(t.name for t in outs), name, RAMMER_DOMAIN,
                {"message": message, "dtypes": [t.dtype for t in outs], "shapes": [list(t.shape) for t in outs]})
    return Graph(name, (), outs, (node,), {}, {t.name: t for t in outs},
                 {**(opset or {}), RAMMER_DOMAIN: 1})


def taken_branch(cond: np.ndarray) -> str:
    """The attribute of the branch an ``If`` takes on ``cond`` (its one element)."""
    return "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"


@register_op("If", infer=_infer_if)
def if_(ctx: OpContext, cond: np.ndarray) -> tuple[np.ndarray, ...]:
    branch = _body(ctx, taken_branch(cond))
    return tuple(_run(ctx, branch, {}))


# -- Loop ---------------------------------------------------------------------------


def _resolve_identity(body: Graph, name: str) -> str:
    """Follow Identity nodes back to the tensor a body output copies."""
    producers = body.producer
    seen = 0
    while name in producers and producers[name].op_type == "Identity" and seen < len(body.nodes):
        name = producers[name].inputs[0]
        seen += 1
    return name


def _static_trip_count(ctx: OpContext, body: Graph) -> int:
    """How many times the loop runs, when that is decided before it runs."""
    max_trips = int(np.asarray(ctx.const(0, "trip count M")).reshape(-1)[0]) if ctx.has_input(0) else None
    if ctx.has_input(1):
        cond = ctx.values[1] if len(ctx.values) > 1 else None
        if cond is not None and not bool(np.asarray(cond).reshape(-1)[0]):
            return 0
        initial_known = cond is not None
    else:
        initial_known = True
    source = _resolve_identity(body, body.outputs[0].name)
    keeps_going = source == body.inputs[1].name and initial_known
    stops_after_one = False
    if source in body.initializers:
        keeps_going = bool(np.asarray(body.initializers[source]).reshape(-1)[0]) and initial_known
        stops_after_one = not keeps_going and initial_known
    if stops_after_one:
        return min(1, max_trips) if max_trips is not None else 1
    if keeps_going and max_trips is not None:
        return max(max_trips, 0)
    error = ctx.fail(
        "the loop's scan outputs have a length equal to its trip count, which is only known at run time "
        "(the trip count M must be a constant and the loop condition must not be computed in the body); "
        "rammer needs static shapes"
    )
    if not initial_known:
        raise needs_constant(ctx, 1, error)
    raise error


def _loop_counts(ctx: OpContext, body: Graph) -> tuple[int, int]:
    carried = len(ctx.node.inputs) - 2
    scans = len(body.outputs) - 1 - carried
    if carried < 0 or scans < 0 or len(body.inputs) != 2 + carried:
        raise ctx.fail(f"body '{body.name}' does not match the node's {carried} loop-carried values")
    return carried, scans


def _infer_loop(ctx: OpContext) -> list[OutSpec]:
    body = _body(ctx, "body")
    carried, scans = _loop_counts(ctx, body)
    _check_body_inputs(ctx, body, 2, [None if t is None else (t.dtype, t.shape) for t in ctx.inputs[2:]],
                       "loop-carried value")
    specs: list[OutSpec] = []
    for i in range(carried):
        out, initial = body.outputs[1 + i], ctx.inputs[2 + i]
        if initial is not None and (initial.dtype, initial.shape) != (out.dtype, out.shape):
            raise ctx.fail(
                f"loop-carried value {i} starts as {initial.dtype}{list(initial.shape)} but the body makes it "
                f"{out.dtype}{list(out.shape)}; rammer needs a shape that stays the same across iterations"
            )
        specs.append((out.dtype, out.shape))
    if scans:
        trips = _static_trip_count(ctx, body)
        specs += [(t.dtype, (trips, *t.shape)) for t in body.outputs[1 + carried :]]
    return specs


@register_op("Loop", infer=_infer_loop)
def loop(ctx: OpContext, max_trips: np.ndarray | None, cond: np.ndarray | None,
         *initial: np.ndarray) -> tuple[np.ndarray, ...]:
    body = _body(ctx, "body")
    carried, scans = _loop_counts(ctx, body)
    limit = int(np.asarray(max_trips).reshape(-1)[0]) if max_trips is not None else None
    keep_going = bool(np.asarray(cond).reshape(-1)[0]) if cond is not None else True
    names = [t.name for t in body.inputs]
    states = list(initial)
    collected: list[list[np.ndarray]] = [[] for _ in range(scans)]
    i = 0
    while keep_going and (limit is None or i < limit):
        feeds = {names[0]: np.asarray(i, dtype=np.int64), names[1]: np.asarray(keep_going, dtype=bool)}
        feeds.update(zip(names[2:], states))
        outs = _run(ctx, body, feeds)
        keep_going = bool(outs[0].reshape(-1)[0])
        states = outs[1 : 1 + carried]
        for k in range(scans):
            collected[k].append(outs[1 + carried + k])
        i += 1
    results = list(states)
    for k, items in enumerate(collected):
        info = body.outputs[1 + carried + k]
        results.append(np.stack(items) if items else np.zeros((0, *info.shape), dtype=info.np_dtype))
    return tuple(results)


# -- Scan ---------------------------------------------------------------------------


class _ScanLayout:
    """Which inputs are states and scanned sequences, and along which axes."""

    def __init__(self, ctx: OpContext, body: Graph, input_shapes: list[tuple[int, ...]]):
        n_scan = int(ctx.attr("num_scan_inputs", 0))
        self.carried = len(input_shapes) - n_scan
        self.n_scan_out = len(body.outputs) - self.carried
        if self.carried < 0 or self.n_scan_out < 0 or len(body.inputs) != len(input_shapes):
            raise ctx.fail(f"body '{body.name}' does not match the node's {len(input_shapes)} inputs")
        in_axes = int_list(ctx.attr("scan_input_axes")) or [0] * n_scan
        self.in_dirs = int_list(ctx.attr("scan_input_directions")) or [0] * n_scan
        out_axes = int_list(ctx.attr("scan_output_axes")) or [0] * self.n_scan_out
        self.out_dirs = int_list(ctx.attr("scan_output_directions")) or [0] * self.n_scan_out
        scanned = input_shapes[self.carried :]
        if any(len(shape) == 0 for shape in scanned):
            raise ctx.fail(f"scan inputs must have a sequence axis; got shapes {[list(x) for x in scanned]}")
        self.in_axes = [normalize_axis(ctx, a, len(s)) for a, s in zip(in_axes, scanned)]
        lengths = {s[a] for a, s in zip(self.in_axes, scanned)}
        if len(lengths) > 1:
            raise ctx.fail(f"scan inputs disagree on the sequence length: {sorted(lengths)}")
        self.trips = lengths.pop() if lengths else 0
        outs = body.outputs[self.carried :]
        self.out_axes = [normalize_axis(ctx, a, len(t.shape) + 1) for a, t in zip(out_axes, outs)]


def _infer_scan(ctx: OpContext) -> list[OutSpec]:
    body = _body(ctx, "body")
    if ctx.opset < 9:
        return _infer_scan8(ctx, body)
    layout = _ScanLayout(ctx, body, [t.shape if t is not None else () for t in ctx.inputs])
    given: list[tuple[str, tuple[int, ...]] | None] = []
    for i, t in enumerate(ctx.inputs):
        if t is None:
            given.append(None)
        elif i < layout.carried:
            given.append((t.dtype, t.shape))
        else:
            axis = layout.in_axes[i - layout.carried]
            given.append((t.dtype, t.shape[:axis] + t.shape[axis + 1:]))
    _check_body_inputs(ctx, body, 0, given, "state/scan input")
    for k, (t, out) in enumerate(zip(ctx.inputs[: layout.carried], body.outputs)):
        if t is not None and (t.dtype, tuple(t.shape)) != (out.dtype, tuple(out.shape)):
            raise ctx.fail(f"state {k} starts as {t.dtype}{list(t.shape)} but the body makes it "
                           f"{out.dtype}{list(out.shape)}; a state must keep its type across iterations")
    specs = _specs(body.outputs[: layout.carried])
    for axis, t in zip(layout.out_axes, body.outputs[layout.carried :]):
        shape = list(t.shape)
        shape.insert(axis, layout.trips)
        specs.append((t.dtype, tuple(shape)))
    return specs


@register_op("Scan", infer=_infer_scan)
def scan(ctx: OpContext, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
    body = _body(ctx, "body")
    if ctx.opset < 9:
        return _scan8(ctx, body, inputs)
    layout = _ScanLayout(ctx, body, [x.shape for x in inputs])
    names = [t.name for t in body.inputs]
    states = list(inputs[: layout.carried])
    sequences = inputs[layout.carried :]
    collected: list[list[np.ndarray]] = [[] for _ in range(layout.n_scan_out)]
    for t in range(layout.trips):
        feeds = dict(zip(names, states))
        for name, seq, axis, rev in zip(names[layout.carried :], sequences, layout.in_axes, layout.in_dirs):
            feeds[name] = np.take(seq, layout.trips - 1 - t if rev else t, axis=axis)
        outs = _run(ctx, body, feeds)
        states = outs[: layout.carried]
        for k in range(layout.n_scan_out):
            collected[k].append(outs[layout.carried + k])
    results = list(states)
    for k, items in enumerate(collected):
        info = body.outputs[layout.carried + k]
        if layout.out_dirs[k]:
            items = items[::-1]
        if items:
            results.append(np.stack(items, axis=layout.out_axes[k]))
        else:
            shape = list(info.shape)
            shape.insert(layout.out_axes[k], 0)
            results.append(np.zeros(shape, dtype=info.np_dtype))
    return tuple(results)


# Scan-8 put a batch axis first and took optional per-batch sequence lengths.


def _scan8_split(ctx: OpContext, body: Graph, n_inputs: int) -> tuple[int, int]:
    n_scan = int(ctx.attr("num_scan_inputs", 0))
    carried = n_inputs - 1 - n_scan
    if carried < 0 or len(body.inputs) != carried + n_scan:
        raise ctx.fail(f"body '{body.name}' does not match the node's inputs")
    return carried, n_scan


def _infer_scan8(ctx: OpContext, body: Graph) -> list[OutSpec]:
    carried, _ = _scan8_split(ctx, body, len(ctx.inputs))
    first = ctx.inputs[1 + carried]
    if first is None or len(first.shape) < 2:
        raise ctx.fail("Scan-8 scan inputs must be [batch, sequence, ...]")
    batch, steps = first.shape[:2]
    given = [None if t is None else (t.dtype, t.shape[1:] if i < carried else t.shape[2:])
             for i, t in enumerate(ctx.inputs[1:])]
    _check_body_inputs(ctx, body, 0, given, "state/scan input")
    return [(t.dtype, (batch, *t.shape)) for t in body.outputs[:carried]] + [
        (t.dtype, (batch, steps, *t.shape)) for t in body.outputs[carried:]
    ]


def _scan8(ctx: OpContext, body: Graph, inputs: tuple[np.ndarray | None, ...]) -> tuple[np.ndarray, ...]:
    carried, _ = _scan8_split(ctx, body, len(inputs))
    # only the sequence lengths (input 0) are optional
    lens = inputs[0]
    states0 = cast("tuple[np.ndarray, ...]", inputs[1 : 1 + carried])
    seqs = cast("tuple[np.ndarray, ...]", inputs[1 + carried :])
    batch, steps = seqs[0].shape[:2]
    dirs = int_list(ctx.attr("directions")) or [0] * len(seqs)
    names = [t.name for t in body.inputs]
    outs_info = body.outputs[carried:]
    finals = [np.empty((batch, *t.shape), dtype=t.np_dtype) for t in body.outputs[:carried]]
    scans = [np.zeros((batch, steps, *t.shape), dtype=t.np_dtype) for t in outs_info]
    for b in range(batch):
        n = steps if lens is None else int(np.asarray(lens).reshape(-1)[b])
        states = [s[b] for s in states0]
        for t in range(n):
            feeds = dict(zip(names, states))
            for name, seq, rev in zip(names[carried:], seqs, dirs):
                feeds[name] = seq[b, n - 1 - t if rev else t]
            outs = _run(ctx, body, feeds)
            states = outs[:carried]
            for k, value in enumerate(outs[carried:]):
                scans[k][b, t] = value
        for k, value in enumerate(states):
            finals[k][b] = value
    return tuple(finals + scans)
