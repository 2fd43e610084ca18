"""The public API: ``rammer.load``, ``rammer.compile`` and ``CompiledModel``."""

from __future__ import annotations

import inspect
import os
import time
from collections import abc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import plugins
from .artifact import read_compiled, save_compiled
from .backend import Backend, Executable, check_options
from .diagnostics import fallbacks_of, report_fallbacks
from .errors import CompileError, FeedError, ModelLoadError, RammerError, UnsupportedOpError
from .feed_bounds import index_bounds
from .feed_hints import declared_input_dims, wrong_shape
from .frontend import ModelSource, load
from .frontend.limits import Limits
from .gc_freeze import objects_before_frozen
from .ir import Graph, TensorInfo, dtype_name
from .ir_codec import PLACEHOLDER
from .ml.lower import lower_ml
from .ml.strategy import compiles_tree_kernel
from .model_key import model_key
from .profile import Profile, write_chrome_trace
from .progress import compile_progress


class CompiledModel:
    """A model compiled for one backend; call it with a dict of feeds."""

    def __init__(self, graph: Graph, backend: Backend, executable: Executable,
                 options: Mapping[str, Any], compile_seconds: float):
        #: The model's graph.  For a model loaded from a compile cache or a saved file without
        #: importing it, the part its program keeps: the name, inputs, outputs and the nodes run on
        #: the host, the others being placeholders (:data:`rammer.ir_codec.PLACEHOLDER`);
        #: :meth:`full_graph` gives the whole graph.
        self.graph = graph
        self.backend = backend
        self.executable = executable
        self.options = dict(options)
        self.compile_seconds = compile_seconds
        #: The model as given to ``compile`` (a path, bytes or proto; None for an IR graph) and its
        #: bound input shapes: what ``save`` writes beside the backend's program.
        self.source: Any = None
        self.input_shapes: Mapping[str, Sequence[int]] | None = None
        #: Whether the executable's ``run`` takes ``outputs=`` (looked up on first use).
        self._writes_into: bool | None = None
        #: (name, dtype, shape) per input, for the fast feed check.
        self._feed_plan = [(t.name, np.dtype(t.dtype), tuple(t.shape)) for t in graph.inputs]
        #: The model's declared input dims, read on the first wrong-shape feed (see _declared_dims).
        self._declared: dict[str, list] | None = None

    @property
    def inputs(self) -> list[TensorInfo]:
        return list(self.graph.inputs)

    @property
    def outputs(self) -> list[TensorInfo]:
        return list(self.graph.outputs)

    def check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Validated feeds, as arrays; a :class:`FeedError` naming every problem otherwise.

        Arrays are taken as numpy would read them, made native: a big-endian array is
        converted to the machine's byte order, a masked array without masked elements
        to its data, a ``str`` array for a string input to objects."""
        if type(feeds) is not dict and not isinstance(feeds, Mapping):  # (the ABC check is slow)
            raise FeedError(_not_a_mapping(feeds, [t.name for t in self.graph.inputs]))
        fast = self._fast_feeds(feeds)
        if fast is not None:
            return fast
        expected = {t.name: t for t in self.graph.inputs}
        problems: list[str] = []
        missing = [n for n in expected if n not in feeds]
        if missing:
            problems.append("missing feed(s) " + ", ".join(f"'{expected[n]}'" for n in missing))
        unknown = [n for n in feeds if n not in expected]
        if unknown:
            problems.append(f"unknown input(s) {unknown} (inputs: {list(expected)})")
        checked: dict[str, np.ndarray] = {}
        for name, info in expected.items():
            if name not in feeds:
                continue
            arr, problem = _feed_array(name, feeds[name], info)
            if problem:
                problems.append(problem)
            elif dtype_name(arr.dtype) != info.dtype:
                problems.append(
                    f"input '{name}' is {_dtype_shown(arr.dtype)} but the model expects {_dtype_shown(info.dtype)} "
                    f"(convert it with .astype(np.{'object_' if info.dtype == 'object' else info.dtype}))"
                )
            elif tuple(arr.shape) != info.shape:
                problems.append(wrong_shape(name, arr.shape, info.shape, self.declared_input_dims().get(name)))
            checked[name] = arr
        if problems:
            raise FeedError("; ".join(problems))
        return checked

    def declared_input_dims(self) -> dict[str, list]:
        """The dims the model declares per input (fixed or dynamic), read from its source on the
        first wrong-shape feed; empty for an IR graph (then every dim counts as fixed:
        ``input_shapes`` does not apply to a graph)."""
        declared = getattr(self, "_declared", None)
        if declared is None:
            declared = self._declared = declared_input_dims(self.source) or {}
        return declared

    def _fast_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """The feeds as given when every one is an array of the right dtype and shape (the
        common case, checked without building messages); None sends them to the full check."""
        if len(feeds) != len(self._feed_plan):
            return None
        out = {}
        for name, dt, shape in self._feed_plan:
            arr = feeds.get(name)
            # (type() is: subclasses such as masked arrays take the full check)
            # (the dtype by identity first: numpy's comparison is a slow path)
            if type(arr) is not np.ndarray or (arr.dtype is not dt and arr.dtype != dt) or arr.shape != shape:
                return None
            out[name] = arr
        return out

    def run(self, feeds: Mapping[str, Any], outputs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The outputs for ``feeds``.  Arrays in ``outputs`` (by output name) receive that
        output in place: backends that can write into them do, without another copy."""
        if outputs is None:
            return self.executable.run(self.check_feeds(feeds))
        bound = self._check_outputs(outputs)
        checked = self.check_feeds(feeds)
        if self._writes_into is None:
            self._writes_into = "outputs" in inspect.signature(self.executable.run).parameters
        if self._writes_into:
            return self.executable.run(checked, outputs=bound)  # type: ignore[call-arg]  # its run takes them
        results = self.executable.run(checked)
        for name, target in bound.items():
            np.copyto(target, results[name])
            results[name] = target
        return results

    def _check_outputs(self, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        expected = {t.name: t for t in self.graph.outputs}
        problems = []
        for name, arr in outputs.items():
            info = expected.get(name)
            if info is None:
                problems.append(f"unknown output '{name}' (outputs: {list(expected)})")
            elif not isinstance(arr, np.ndarray) or not arr.flags.writeable:
                problems.append(f"output '{name}' must be bound to a writeable numpy array")
            elif dtype_name(arr.dtype) != info.dtype or tuple(arr.shape) != info.shape:
                problems.append(f"output '{name}' is bound to a {dtype_name(arr.dtype)}{list(arr.shape)} array but "
                                f"the model produces {info.dtype}{list(info.shape)}")
        if problems:
            raise FeedError("; ".join(problems))
        return dict(outputs)

    def __call__(self, feeds: Mapping[str, Any] | None = None, **named: Any) -> dict[str, np.ndarray]:
        if type(feeds) is dict and not named:  # the common call, without the ABC check and a copy
            # (checked here rather than through run and check_feeds: after an idle spell each
            # Python frame on the call path runs from cold caches)
            fast = self._fast_feeds(feeds)
            if fast is not None:
                return self.executable.run(fast)
            return self.run(feeds)
        if feeds is not None and not isinstance(feeds, abc.Mapping):
            raise FeedError(_not_a_mapping(feeds, [t.name for t in self.graph.inputs]))
        merged = dict(feeds or {})
        merged.update(named)
        return self.run(merged)

    def profile(self, feeds: Mapping[str, Any], path: str | None = None, warmup: int = 1) -> Profile:
        """Run once, timing every rTask, barrier wait and host step as it really runs;
        write a Chrome trace (chrome://tracing, Perfetto) to ``path`` when given.  ``warmup``
        traced runs go first (the first compiles the tracing variant and warms the caches)."""
        trace_run = getattr(self.executable, "trace_run", None)
        if trace_run is None:
            raise CompileError(f"backend '{self.backend.name}' cannot profile a run (its executable has no "
                               f"trace_run); profile on a backend that schedules rTasks, e.g. cpu")
        checked = self.check_feeds(feeds)
        for _ in range(warmup):
            trace_run(checked)
        _, slices = trace_run(checked)
        wall_us = (max(x.end_ns for x in slices) - min(x.start_ns for x in slices)) / 1e3 if slices else 0.0
        if path is not None:
            write_chrome_trace(slices, path, f"rammer {self.graph.name} on {self.backend.name}")
        return Profile(tuple(slices), wall_us, path)

    def full_graph(self) -> Graph:
        """The whole graph the program runs (imported now when the model was loaded without it)."""
        full = getattr(self.executable, "full_graph", None)
        return full() if callable(full) else self.graph

    def save(self, path: str) -> str:
        """Save the compiled model to ``path`` (a ``.rammer`` file; see :mod:`rammer.artifact`)."""
        return save_compiled(self, path)

    def random_feeds(self, seed: int = 0, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Inputs of the right shapes and dtypes (only ``names`` when given), drawn from ``seed``
        (indices within the tables they index: see :func:`random_feeds`)."""
        inputs = [t for t in self.graph.inputs if names is None or t.name in names]
        return random_feeds(inputs, seed, self._graph_for_feeds(inputs))

    def _graph_for_feeds(self, inputs: Sequence[TensorInfo]) -> Graph:
        """The graph whose Gathers bound the random integer feeds.  A model loaded from the compile
        cache holds placeholders for its compiled nodes, so the whole graph is imported then, and
        only when an integer input could index a table."""
        graph = self.graph
        if not any(n.op_type == PLACEHOLDER for n in graph.nodes):
            return graph
        if not any(np.issubdtype(np.dtype(t.dtype), np.integer) for t in inputs):
            return graph
        try:
            return self.full_graph()
        except RammerError:  # a .rammer file holds no graph: integers are drawn as for any input
            return graph

    def __repr__(self) -> str:
        return f"<CompiledModel {self.graph.name!r} on {self.backend.name!r}: {len(self.graph.nodes)} nodes>"


def _not_a_mapping(feeds: Any, names: list[str]) -> str:
    example = ", ".join(f"'{n}': {n.replace('.', '_') if n.isidentifier() else 'array'}" for n in names[:3])
    return (f"feeds must be a dict mapping input names to arrays, got a {type(feeds).__name__}; "
            f"this model's inputs are {names}: call it as model({{{example}{', ...' if len(names) > 3 else ''}}})")


def _dtype_shown(dtype: Any) -> str:
    name = dtype_name(dtype)
    return "string (object)" if name == "object" else name


def _feed_array(name: str, value: Any, info: TensorInfo) -> tuple[np.ndarray, str | None]:
    """``value`` as a native numpy array for input ``info``, or a problem to report."""
    if isinstance(value, np.ma.MaskedArray):
        if np.ma.count_masked(value):
            return np.asarray(()), (f"input '{name}' is a masked array with {np.ma.count_masked(value)} masked "
                                    f"element(s); models read every element: fill them (x.filled(value))")
        value = np.ma.getdata(value)
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        return np.asarray(()), f"input '{name}' cannot be read as an array ({exc})"
    if arr.dtype.kind == "O" and info.dtype != "object":
        # A list of arrays of different lengths, or arbitrary objects: numpy cannot give it a number type.
        return arr, (f"input '{name}' is not a numeric array (numpy reads it as objects, "
                     f"e.g. ragged nested lists); pass a {info.dtype} array of shape {list(info.shape)}")
    if arr.dtype.byteorder not in ("=", "|") and arr.dtype.byteorder != _NATIVE:
        arr = arr.astype(arr.dtype.newbyteorder("="))  # big-endian data (read from files of other machines)
    if info.dtype == "object" and arr.dtype.kind in "US":
        arr = arr.astype(object)
    return arr, None


_NATIVE = "<" if np.little_endian else ">"


def random_feeds(inputs: Sequence[TensorInfo], seed: int = 0, graph: Graph | None = None) -> dict[str, np.ndarray]:
    """Inputs of the right shapes and dtypes, drawn from ``seed``; a :class:`FeedError` when
    they do not fit in memory.

    Integers are drawn from [0, 10), except that with the model's ``graph`` an integer input that
    a Gather (or GatherElements, GatherND) reads as its indices, directly or through ops that pass
    values on (Cast, Reshape, Unsqueeze...), is drawn from [0, the gathered axis's size): token ids
    stay within the vocabulary (:mod:`rammer.feed_bounds`)."""
    try:
        return _random_feeds(inputs, seed, index_bounds(graph) if graph is not None else {})
    except MemoryError:
        total = sum(t.size * t.np_dtype.itemsize for t in inputs)
        raise FeedError(f"not enough memory for random inputs of {total / (1 << 20):,.1f} MiB "
                        f"({', '.join(f'{t.name}{list(t.shape)}' for t in inputs)}); use smaller input shapes "
                        f"(--shape) or a smaller batch") from None


_CHUNK = 1 << 22


def _random_feeds(inputs: Sequence[TensorInfo], seed: int, bounds: Mapping[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for t in inputs:
        dt = t.np_dtype
        if dt.kind == "f" and t.size > _CHUNK:
            # In chunks: no float64 copy of a large input (the same values as one call gives).
            out = np.empty(t.size, dt)
            for start in range(0, t.size, _CHUNK):
                stop = min(start + _CHUNK, t.size)
                out[start:stop] = rng.standard_normal(stop - start)
            feeds[t.name] = out.reshape(t.shape)
        elif dt.kind == "f":
            feeds[t.name] = rng.standard_normal(t.shape).astype(dt)
        elif dt.kind in "iu":
            high = bounds.get(t.name, 10)
            if high < 1:  # an empty table: no index is in range, draw as usual (the run reports it)
                high = 10
            high = min(high, int(np.iinfo(dt).max) + 1)
            feeds[t.name] = rng.integers(0, high, size=t.shape).astype(dt)
        elif dt.kind == "b":
            feeds[t.name] = rng.random(t.shape) < 0.5
        else:
            feeds[t.name] = np.full(t.shape, "a", dtype=object)
    return feeds


def compile(model: ModelSource | Graph, backend: str | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None, strict: bool = False,
            limits: Limits | Mapping[str, int] | None = None, **options: Any) -> CompiledModel:
    """Compile ``model`` (a path, bytes, an ``onnx.ModelProto`` or an IR graph)
    for ``backend`` (the default backend when None).  ``limits`` bounds tensor sizes and
    unroll lengths at import (:mod:`rammer.frontend.limits`; e.g. ``{"max_unroll": 10**6}``).

    Nodes the backend leaves to the reference implementation are logged once as a
    warning on the ``rammer`` logger; ``strict=True`` makes them a :class:`CompileError`.
    With ``emit=DIR``, a backend that emits source compiles even where it cannot run (running the
    result then raises, naming what is missing).
    """
    be = plugins.get_backend(backend, compile_only=bool(options.get("emit")))
    # ai.onnx.ml nodes become standard ops; tree_strategy= picks Hummingbird's strategy (docs/ml.md).
    tree_strategy = options.pop("tree_strategy", None)
    if be.capabilities.options is not None:
        check_options(be.name, options, be.capabilities.options)
    imported: list[Graph] = []

    def load_graph() -> Graph:
        """The model imported, ml nodes lowered, checked against the backend (once)."""
        if not imported:
            graph = model if isinstance(model, Graph) else load(model, input_shapes, limits)
            graph = lower_ml(graph, tree_strategy, device=be.capabilities.device,
                             tree_kernel=compiles_tree_kernel(be.capabilities))
            _refuse_unsupported(be, graph)
            # (bytes cannot change: hashing them again would only cost time, 0.15 s per 100 MB)
            if key is not None and not isinstance(model, bytes) and _key() != key:
                # a program must never be filed under the key of other bytes
                raise ModelLoadError(f"the model '{_source_label(model)}' changed while it was being compiled, or "
                                     f"since; compile it again")
            imported.append(graph)
        return imported[0]

    def _key() -> str | None:
        cache_dir = be.compile_cache_dir(options)
        if isinstance(model, Graph) or cache_dir is None:
            return None
        return model_key(model, input_shapes, limits, {"tree_strategy": tree_strategy,
                                                       "device": be.capabilities.device},
                         os.path.join(cache_dir, "model-digests"))

    # A model given as a file, bytes or proto is keyed by its bytes and import settings, so a
    # backend's compile cache can answer before the model is imported (rammer.model_key).
    key = _key()
    if key is None:
        load_graph()
    name = imported[0].name if imported else _source_label(model)
    start = time.perf_counter()
    try:
        with objects_before_frozen(), compile_progress(f"'{name}' for {be.name}"):
            executable = be.compile(imported[0], options) if key is None else \
                be.compile_keyed(key, options, load_graph)
    except RammerError:
        raise
    except MemoryError:
        raise CompileError(f"backend '{be.name}' ran out of memory compiling '{name}'; check the model's "
                           f"sizes and input_shapes, or compile for a smaller batch") from None
    except Exception as exc:
        raise CompileError(f"backend '{be.name}' failed to compile '{name}': {type(exc).__name__}: {exc}") from exc
    seconds = time.perf_counter() - start
    # without the import (a cache hit): the part of the graph the executable keeps
    graph = imported[0] if imported else executable.graph
    report_fallbacks(graph.name, be.name, fallbacks_of(executable), strict)
    compiled = CompiledModel(graph, be, executable, options, seconds)
    if not isinstance(model, Graph):
        compiled.source, compiled.input_shapes = model, input_shapes
    return compiled


class _NotCached(Exception):
    """Raised by the graph loader of :func:`compile_if_cached`: the backend had no cached program."""


def compile_if_cached(model: ModelSource, backend: str | None = None,
                      input_shapes: Mapping[str, Sequence[int]] | None = None, **options: Any) -> CompiledModel | None:
    """What :func:`compile` gives when the backend's compile cache holds the program (without
    importing the model), else None (nothing is compiled; the caller compiles as it sees fit)."""
    def refuse() -> Graph:
        raise _NotCached()

    be = plugins.get_backend(backend)
    known = be.capabilities.options
    if options.get("emit") or "tree_strategy" in options or (known is not None and set(options) - known):
        return None
    cache_dir = be.compile_cache_dir(options)
    if cache_dir is None:
        return None
    key = model_key(model, input_shapes, None, {"tree_strategy": None, "device": be.capabilities.device},
                    os.path.join(cache_dir, "model-digests"))
    if key is None:
        return None
    start = time.perf_counter()
    try:
        executable = be.compile_keyed(key, options, refuse)
    except _NotCached:
        return None
    except RammerError:
        return None  # compile() will say what is wrong
    report_fallbacks(executable.graph.name, be.name, fallbacks_of(executable), False)
    compiled = CompiledModel(executable.graph, be, executable, options, time.perf_counter() - start)
    compiled.source, compiled.input_shapes = model, input_shapes
    return compiled


def _refuse_unsupported(be: Backend, graph: Graph) -> None:
    bad = be.unsupported_nodes(graph)
    if bad:
        ops = sorted({n.op_type for n in bad})
        raise UnsupportedOpError(
            f"backend '{be.name}' cannot compile op(s) {', '.join(ops)} (at nodes "
            f"{', '.join(n.name for n in bad[:5])}{'...' if len(bad) > 5 else ''}); choose another --backend",
            [(n.op_type, n.domain, n.name) for n in bad],
        )


def _source_label(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        return os.path.basename(os.fspath(model))
    return "model"


def load_compiled(path: str, backend: str | None = None, strict: bool = False) -> CompiledModel:
    """A model saved by :meth:`CompiledModel.save`, ready to run without compiling it again.

    As :func:`compile` does, it warns once about nodes the program runs in numpy (the
    reference implementation), and with ``strict=True`` refuses them (:class:`CompileError`)."""
    loaded = read_compiled(path, backend)
    report_fallbacks(loaded.graph.name, loaded.backend.name, fallbacks_of(loaded.executable), strict)
    model = CompiledModel(loaded.graph, loaded.backend, loaded.executable, loaded.options, 0.0)
    model.source, model.input_shapes = loaded.source, loaded.input_shapes
    if loaded.declared_inputs is not None:
        model._declared = loaded.declared_inputs
    return model
