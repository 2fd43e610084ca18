"""The model sets the ci/ scripts share: full-size zoo models by name and the torch.onnx exports of the test
suite (tests/torch_models.py), exported when asked for, nothing downloaded."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

#: The full-size zoo models every preset script goes over.
ZOO = "lstm-tc,seq2seq,deepspeech2,nasnet,resnext,alexnet"


def zoo_protos(names: str) -> list[tuple[str, Any]]:
    """``(name, ModelProto)`` of each comma-separated zoo name."""
    import rammer.zoo

    return [(name, rammer.zoo.build(name)) for name in names.split(",") if name]


def torch_protos() -> list[tuple[str, Any, Any]]:
    """``(torch:NAME, ModelProto, module)`` of each torch.onnx export (the dynamo exporter, optimized)."""
    import onnx

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import torch_models

    folder = tempfile.mkdtemp(prefix="rammer-torch-")
    out = []
    for name in torch_models.CASES:
        raw, opt = os.path.join(folder, f"{name}-raw.onnx"), os.path.join(folder, f"{name}.onnx")
        torch_models.export_dynamo(name, raw, opt)
        out.append((f"torch:{name}", onnx.load(opt), torch_models.build_model(name)))
    return out


def graphs(models: str, torch: bool) -> list[tuple[str, Any]]:
    """``(name, Graph)`` of the zoo models named, then the torch exports when ``torch``."""
    from rammer.frontend import load

    out = [(name, load(proto)) for name, proto in zoo_protos(models)]
    if torch:
        out += [(name, load(proto)) for name, proto, _ in torch_protos()]
    return out
