"""The KServe v2 (Open Inference Protocol) JSON codec, as Triton and KServe clients speak it.

Requests: ``{"id"?, "inputs": [{"name", "shape", "datatype", "data"}], "outputs"?: [{"name"}]}``
with ``data`` flat in row-major order (nested lists are accepted too).
Responses: ``{"model_name", "model_version", "id", "outputs": [{"name", "shape", "datatype", "data"}]}``.
Errors are ``{"error": "..."}`` with an HTTP status (400 for a bad request).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import FeedError

__all__ = ["DATATYPES", "decode_request", "encode_response", "model_metadata", "datatype_of"]

#: KServe v2 datatype -> numpy dtype.
DATATYPES: Mapping[str, str] = {
    "BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
    "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "FP16": "float16", "FP32": "float32", "FP64": "float64",
}
_BY_DTYPE = {v: k for k, v in DATATYPES.items()}


def datatype_of(dtype: Any) -> str:
    name = np.dtype(dtype).name
    if name not in _BY_DTYPE:
        raise FeedError(f"dtype {name} has no KServe v2 datatype")
    return _BY_DTYPE[name]


def decode_request(body: Any, inputs: Sequence[Any], batch_dim: bool = False
                   ) -> tuple[dict[str, np.ndarray], list[str] | None, Any]:
    """Feeds, the requested output names (None: all) and the request id, from a request body.

    ``inputs`` are the model's input TensorInfos (name, dtype, shape).  With ``batch_dim``
    (a deployment that batches requests), dim 0 of every input is the request's row count:
    any count of at least 1, the same for every input.  Every problem (a missing, unknown or
    repeated input, a wrong datatype or shape, data that does not fill the shape) is a
    :class:`FeedError` naming the input and what to send, checked before the request joins
    a batch, so one bad request never fails the others batched with it.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("inputs"), list):
        raise FeedError('a KServe v2 request is a JSON object with an "inputs" list, e.g. '
                        f'{{"inputs": [{_example(inputs[0], batch_dim) if inputs else "..."}]}}')
    expected = {t.name: t for t in inputs}
    feeds: dict[str, np.ndarray] = {}
    for item in body["inputs"]:
        if not isinstance(item, Mapping):
            raise FeedError('every entry of "inputs" must be an object with "name", "shape", "datatype" and "data"')
        name = item.get("name")
        if not isinstance(name, str) or name not in expected:
            raise FeedError(f"unknown input {name!r}: this model's inputs are "
                            f"{', '.join(_describe(t, batch_dim) for t in inputs)}{_rows_note(batch_dim)}")
        if name in feeds:
            raise FeedError(f"input {name!r} is given twice in \"inputs\"; send each input once")
        info = expected[name]
        want = _BY_DTYPE.get(info.dtype, info.dtype)
        datatype = item.get("datatype")
        if not isinstance(datatype, str) or datatype not in DATATYPES:
            raise FeedError(f"input {name!r}: datatype {datatype!r} is not one of {sorted(DATATYPES)}; "
                            f"send \"datatype\": \"{want}\"")
        if DATATYPES[datatype] != info.dtype:
            raise FeedError(f"input {name!r} is {datatype} but the model expects {want}; "
                            f"send \"datatype\": \"{want}\" (convert the data to {info.dtype})")
        shape = item.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise FeedError(f"input {name!r}: \"shape\" must be a list of non-negative ints, "
                            f"here {_shape_shown(info, batch_dim)}")
        if not _shape_fits(shape, info.shape, batch_dim):
            raise FeedError(f"input {name!r} has shape {shape} but the model takes {_shape_shown(info, batch_dim)}"
                            f"{_rows_note(batch_dim)}")
        try:
            arr = np.asarray(item.get("data"), dtype=DATATYPES[datatype])
            feeds[name] = arr.reshape(shape)
        except (ValueError, TypeError, OverflowError) as exc:
            count = int(np.prod(shape))
            raise FeedError(f"input {name!r}: \"data\" does not fill shape {shape} ({exc}); send {count} "
                            f"{want} value(s), flat in row-major order") from None
    missing = [t for t in inputs if t.name not in feeds]
    if missing:
        raise FeedError(f"missing input(s) {', '.join(repr(t.name) for t in missing)}: send each in \"inputs\" as "
                        + "; ".join(_example(t, batch_dim) for t in missing) + _rows_note(batch_dim))
    if batch_dim and len({a.shape[0] for a in feeds.values()}) > 1:
        rows = ", ".join(f"'{n}' {a.shape[0]}" for n, a in feeds.items())
        raise FeedError(f"the inputs have different row counts (dim 0: {rows}); every input of a request "
                        f"needs the same number of rows")
    outputs = body.get("outputs")
    names = None
    if outputs is not None:
        if not isinstance(outputs, list) or not all(isinstance(o, Mapping) and "name" in o for o in outputs):
            raise FeedError('"outputs" must be a list of objects with a "name"')
        names = [str(o["name"]) for o in outputs]
    return feeds, names, body.get("id")


def _shape_fits(shape: Sequence[int], model_shape: Sequence[int], batch_dim: bool) -> bool:
    if len(shape) != len(model_shape):
        return False
    if batch_dim:
        return shape[0] >= 1 and tuple(shape[1:]) == tuple(model_shape[1:])
    return tuple(shape) == tuple(model_shape)


def _shape_shown(info: Any, batch_dim: bool) -> str:
    """The shape a client must send, with ``N`` for the row count of a batching deployment."""
    dims = [str(d) for d in info.shape]
    if batch_dim and dims:
        dims[0] = "N"
    return "[" + ", ".join(dims) + "]"


def _rows_note(batch_dim: bool) -> str:
    return " (N: the request's number of rows, at least 1)" if batch_dim else ""


def _describe(info: Any, batch_dim: bool) -> str:
    return f"'{info.name}' ({_BY_DTYPE.get(info.dtype, info.dtype)}, shape {_shape_shown(info, batch_dim)})"


def _example(info: Any, batch_dim: bool) -> str:
    shape = _shape_shown(info, batch_dim)
    return (f'{{"name": "{info.name}", "shape": {shape}, "datatype": "{_BY_DTYPE.get(info.dtype, info.dtype)}", '
            f'"data": [...]}}')


def encode_response(model_name: str, results: Mapping[str, np.ndarray], names: Sequence[str] | None,
                    request_id: Any = None, version: str = "1") -> dict[str, Any]:
    wanted = list(results) if names is None else list(names)
    unknown = [n for n in wanted if n not in results]
    if unknown:
        raise FeedError(f"unknown output(s) {unknown} (outputs: {sorted(results)})")
    out = {"model_name": model_name, "model_version": version,
           "outputs": [{"name": n, "shape": list(results[n].shape), "datatype": datatype_of(results[n].dtype),
                        "data": np.asarray(results[n]).reshape(-1).tolist()} for n in wanted]}
    if request_id is not None:
        out["id"] = request_id
    return out


def model_metadata(model_name: str, inputs: Sequence[Any], outputs: Sequence[Any], platform: str,
                   batch_dim: bool) -> dict[str, Any]:
    """``GET /v2/models/{name}``: the inputs and outputs; a dynamic batch dim is -1."""
    def tensors(ts: Sequence[Any]) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": datatype_of(t.dtype),
                 "shape": ([-1] + list(t.shape[1:])) if batch_dim else list(t.shape)} for t in ts]

    return {"name": model_name, "versions": ["1"], "platform": platform, "inputs": tensors(inputs),
            "outputs": tensors(outputs)}
