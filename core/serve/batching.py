"""Dynamic batching onto a model compiled for a fixed batch size.

rammer compiles static shapes, so a deployment compiles its model for batch
``B`` (dim 0 of every input and output) and runs requests of any row count
through it: the rows of the requests that arrived together are concatenated,
cut into chunks of ``B`` rows, the last chunk padded with zeros, and the
outputs split back per request (padding rows are dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import onnx

from ..api import compile as compile_model
from ..errors import FeedError, RammerError
from ..frontend.source import read_model

__all__ = ["batch_size", "run_batched", "compile_batch_sizes"]


def batch_size(model: Any) -> int:
    """The compiled batch size ``B``: dim 0 shared by every input and output (an error otherwise)."""
    dims = {t.shape[0] if t.shape else None for t in list(model.inputs) + list(model.outputs)}
    if len(dims) != 1 or None in dims:
        raise RammerError("dynamic batching needs dim 0 of every input and output to be the batch "
                          f"(the model's dim 0 sizes: {sorted(str(d) for d in dims)}); serve it without --batch")
    return int(cast(int, dims.pop()))  # None is ruled out above


def run_batched(run: Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]], inputs: Sequence[Any],
                requests: Sequence[Mapping[str, np.ndarray]], batch: int) -> list[dict[str, np.ndarray]]:
    """Each request's outputs, running ``run`` on full batches of ``batch`` rows."""
    rows: list[int] = []
    for k, req in enumerate(requests):
        missing = [t.name for t in inputs if t.name not in req]
        if missing:
            raise FeedError(f"request {k}: missing input(s) {missing} (inputs: {[t.name for t in inputs]})")
        counts = {t.name: np.shape(req[t.name])[0] if np.ndim(req[t.name]) else None for t in inputs}
        n = set(counts.values())
        if None in n:
            scalar = [name for name, c in counts.items() if c is None]
            raise FeedError(f"request {k}: input(s) {scalar} have no dim 0 to count rows in; send each input "
                            f"with its rows along dim 0")
        if len(n) != 1:
            raise FeedError(f"request {k}: the inputs have different row counts in dim 0 ({counts}); every "
                            f"input needs the same number of rows")
        for t in inputs:
            if tuple(np.shape(req[t.name])[1:]) != tuple(t.shape[1:]):
                raise FeedError(f"request {k}: input '{t.name}' rows are {list(np.shape(req[t.name])[1:])}, "
                                f"the model's are {list(t.shape[1:])}")
        rows.append(cast(int, n.pop()))  # None is ruled out above
    total = sum(rows)
    joined = {t.name: np.concatenate([np.asarray(r[t.name], dtype=t.dtype) for r in requests], axis=0)
              if requests else np.zeros((0,) + tuple(t.shape[1:]), t.dtype) for t in inputs}
    chunks: list[Mapping[str, np.ndarray]] = []
    for start in range(0, total, batch):
        feeds = {}
        for t in inputs:
            part = joined[t.name][start:start + batch]
            if part.shape[0] < batch:
                pad = np.zeros((batch - part.shape[0],) + part.shape[1:], part.dtype)
                part = np.concatenate([part, pad], axis=0)
            feeds[t.name] = np.ascontiguousarray(part)
        chunks.append(run(feeds))
    merged = {name: np.concatenate([c[name] for c in chunks], axis=0)[:total] for name in (chunks[0] if chunks else {})}
    out, at = [], 0
    for n in rows:
        out.append({name: v[at:at + n] for name, v in merged.items()})
        at += n
    return out


def compile_batch_sizes(source: Any, sizes: Sequence[int], backend: str | None = None,
                        **options: Any) -> dict[int, Any]:
    """The model compiled once per batch size of ``sizes`` (dim 0 of every input bound to it).

    ``source`` is an ONNX path, bytes or ModelProto whose inputs have a dynamic (or any)
    dim 0; each compile binds it.  Returns ``{size: CompiledModel}``."""


    proto, _ = read_model(source) if not isinstance(source, onnx.ModelProto) else (source, None)
    inits = {t.name for t in proto.graph.initializer}
    out = {}
    for b in sizes:
        shapes = {}
        for vi in proto.graph.input:
            if vi.name in inits:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim]
            if any(d < 0 for d in dims[1:]):
                raise RammerError(f"input '{vi.name}' has a dynamic dim besides the batch; give input_shapes and "
                                  f"compile it yourself")
            shapes[vi.name] = (int(b), *dims[1:])
        out[int(b)] = compile_model(proto, backend=backend, input_shapes=shapes, **options)
    return out
