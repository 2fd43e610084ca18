"""DeepSpeech2: a convolutional front end over a spectrogram, then unrolled LSTMs.

The input is a spectrogram [batch, 1, freq, time]. Two Conv+Relu layers
(batch norm folded into the conv bias) shrink frequency by 4 and time by 2;
the result is flattened to per-step feature vectors, run through stacked
unrolled LSTM layers (the same 14-node cells as LSTM-TC) and projected with
one Gemm per step onto the character alphabet.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from rammer.zoo.builder import GraphBuilder
from rammer.zoo.rnn import LSTMStack, split_time, stack_time


@dataclass(frozen=True)
class ConvSpec:
    channels: int
    kernel: tuple[int, int]  # (freq, time)
    stride: tuple[int, int]
    pad: tuple[int, int]

    def out_size(self, freq: int, time: int) -> tuple[int, int]:
        f = (freq + 2 * self.pad[0] - self.kernel[0]) // self.stride[0] + 1
        t = (time + 2 * self.pad[1] - self.kernel[1]) // self.stride[1] + 1
        return f, t


@dataclass(frozen=True)
class DeepSpeech2Config:
    freq: int = 161
    time: int = 150
    # The DeepSpeech2 paper's 2-layer 2D-conv front end; strides (2,2) then
    # (2,1) leave 150 // 2 = 75 time steps.
    convs: tuple[ConvSpec, ...] = (
        ConvSpec(32, (41, 11), (2, 2), (20, 5)),
        ConvSpec(32, (21, 11), (2, 1), (10, 5)),
    )
    layers: int = 7
    hidden: int = 256
    classes: int = 29


def build_deepspeech2(
    cfg: DeepSpeech2Config, *, name: str, seed: int, batch: int
) -> onnx.ModelProto:
    b = GraphBuilder(name, seed)
    x = b.input("spectrogram", (batch, 1, cfg.freq, cfg.time))
    channels, freq, time = 1, cfg.freq, cfg.time
    for k, conv in enumerate(cfg.convs):
        fan_in = channels * conv.kernel[0] * conv.kernel[1]
        w = b.weight(
            f"conv{k}_W", (conv.channels, channels, *conv.kernel), std=np.sqrt(2.0 / fan_in)
        )
        bias = b.weight(f"conv{k}_B", (conv.channels,), std=0.1)
        x = b.op(
            "Conv", [x, w, bias], f"conv{k}",
            kernel_shape=list(conv.kernel), strides=list(conv.stride),
            pads=[conv.pad[0], conv.pad[1], conv.pad[0], conv.pad[1]],
        )
        x = b.op("Relu", [x], f"conv{k}_relu")
        channels = conv.channels
        freq, time = conv.out_size(freq, time)

    # [b, C, F, T] -> [b, T, C, F] -> [b, T, C*F]: one feature vector per step.
    x = b.op("Transpose", [x], "to_time_major", perm=[0, 3, 1, 2])
    features = channels * freq
    x = b.op("Reshape", [x, b.int64s("seq_shape", [batch, time, features])], "flatten_features")

    stack = LSTMStack(b, "", features, cfg.hidden, cfg.layers, batch)
    proj_w = b.weight("proj_W", (cfg.hidden, cfg.classes), std=np.sqrt(1.0 / cfg.hidden))
    proj_b = b.weight("proj_B", (cfg.classes,), std=0.1)
    logits = []
    for t, x_t in enumerate(split_time(b, x, time, "")):
        h = stack.step(x_t, t)
        logits.append(b.op("Gemm", [h, proj_w, proj_b], f"proj_t{t}"))
    out = stack_time(b, logits, "logits")
    b.output(out, (batch, time, cfg.classes))
    return b.model(
        f"DeepSpeech2: {len(cfg.convs)} conv layers over a {cfg.freq}x{cfg.time} spectrogram, "
        f"{cfg.layers} LSTM layers x {time} steps, hidden {cfg.hidden}, {cfg.classes} classes"
    )
