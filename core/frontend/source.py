"""Reading a model: path, bytes or ModelProto -> a checked, safe ModelProto."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import external_data_helper

from ..errors import ModelLoadError

ModelSource = str | os.PathLike | bytes | onnx.ModelProto


def read_model(source: ModelSource) -> tuple[onnx.ModelProto, Path | None]:
    """The ModelProto and the folder external data may come from (None for bytes/protos)."""
    model, folder, _ = read_model_and_bytes(source)
    return model, folder


def read_model_and_bytes(source: ModelSource) -> tuple[onnx.ModelProto, Path | None, bytes | None]:
    """:func:`read_model`, and the bytes the ModelProto was parsed from when it is exactly their parse
    (a path or bytes without external data; None otherwise): the checker takes them as they are,
    where a ModelProto would be serialized again first (1.5 s for a 110 MB model on a loaded machine)."""
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)  # never edit the caller's proto
        return model, None, None
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _parse(data, "<bytes>"), None, data
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise ModelLoadError(f"model file '{path}' does not exist")
        if path.is_dir():
            raise ModelLoadError(f"'{path}' is a folder; give the path of an .onnx file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelLoadError(f"cannot read model file '{path}': {exc.strerror}") from None
        model = _parse(data, str(path))
        external = _load_external_data(model, path.resolve().parent)
        return model, path.resolve().parent, None if external else data
    raise ModelLoadError(
        f"cannot load a model from {type(source).__name__}; pass a path, bytes or an onnx.ModelProto"
    )


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError, sometimes RuntimeWarning-wrapped
        raise ModelLoadError(f"{where} is not a valid ONNX model (protobuf parse failed: {exc})") from None
    if not model.HasField("graph"):
        raise ModelLoadError(f"{where} is not a valid ONNX model (it has no graph)")
    return model


def _load_external_data(model: onnx.ModelProto, base: Path) -> bool:
    """Load external tensor data, but only from files inside the model's folder; whether there was any."""
    tensors = [t for t in external_data_helper._get_all_tensors(model) if external_data_helper.uses_external_data(t)]
    for tensor in tensors:
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        target = (base / location).resolve()
        if not location or os.path.isabs(location) or (base != target and base not in target.parents):
            raise ModelLoadError(
                f"tensor '{tensor.name}' points to external data '{location}' outside the model's folder "
                f"'{base}'; rammer loads external data only from files inside that folder"
            )
        if not target.is_file():
            raise ModelLoadError(f"external data file '{location}' of tensor '{tensor.name}' is missing")
    if tensors:
        try:
            external_data_helper.load_external_data_for_model(model, str(base))
        except Exception as exc:
            raise ModelLoadError(f"failed to load external data: {exc}") from None
    return bool(tensors)


def check_names(model: onnx.ModelProto) -> None:
    """A :class:`ModelLoadError` for a name that is not valid UTF-8 (protobuf then hands it back
    as bytes, which every later step would trip over)."""

    def bad(value: object, what: str) -> None:
        if isinstance(value, bytes):
            raise ModelLoadError(f"not a valid ONNX model: {what} {value!r} is not valid UTF-8 text (a corrupt file, "
                                 f"or a broken exporter); re-export the model")

    def walk(g: onnx.GraphProto, where: str) -> None:
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            bad(vi.name, f"{where}: a value name")
        for t in g.initializer:
            bad(t.name, f"{where}: an initializer name")
        for i, n in enumerate(g.node):
            label = f"{where}: node #{i}"
            bad(n.name, f"{label}: its name")
            bad(n.op_type, f"{label}: its op type")
            bad(n.domain, f"{label}: its domain")
            for name in list(n.input) + list(n.output):
                bad(name, f"{label} ({n.op_type!r}): a tensor name")
            for a in n.attribute:
                bad(a.name, f"{label}: an attribute name")
                for sub in [a.g] if a.HasField("g") else list(a.graphs):
                    walk(sub, f"{label} attribute '{a.name}'")

    for o in model.opset_import:
        bad(o.domain, "an opset import's domain")
    walk(model.graph, "model")


def check_model(model: onnx.ModelProto, serialized: bytes | None = None) -> None:
    """Run onnx's checker on ``model``; ``serialized``: its bytes, when the caller has them (they are
    checked instead, without serializing the proto again)."""
    try:
        small = serialized is not None and len(serialized) < 2**31  # (larger: the proto's own error below)
        onnx.checker.check_model(serialized if small and serialized is not None else model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid model"
        raise ModelLoadError(f"the ONNX checker rejected the model: {first}") from None
    except ValueError as exc:  # > 2 GiB protos are checked from a path only
        if "2GB" not in str(exc) and "2 GB" not in str(exc):
            raise ModelLoadError(f"the ONNX checker rejected the model: {exc}") from None
