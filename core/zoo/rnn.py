"""Fully unrolled LSTM models: LSTM-TC and Seq2Seq.

Rammer's RNN benchmarks are written without a fused LSTM operator: every time
step of every layer is its own small subgraph, which is what gives the
scheduler thousands of independent fine-grained operators to pack. Each cell
here is exactly 14 nodes:

    MatMul(x, W), MatMul(h, R), Add, Add bias, Split into 4 gates,
    Sigmoid x3, Tanh, Mul(f, c), Mul(i, g), Add -> c', Tanh(c'), Mul -> h'

Gate order along the 4H axis is (input, forget, cell candidate, output).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from rammer.zoo.builder import GraphBuilder

#: Nodes per unrolled LSTM cell (see the module docstring).
NODES_PER_CELL = 14


@dataclass(frozen=True)
class LSTMParams:
    """Initializer names of one LSTM layer: x @ w + h @ r + b."""

    w: str
    r: str
    b: str
    hidden: int


def lstm_params(b: GraphBuilder, prefix: str, input_size: int, hidden: int) -> LSTMParams:
    """Draw one layer's weights.

    W and R have std 1/sqrt(fan_in) so gate pre-activations stay O(1) for O(1)
    inputs; the forget-gate bias starts at 1 (the usual choice) so the cell
    state neither vanishes nor saturates over 100 steps.
    """
    w = b.weight(f"{prefix}_W", (input_size, 4 * hidden), std=1.0 / np.sqrt(input_size))
    r = b.weight(f"{prefix}_R", (hidden, 4 * hidden), std=1.0 / np.sqrt(hidden))
    bias = b.rng.uniform(-0.1, 0.1, size=4 * hidden).astype(np.float32)
    bias[hidden : 2 * hidden] += 1.0
    return LSTMParams(w=w, r=r, b=b.const(f"{prefix}_B", bias), hidden=hidden)


def lstm_cell(
    b: GraphBuilder, x: str, h: str, c: str, p: LSTMParams, prefix: str
) -> tuple[str, str]:
    """One unrolled LSTM step; returns the new (h, c)."""
    xw = b.op("MatMul", [x, p.w], f"{prefix}_xw")
    hr = b.op("MatMul", [h, p.r], f"{prefix}_hr")
    pre = b.op("Add", [xw, hr], f"{prefix}_pre")
    gates = b.op("Add", [pre, p.b], f"{prefix}_gates")
    split = b.int64s("split4_" + str(p.hidden), [p.hidden] * 4)
    i, f, g, o = b.op_multi("Split", [gates, split], f"{prefix}_split", 4, axis=1)
    i = b.op("Sigmoid", [i], f"{prefix}_i")
    f = b.op("Sigmoid", [f], f"{prefix}_f")
    g = b.op("Tanh", [g], f"{prefix}_g")
    o = b.op("Sigmoid", [o], f"{prefix}_o")
    fc = b.op("Mul", [f, c], f"{prefix}_fc")
    ig = b.op("Mul", [i, g], f"{prefix}_ig")
    c_new = b.op("Add", [fc, ig], f"{prefix}_c")
    tc = b.op("Tanh", [c_new], f"{prefix}_tanh_c")
    h_new = b.op("Mul", [o, tc], f"{prefix}_h")
    return h_new, c_new


class LSTMStack:
    """A stack of unrolled LSTM layers, advanced one time step at a time.

    Stepping time-major lets a caller feed a step's input from the previous
    step's output (the Seq2Seq decoder does).
    """

    def __init__(
        self,
        b: GraphBuilder,
        prefix: str,
        input_size: int,
        hidden: int,
        layers: int,
        batch: int,
        initial: list[tuple[str, str]] | None = None,
    ) -> None:
        self._b = b
        self._prefix = prefix
        self.params = [
            lstm_params(b, f"{prefix}l{k}", input_size if k == 0 else hidden, hidden)
            for k in range(layers)
        ]
        if initial is None:
            zero = b.zeros(f"{prefix}zero_state", (batch, hidden))
            initial = [(zero, zero)] * layers
        if len(initial) != layers:
            raise ValueError(f"{layers} layers need {layers} initial states, got {len(initial)}")
        #: Current (h, c) per layer; after the last step, the final states.
        self.states = list(initial)

    def step(self, x: str, t: int) -> str:
        """Run every layer on input ``x`` at time ``t``; return the top layer's h."""
        for k, p in enumerate(self.params):
            h, c = self.states[k]
            h, c = lstm_cell(self._b, x, h, c, p, f"{self._prefix}l{k}_t{t}")
            self.states[k] = (h, c)
            x = h
        return x


def split_time(b: GraphBuilder, x: str, steps: int, prefix: str) -> list[str]:
    """Cut ``x`` [batch, steps, F] into ``steps`` tensors [batch, F] (Split + Squeeze)."""
    pieces = b.op_multi(
        "Split", [x, b.int64s(f"split_time_{steps}", [1] * steps)], f"{prefix}split_time", steps,
        axis=1,
    )
    axis = b.int64s("axis1", [1])
    return [b.op("Squeeze", [piece, axis], f"{prefix}x_t{t}") for t, piece in enumerate(pieces)]


def stack_time(b: GraphBuilder, steps: list[str], name: str) -> str:
    """Stack per-step tensors [batch, F] into [batch, steps, F] (Unsqueeze + Concat)."""
    axis = b.int64s("axis1", [1])
    expanded = [b.op("Unsqueeze", [s, axis], f"{name}_t{t}") for t, s in enumerate(steps)]
    return b.op("Concat", expanded, name, axis=1)


@dataclass(frozen=True)
class LSTMTCConfig:
    layers: int = 10
    steps: int = 100
    hidden: int = 256
    input_size: int = 256


def build_lstm_tc(cfg: LSTMTCConfig, *, name: str, seed: int, batch: int) -> onnx.ModelProto:
    """LSTM-TC: ``layers`` stacked LSTMs over ``steps`` steps; output the top final h."""
    b = GraphBuilder(name, seed)
    x = b.input("x", (batch, cfg.steps, cfg.input_size))
    stack = LSTMStack(b, "", cfg.input_size, cfg.hidden, cfg.layers, batch)
    h = ""
    for t, x_t in enumerate(split_time(b, x, cfg.steps, "")):
        h = stack.step(x_t, t)
    out = b.op("Identity", [h], "h_final")
    b.output(out, (batch, cfg.hidden))
    return b.model(
        f"LSTM-TC: {cfg.layers} LSTM layers x {cfg.steps} steps, hidden {cfg.hidden}, unrolled"
    )


@dataclass(frozen=True)
class Seq2SeqConfig:
    encoder_layers: int = 8
    encoder_steps: int = 100
    decoder_layers: int = 4
    decoder_steps: int = 30
    hidden: int = 128


def build_seq2seq(cfg: Seq2SeqConfig, *, name: str, seed: int, batch: int) -> onnx.ModelProto:
    """Seq2Seq: an LSTM encoder whose top final states start a greedy LSTM decoder.

    The decoder feeds each step's output back as the next step's input (the
    first input is zero) and starts from the final states of the encoder's
    top ``decoder_layers`` layers.
    """
    if cfg.decoder_layers > cfg.encoder_layers:
        raise ValueError("the decoder cannot have more layers than the encoder")
    b = GraphBuilder(name, seed)
    h = cfg.hidden
    x = b.input("x", (batch, cfg.encoder_steps, h))
    encoder = LSTMStack(b, "enc_", h, h, cfg.encoder_layers, batch)
    for t, x_t in enumerate(split_time(b, x, cfg.encoder_steps, "enc_")):
        encoder.step(x_t, t)
    decoder = LSTMStack(
        b, "dec_", h, h, cfg.decoder_layers, batch,
        initial=encoder.states[-cfg.decoder_layers :],
    )
    y = b.zeros("dec_go", (batch, h))
    outputs = []
    for t in range(cfg.decoder_steps):
        y = decoder.step(y, t)
        outputs.append(y)
    out = stack_time(b, outputs, "decoder_outputs")
    b.output(out, (batch, cfg.decoder_steps, h))
    return b.model(
        f"Seq2Seq: encoder {cfg.encoder_layers} LSTM layers x {cfg.encoder_steps} steps, "
        f"decoder {cfg.decoder_layers} x {cfg.decoder_steps}, hidden {h}, unrolled"
    )
