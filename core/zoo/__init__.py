"""The benchmark model zoo: the models of the Rammer (OSDI'20) evaluation.

Every model is built in code with ``onnx.helper`` (nothing is downloaded):
ai.onnx opset 17, float32, fully static shapes, weights drawn from
``numpy.random.default_rng(seed)`` with variance-preserving scales so that
activations stay O(1) and backends can be compared numerically.

Each model has a ``-small`` variant with the same structure at toy size, for
tests and for op-by-op interpreters.

    >>> import rammer.zoo
    >>> [e.name for e in rammer.zoo.list_models()][:2]
    ['lstm-tc', 'lstm-tc-small']
    >>> model = rammer.zoo.build("lstm-tc-small", seed=1)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import onnx

from rammer.errors import ModelLoadError
from rammer.zoo.builder import ZOO_OPSET, GraphBuilder
from rammer.zoo.cnn import AlexNetConfig, ResNeXtConfig, build_alexnet, build_resnext
from rammer.zoo.nasnet import NASNetConfig, build_nasnet
from rammer.zoo.rnn import LSTMTCConfig, Seq2SeqConfig, build_lstm_tc, build_seq2seq
from rammer.zoo.speech import ConvSpec, DeepSpeech2Config, build_deepspeech2

__all__ = [
    "ZOO_OPSET",
    "GraphBuilder",
    "ZooEntry",
    "build",
    "count_parameters",
    "export",
    "list_models",
]

# A builder takes its config and (name, seed, batch) keywords.
_Builder = Callable[..., onnx.ModelProto]


@dataclass(frozen=True)
class ZooEntry:
    """One model of the zoo."""

    name: str
    description: str
    #: True for the toy-size ``-small`` variants meant for tests.
    small: bool
    #: The full-size model this one shrinks (its own name when not small).
    base: str
    _build: Callable[..., onnx.ModelProto] = field(repr=False, compare=False)

    def build(self, *, seed: int = 0, batch: int = 1) -> onnx.ModelProto:
        return build(self.name, seed=seed, batch=batch)


def _entries() -> list[ZooEntry]:
    # (name, description, small variant's description, builder, full config, small config)
    table: list[tuple[str, str, str, _Builder, object, object]] = [
        (
            "lstm-tc", "LSTM-TC: 10 LSTM layers x 100 steps, hidden 256, unrolled",
            "2 layers x 5 steps, hidden 32", build_lstm_tc, LSTMTCConfig(),
            LSTMTCConfig(layers=2, steps=5, hidden=32, input_size=32),
        ),
        (
            "seq2seq", "Seq2Seq: LSTM encoder 8x100 steps, decoder 4x30 steps, hidden 128",
            "encoder 3x5 steps, decoder 2x3 steps, hidden 16", build_seq2seq, Seq2SeqConfig(),
            Seq2SeqConfig(
                encoder_layers=3, encoder_steps=5, decoder_layers=2, decoder_steps=3, hidden=16
            ),
        ),
        (
            "nasnet", "NASNet-A (CIFAR, N=6, F=32): 18 normal + 2 reduction cells",
            "N=1, F=8, 16x16 input", build_nasnet, NASNetConfig(),
            NASNetConfig(image=16, cells_per_stage=1, filters=8),
        ),
        (
            "resnext", "ResNeXt-29 (16x64d) for CIFAR, 32x32 input",
            "ResNeXt-11 (4x4d), 16x16 input", build_resnext, ResNeXtConfig(),
            ResNeXtConfig(
                image=16, stem=16, stage_channels=(32, 64, 128), blocks_per_stage=1,
                cardinality=4, width=4,
            ),
        ),
        (
            "alexnet", "AlexNet: 5 conv + 3 max-pool + 3 FC, 227x227 input, 1000 classes",
            "8-24 channels, 16x16 input, 10 classes", build_alexnet, AlexNetConfig(),
            AlexNetConfig(
                image=16,
                convs=(
                    (8, 5, 1, 2, True), (16, 5, 1, 2, True), (24, 3, 1, 1, False),
                    (24, 3, 1, 1, False), (16, 3, 1, 1, True),
                ),
                fc=(64, 64), classes=10,
            ),
        ),
        (
            "deepspeech2", "DeepSpeech2: 2 conv + 7 LSTM layers x 75 steps (hidden 256) + FC",
            "21x20 spectrogram, 2 LSTM layers x 10 steps, hidden 32",
            build_deepspeech2, DeepSpeech2Config(),
            DeepSpeech2Config(
                freq=21, time=20,
                convs=(ConvSpec(4, (5, 5), (2, 2), (2, 2)), ConvSpec(4, (5, 5), (2, 1), (2, 2))),
                layers=2, hidden=32,
            ),
        ),
    ]
    entries = []
    for name, description, small_description, builder, full, small in table:
        entries.append(ZooEntry(name, description, False, name, partial(builder, full)))
        entries.append(
            ZooEntry(
                f"{name}-small", f"{name} at toy size: {small_description}", True, name,
                partial(builder, small),
            )
        )
    return entries


_REGISTRY: dict[str, ZooEntry] = {e.name: e for e in _entries()}


def list_models() -> list[ZooEntry]:
    """Every zoo model, each full-size model followed by its ``-small`` variant."""
    return list(_REGISTRY.values())


def _entry(name: str) -> ZooEntry:
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ModelLoadError(
            f"unknown zoo model {name!r}; known models: {', '.join(_REGISTRY)} "
            "(see `rammer zoo list`)"
        )
    return entry


def build(name: str, *, seed: int = 0, batch: int = 1) -> onnx.ModelProto:
    """Build zoo model ``name`` with weights from ``seed`` and batch size ``batch``."""
    entry = _entry(name)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ModelLoadError(
            f"zoo model {name!r}: seed must be a non-negative integer, got {seed!r}"
        )
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ModelLoadError(
            f"zoo model {name!r}: batch must be a positive integer, got {batch!r}"
        )
    return entry._build(name=name, seed=int(seed), batch=int(batch))


def export(name: str, path: str | os.PathLike[str], **kw: int) -> onnx.ModelProto:
    """Build ``name`` (``seed=``, ``batch=``) and write it to ``path`` atomically.

    The model goes to a temporary file in the destination folder first and is
    renamed over ``path`` only when complete, so a reader never sees half a file.
    Returns the model written.
    """
    model = build(name, **kw)
    data = model.SerializeToString()
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".rammer-zoo-", suffix=".onnx.tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a model file is not a secret
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return model


def count_parameters(model: onnx.ModelProto) -> int:
    """Number of floating-point weight elements (integer constants are not parameters)."""
    total = 0
    for init in model.graph.initializer:
        if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                              onnx.TensorProto.DOUBLE):
            total += int(np.prod(init.dims, dtype=np.int64))
    return total
