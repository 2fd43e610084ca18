"""Normalising a model before import: opset upgrade and function inlining."""

from __future__ import annotations

import onnx
from onnx import inliner, version_converter

from ..errors import ModelLoadError

#: Ops are implemented for ai.onnx opsets from this version on; older models
#: are upgraded with ONNX's version converter.
MIN_NATIVE_OPSET = 11


def ai_onnx_opset(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def inline_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    if model.functions:
        # torch.onnx's dynamo exporter emits model-local functions; the IR has none.
        model = inliner.inline_local_functions(model)
    return model


def upgrade_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    version = ai_onnx_opset(model)
    if 0 < version < MIN_NATIVE_OPSET:
        try:
            model = version_converter.convert_version(model, 13)
        except Exception as exc:
            raise ModelLoadError(
                f"the model uses ai.onnx opset {version}; rammer supports {MIN_NATIVE_OPSET} and later and "
                f"could not upgrade it ({exc}). Re-export it with opset >= {MIN_NATIVE_OPSET}."
            ) from None
    return model
