"""Recurrent layers: RNN, GRU and LSTM (ONNX semantics, opsets 7..22).

All three share the plumbing: input layout 0 (``[seq, batch, ...]``) or 1
(``[batch, seq, ...]``), forward/reverse/bidirectional directions, optional
bias, ``sequence_lens``, initial states, per-direction activation functions
with their alpha/beta parameters, and ``clip``.  Each time step is vectorized
over the batch; only the time loop runs in Python.

Shorter sequences (``sequence_lens``) keep their state after their last step,
and their ``Y`` rows past the end are zero.  The reverse direction runs each
batch entry from its own last valid step back to step 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .linalg import accumulate_dtype
from .registry import OpContext, OutSpec, register_op

Activation = Callable[[np.ndarray], np.ndarray]

# Activations that read alpha (and beta), with ONNX's defaults.
_ACTIVATION_PARAMS: dict[str, tuple[float | None, float | None]] = {
    "relu": (None, None),
    "tanh": (None, None),
    "sigmoid": (None, None),
    "softsign": (None, None),
    "softplus": (None, None),
    "affine": (1.0, 0.0),
    "leakyrelu": (0.01, None),
    "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0),
    "hardsigmoid": (0.2, 0.5),
    "elu": (1.0, None),
}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so that exp never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _make_activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    key = name.lower()
    if key == "relu":
        return lambda x: np.maximum(x, 0)
    if key == "tanh":
        return np.tanh
    if key == "sigmoid":
        return _sigmoid
    if key == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if key == "softplus":
        return lambda x: np.logaddexp(0, x)
    assert alpha is not None
    if key == "affine":
        assert beta is not None
        return lambda x: alpha * x + beta
    if key == "leakyrelu":
        return lambda x: np.where(x >= 0, x, alpha * x)
    if key == "thresholdedrelu":
        return lambda x: np.where(x > alpha, x, 0)
    if key == "scaledtanh":
        return lambda x: alpha * np.tanh(beta * x)
    if key == "hardsigmoid":
        assert beta is not None
        return lambda x: np.clip(alpha * x + beta, 0, 1)
    if key == "elu":
        return lambda x: np.where(x >= 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1))
    raise AssertionError(key)


@dataclass(frozen=True)
class _RnnConfig:
    num_directions: int
    directions: tuple[str, ...]  # "forward"/"reverse" per direction slot
    hidden: int
    layout: int
    clip: float | None
    activations: tuple[tuple[Activation, ...], ...]  # per direction


def _directions(ctx: OpContext) -> tuple[str, ...]:
    direction = ctx.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.fail(f"direction '{direction}' is not forward, reverse or bidirectional")
    return ("forward", "reverse") if direction == "bidirectional" else (direction,)


def _hidden_size(ctx: OpContext) -> int:
    r = ctx.inputs[2]
    assert r is not None
    return int(ctx.attr("hidden_size", r.shape[-1]))


def _config(ctx: OpContext, default_acts: list[str]) -> _RnnConfig:
    dirs = _directions(ctx)
    hidden = _hidden_size(ctx)
    names = [a.decode() if isinstance(a, bytes) else str(a) for a in (ctx.attr("activations") or [])]
    per_dir = len(default_acts)
    if not names:
        names = default_acts * len(dirs)
    elif len(names) == per_dir and len(dirs) == 2:
        names = names * 2  # one set given for both directions
    if len(names) != per_dir * len(dirs):
        raise ctx.fail(f"expected {per_dir} activations per direction ({len(dirs)} directions), got {names}")
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    funcs: list[Activation] = []
    for name in names:
        if name.lower() not in _ACTIVATION_PARAMS:
            raise ctx.fail(f"activation '{name}' is not supported (known: {sorted(_ACTIVATION_PARAMS)})")
        default_alpha, default_beta = _ACTIVATION_PARAMS[name.lower()]
        # Alphas and betas are consumed in order by the activations that use them.
        alpha = float(alphas.pop(0)) if default_alpha is not None and alphas else default_alpha
        beta = float(betas.pop(0)) if default_beta is not None and betas else default_beta
        funcs.append(_make_activation(name, alpha, beta))
    clip = ctx.attr("clip")
    acts = tuple(tuple(funcs[d * per_dir : (d + 1) * per_dir]) for d in range(len(dirs)))
    return _RnnConfig(len(dirs), dirs, hidden, int(ctx.attr("layout", 0)), None if clip is None else float(clip), acts)


def _rnn_infer(ctx: OpContext, gates_per_cell: int, n_states: int) -> list[OutSpec]:
    x, w, r = ctx.inputs[0], ctx.inputs[1], ctx.inputs[2]
    assert x is not None and w is not None and r is not None
    num_directions, hidden, layout = len(_directions(ctx)), _hidden_size(ctx), int(ctx.attr("layout", 0))
    if len(x.shape) != 3:
        raise ctx.fail(f"X must be 3-D, got shape {list(x.shape)}")
    seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    expected_w = (num_directions, gates_per_cell * hidden, x.shape[2])
    if tuple(w.shape) != expected_w:
        raise ctx.fail(f"W has shape {list(w.shape)}, expected {list(expected_w)}")
    expected_r = (num_directions, gates_per_cell * hidden, hidden)
    if tuple(r.shape) != expected_r:
        raise ctx.fail(f"R has shape {list(r.shape)}, expected {list(expected_r)}")
    if layout == 0:
        y_shape = (seq, num_directions, batch, hidden)
        state_shape = (num_directions, batch, hidden)
    else:
        y_shape = (batch, seq, num_directions, hidden)
        state_shape = (batch, num_directions, hidden)
    return [(x.dtype, y_shape)] + [(x.dtype, state_shape)] * n_states


def _reverse_index(seq: int, lengths: np.ndarray) -> np.ndarray:
    """``idx[t, b]``: time step read at step t when batch entry b runs backwards."""
    t = np.arange(seq)[:, None]
    return np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)


# A cell step: (gate inputs x@W^T + Wb for this step, states, direction slot) -> new states.
Step = Callable[[np.ndarray, tuple[np.ndarray, ...], int], tuple[np.ndarray, ...]]


def _run_recurrence(
    cfg: _RnnConfig,
    x: np.ndarray,
    w: np.ndarray,
    wb: np.ndarray,
    lengths: np.ndarray | None,
    initial: list[np.ndarray],
    step: Step,
) -> tuple[np.ndarray, ...]:
    """Runs every direction; returns Y and the final states, in layout 0."""
    seq, batch = x.shape[0], x.shape[1]
    lens = np.full(batch, seq, dtype=np.int64) if lengths is None else lengths.astype(np.int64)
    y = np.zeros((seq, cfg.num_directions, batch, cfg.hidden), dtype=x.dtype)
    finals: list[list[np.ndarray]] = [[] for _ in initial]
    for d, direction in enumerate(cfg.directions):
        if direction == "reverse":
            order = _reverse_index(seq, lens)
        else:
            order = np.broadcast_to(np.arange(seq)[:, None], (seq, batch))
        xs = x[order, np.arange(batch)[None, :]]  # (seq, batch, input), each entry in its run order
        # The input projection of every step at once: one big matmul.
        gates_x = xs @ w[d].T + wb[d]
        states = tuple(s[d] for s in initial)
        outputs = np.zeros((seq, batch, cfg.hidden), dtype=x.dtype)
        for t in range(seq):
            active = (t < lens)[:, None]
            new_states = step(gates_x[t], states, d)
            states = tuple(np.where(active, n, s) for n, s in zip(new_states, states))
            outputs[t] = np.where(active, new_states[0], 0)
        # Put every step back at its own time position.
        y[order, d, np.arange(batch)[None, :]] = outputs
        for k, s in enumerate(states):
            finals[k].append(s)
    return (y,) + tuple(np.stack(f) for f in finals)


def _common_inputs(
    cfg: _RnnConfig, x: np.ndarray, b: np.ndarray | None, gates: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X in layout 0, and the input and recurrence biases (zeros if omitted)."""
    acc = accumulate_dtype(x.dtype)
    xa = x.astype(acc, copy=False)
    if cfg.layout == 1:
        xa = xa.transpose(1, 0, 2)
    width = gates * cfg.hidden
    if b is None:
        b = np.zeros((cfg.num_directions, 2 * width), dtype=acc)
    b = b.astype(acc, copy=False)
    return xa, b[:, :width], b[:, width:]


def _initial_state(state: np.ndarray | None, cfg: _RnnConfig, batch: int, acc: np.dtype) -> np.ndarray:
    """An initial state as ``[num_directions, batch, hidden]`` (zeros if omitted)."""
    if state is None:
        return np.zeros((cfg.num_directions, batch, cfg.hidden), dtype=acc)
    if cfg.layout == 1:
        state = state.transpose(1, 0, 2)
    return state.astype(acc, copy=False)


def _finish(ctx: OpContext, cfg: _RnnConfig, results: tuple[np.ndarray, ...], dtype: np.dtype) -> tuple:
    y, *states = results
    if cfg.layout == 1:
        y = y.transpose(2, 0, 1, 3)
        states = [s.transpose(1, 0, 2) for s in states]
    outs = [np.ascontiguousarray(a, dtype=dtype) for a in (y, *states)]
    return tuple(outs[: len(ctx.node.outputs)])


def _clipper(cfg: _RnnConfig) -> Activation:
    if cfg.clip is None:
        return lambda v: v
    c = cfg.clip
    return lambda v: np.clip(v, -c, c)


# -- RNN ---------------------------------------------------------------------


@register_op("RNN", infer=lambda ctx: _rnn_infer(ctx, 1, 1))
def rnn(
    ctx: OpContext,
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
) -> tuple:
    cfg = _config(ctx, ["Tanh"])
    xa, wb, rb = _common_inputs(cfg, x, b, 1)
    acc = xa.dtype
    ra = r.astype(acc, copy=False)
    clip = _clipper(cfg)

    def step(gx: np.ndarray, states: tuple[np.ndarray, ...], d: int) -> tuple[np.ndarray, ...]:
        (h,) = states
        (f,) = cfg.activations[d]
        return (f(clip(gx + h @ ra[d].T + rb[d])),)

    h0 = _initial_state(initial_h, cfg, xa.shape[1], acc)
    results = _run_recurrence(cfg, xa, w.astype(acc, copy=False), wb, sequence_lens, [h0], step)
    return _finish(ctx, cfg, results, x.dtype)


# -- GRU ---------------------------------------------------------------------


@register_op("GRU", infer=lambda ctx: _rnn_infer(ctx, 3, 1))
def gru(
    ctx: OpContext,
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
) -> tuple:
    cfg = _config(ctx, ["Sigmoid", "Tanh"])
    xa, wb, rb = _common_inputs(cfg, x, b, 3)
    acc = xa.dtype
    ra = r.astype(acc, copy=False)
    hid = cfg.hidden
    linear_before_reset = bool(ctx.attr("linear_before_reset", 0))
    clip = _clipper(cfg)

    def step(gx: np.ndarray, states: tuple[np.ndarray, ...], d: int) -> tuple[np.ndarray, ...]:
        (h,) = states
        f, g = cfg.activations[d]
        r_zr, r_h = ra[d][: 2 * hid], ra[d][2 * hid :]
        rb_zr, rb_h = rb[d][: 2 * hid], rb[d][2 * hid :]
        zr = f(clip(gx[:, : 2 * hid] + h @ r_zr.T + rb_zr))
        z, reset = zr[:, :hid], zr[:, hid:]
        if linear_before_reset:
            candidate = g(clip(gx[:, 2 * hid :] + reset * (h @ r_h.T + rb_h)))
        else:
            candidate = g(clip(gx[:, 2 * hid :] + (reset * h) @ r_h.T + rb_h))
        return ((1 - z) * candidate + z * h,)

    h0 = _initial_state(initial_h, cfg, xa.shape[1], acc)
    results = _run_recurrence(cfg, xa, w.astype(acc, copy=False), wb, sequence_lens, [h0], step)
    return _finish(ctx, cfg, results, x.dtype)


# -- LSTM --------------------------------------------------------------------


@register_op("LSTM", infer=lambda ctx: _rnn_infer(ctx, 4, 2))
def lstm(
    ctx: OpContext,
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    p: np.ndarray | None = None,
) -> tuple:
    cfg = _config(ctx, ["Sigmoid", "Tanh", "Tanh"])
    xa, wb, rb = _common_inputs(cfg, x, b, 4)
    acc = xa.dtype
    ra = r.astype(acc, copy=False)
    hid = cfg.hidden
    peep = np.zeros((cfg.num_directions, 3 * hid), dtype=acc) if p is None else p.astype(acc, copy=False)
    input_forget = bool(ctx.attr("input_forget", 0))
    clip = _clipper(cfg)

    def step(gx: np.ndarray, states: tuple[np.ndarray, ...], d: int) -> tuple[np.ndarray, ...]:
        h, c = states
        f, g, hact = cfg.activations[d]
        pre = gx + h @ ra[d].T + rb[d]  # gate order i, o, f, c
        p_i, p_o, p_f = peep[d][:hid], peep[d][hid : 2 * hid], peep[d][2 * hid :]
        i = f(clip(pre[:, :hid] + p_i * c))
        forget = 1 - i if input_forget else f(clip(pre[:, 2 * hid : 3 * hid] + p_f * c))
        cell = g(clip(pre[:, 3 * hid :]))
        c_new = forget * c + i * cell
        o = f(clip(pre[:, hid : 2 * hid] + p_o * c_new))
        return (o * hact(c_new), c_new)

    batch = xa.shape[1]
    h0 = _initial_state(initial_h, cfg, batch, acc)
    c0 = _initial_state(initial_c, cfg, batch, acc)
    results = _run_recurrence(cfg, xa, w.astype(acc, copy=False), wb, sequence_lens, [h0, c0], step)
    return _finish(ctx, cfg, results, x.dtype)
