"""``rammer.InferenceSession``: onnxruntime's session interface over rammer.

Code written for onnxruntime should run with one changed import::

    sess = rammer.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    (probs,) = sess.run(None, {name: x})

rammer compiles static shapes.  A model whose inputs have symbolic or
unknown dimensions is compiled on first use for the shapes it is fed, one
compiled program per distinct feed shape (kept in a small LRU); give
``input_shapes=`` to compile once, up front.  ``get_inputs()`` reports
dimensions as onnxruntime does: ints where they are fixed, the symbol name
(or ``None``) where they are not.

Providers are matched to backends through their capabilities (the device
kind and emitted source language), never by backend name in the core; a
rammer backend name is accepted as a provider too.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from . import plugins
from .api import CompiledModel, compile_if_cached
from .api import compile as compile_model
from .errors import BackendUnavailableError, FeedError
from .feed_hints import wrong_shape
from .frontend import load_proto
from .frontend.source import ModelSource
from .profile import Profile, write_chrome_trace

__all__ = ["InferenceSession", "SessionOptions", "NodeArg", "ModelMetadata", "IOBinding", "ort_type"]

#: onnxruntime's provider names -> what a backend must declare to stand for it.
#: (device kind, source language or None for "any").
PROVIDER_CAPABILITIES: Mapping[str, tuple[str, str | None]] = {
    "CPUExecutionProvider": ("cpu", None),
    "CUDAExecutionProvider": ("gpu", "cuda"),
    "TensorrtExecutionProvider": ("gpu", "cuda"),
    "ROCMExecutionProvider": ("gpu", "hip"),
    "MIGraphXExecutionProvider": ("gpu", "hip"),
    "OpenCLExecutionProvider": ("gpu", "opencl"),
}

#: numpy dtype name -> onnxruntime's ``NodeArg.type`` spelling.
_ORT_TYPES = {
    "float32": "tensor(float)", "float64": "tensor(double)", "float16": "tensor(float16)",
    "bfloat16": "tensor(bfloat16)", "int8": "tensor(int8)", "int16": "tensor(int16)",
    "int32": "tensor(int32)", "int64": "tensor(int64)", "uint8": "tensor(uint8)",
    "uint16": "tensor(uint16)", "uint32": "tensor(uint32)", "uint64": "tensor(uint64)",
    "bool": "tensor(bool)", "object": "tensor(string)", "str": "tensor(string)",
}

#: Compiled shape signatures kept per session for models with dynamic inputs.
MAX_SHAPE_VARIANTS = 8


def ort_type(dtype: str) -> str:
    """onnxruntime's type string for a numpy dtype name (``float32`` -> ``tensor(float)``)."""
    return _ORT_TYPES.get(dtype, f"tensor({dtype})")


@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it."""

    name: str
    type: str
    shape: list[int | str | None]

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


@dataclass
class SessionOptions:
    """The onnxruntime options that mean something to rammer.

    ``intra_op_num_threads`` becomes the number of vEUs (0: the backend's
    default); ``extra`` passes backend options through unchanged
    (e.g. ``{"policy": "op-by-op"}``).  Other onnxruntime attributes may be
    set and are ignored, as onnxruntime ignores options a provider lacks.
    """

    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    #: Time every run rTask by rTask; ``end_profiling()`` writes the Chrome trace.
    enable_profiling: bool = False
    profile_file_prefix: str = "rammer_profile"
    graph_optimization_level: Any = None
    log_severity_level: int = 2
    extra: dict[str, Any] = field(default_factory=dict)

    def backend_options(self) -> dict[str, Any]:
        opts = dict(self.extra)
        if self.intra_op_num_threads and "veus" not in opts:
            opts["veus"] = int(self.intra_op_num_threads)
        return opts


def _select_backend(providers: Sequence[Any] | None, backend: str | None) -> str | None:
    """The backend name for ``backend`` or the first usable entry of ``providers``."""
    if backend is not None:
        return backend
    if not providers:
        return None
    known = plugins.backends()
    tried: list[str] = []
    for p in providers:
        name = p[0] if isinstance(p, (tuple, list)) else p
        name = str(name)
        tried.append(name)
        if name in known:
            if known[name].availability().ok:
                return name
            continue
        want = PROVIDER_CAPABILITIES.get(name)
        if want is None:
            continue
        kind, lang = want
        matches = [b for b in known.values()
                   if b.capabilities.device == kind
                   and (lang is None or b.capabilities.emits_source == lang)
                   and b.availability().ok]
        if matches:
            return max(matches, key=lambda b: b.default_priority).name
    raise BackendUnavailableError(
        f"none of the providers {tried} is available here (backends: "
        f"{', '.join(sorted(n for n, b in known.items() if b.availability().ok))}); "
        f"run 'rammer backends' to see why, or pass providers=['CPUExecutionProvider']")


#: Feed values converted to the input's declared element type (onnxruntime converts lists;
#: tuples and Python scalars are read the same way here rather than refused).
_PYTHON_VALUES = (list, tuple, bool, int, float)


def _array_from_python(name: str, value: Any, dtype: str) -> np.ndarray:
    """``value`` (a list, tuple or Python scalar) as a ``dtype`` array; a :class:`FeedError`
    naming input ``name`` when it is ragged, holds what ``dtype`` cannot, or would lose values."""
    target = np.dtype(object if dtype in ("object", "str") else dtype) if dtype != "unknown" else None
    try:
        natural = np.asarray(value)
    except ValueError:
        raise FeedError(f"input '{name}' is a ragged list (its rows have different lengths); "
                        f"pass a rectangular nested list or a numpy array") from None
    if natural.dtype.kind == "O" and target is not None and target.kind != "O":
        raise FeedError(f"input '{name}' is a ragged list or holds non-numbers; "
                        f"pass a rectangular nested list of numbers or a {dtype} numpy array")
    if target is None:
        return natural
    if target.kind in "iub" and natural.dtype.kind in "fc" and natural.size \
            and not np.all(np.isfinite(natural) & (natural == np.round(natural.real))):
        raise FeedError(f"input '{name}' holds non-integer values but the model expects {dtype}; "
                        f"round them (or pass a {dtype} array) first")
    try:
        return np.asarray(value, dtype=target)
    except (ValueError, TypeError, OverflowError) as exc:
        raise FeedError(f"input '{name}' cannot be read as {dtype} ({exc}); pass a {dtype} array") from None


def _dims(info: onnx.ValueInfoProto) -> list[int | str | None]:
    dims: list[int | str | None] = []
    for d in info.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def _elem_dtype(info: onnx.ValueInfoProto) -> str:
    elem = info.type.tensor_type.elem_type
    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    except Exception:  # undefined / non-tensor types
        return "unknown"
    return "object" if np_dtype == np.dtype(object) else np.dtype(np_dtype).name


class IOBinding:
    """Feeds and caller-owned output arrays for :meth:`InferenceSession.run_with_iobinding`.

    ``bind_output(name, array)`` makes the session write that output into
    ``array`` (its dtype and shape must match); outputs bound by name only
    are allocated by the run, as onnxruntime does.
    """

    def __init__(self, session: InferenceSession):
        self._session = session
        self._feeds: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray | None] = {}
        self._results: list[np.ndarray] = []

    def bind_cpu_input(self, name: str, array: np.ndarray) -> None:
        self._feeds[name] = array

    def bind_input(self, name: str, array: np.ndarray, *_: Any, **__: Any) -> None:
        self._feeds[name] = array

    def bind_output(self, name: str, array: np.ndarray | None = None, *_: Any, **__: Any) -> None:
        if array is not None and not isinstance(array, np.ndarray):
            raise FeedError(f"output '{name}' must be bound to a numpy array (got {type(array).__name__})")
        self._outputs[name] = array

    def clear_binding_inputs(self) -> None:
        self._feeds.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def get_outputs(self) -> list[np.ndarray]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [r.copy() for r in self._results]


class InferenceSession:
    """An onnxruntime-shaped session over a rammer-compiled model.

    ``path_or_bytes`` is a path, bytes or an ``onnx.ModelProto``.  Pick the
    backend with ``backend=`` (a rammer backend name) or ``providers=``
    (onnxruntime provider names or rammer backend names, first available
    wins); by default rammer's default backend.  ``input_shapes`` binds
    dynamic dimensions up front; ``**options`` go to the backend.
    """

    def __init__(self, path_or_bytes: ModelSource, sess_options: SessionOptions | None = None,
                 providers: Sequence[Any] | None = None, provider_options: Any = None, *,
                 backend: str | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 **options: Any):
        del provider_options  # onnxruntime's per-provider options; rammer's go in **options
        self._source = path_or_bytes
        self._loaded_proto: onnx.ModelProto | None = None
        self._sess_options = sess_options or SessionOptions()
        self._backend = _select_backend(providers, backend) or plugins.default_backend_name()
        self._options = {**self._sess_options.backend_options(), **options}
        known = plugins.get_backend(self._backend).capabilities.options
        if "veus" in self._options and known is not None and "veus" not in known and "veus" not in options:
            del self._options["veus"]  # a thread count means nothing to this backend, as in onnxruntime
        self._variants: OrderedDict[tuple, CompiledModel] = OrderedDict()
        self._profiles: list[Profile] = []
        # A model file whose program the compile cache holds is neither read nor imported (a model
        # that compiled without input_shapes has static inputs).
        self._static: CompiledModel | None = None
        if isinstance(path_or_bytes, (str, os.PathLike)):
            self._static = compile_if_cached(path_or_bytes, backend=self._backend, input_shapes=input_shapes,
                                             **self._options)
        if self._static is None:
            inits = {t.name for t in self._proto.graph.initializer}
            self._inputs = [NodeArg(v.name, ort_type(_elem_dtype(v)), _dims(v))
                            for v in self._proto.graph.input if v.name not in inits]
            self._outputs = [NodeArg(v.name, ort_type(_elem_dtype(v)), _dims(v)) for v in self._proto.graph.output]
            self._dynamic = any(not isinstance(d, int) for a in self._inputs for d in a.shape)
            #: Declared element type per input: Python lists are converted to it, as onnxruntime does.
            self._input_dtypes = {v.name: _elem_dtype(v) for v in self._proto.graph.input if v.name not in inits}
            if input_shapes is not None or not self._dynamic:
                # a file is compiled from its path: the cache keys it by its bytes, as above
                source = path_or_bytes if isinstance(path_or_bytes, (str, os.PathLike)) else self._proto
                self._static = compile_model(source, backend=self._backend, input_shapes=input_shapes,
                                             **self._options)
        if self._static is not None:
            self._inputs = [NodeArg(t.name, ort_type(t.dtype), list(t.shape)) for t in self._static.inputs]
            self._outputs = [NodeArg(t.name, ort_type(t.dtype), list(t.shape)) for t in self._static.outputs]
            self._dynamic = False
            self._input_dtypes = {t.name: t.dtype for t in self._static.inputs}

    @property
    def _proto(self) -> onnx.ModelProto:
        """The model, read and checked when first needed (a cache hit does not need it)."""
        if self._loaded_proto is None:
            self._loaded_proto = load_proto(self._source)
        return self._loaded_proto

    # -- onnxruntime's introspection ------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return []

    def get_providers(self) -> list[str]:
        return [self._backend]

    def get_provider_options(self) -> dict[str, dict[str, Any]]:
        return {self._backend: dict(self._options)}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def get_modelmeta(self) -> ModelMetadata:
        p = self._proto
        return ModelMetadata(
            producer_name=p.producer_name, graph_name=p.graph.name, domain=p.domain,
            description=p.doc_string, graph_description=p.graph.doc_string, version=int(p.model_version),
            custom_metadata_map={e.key: e.value for e in p.metadata_props})

    @property
    def compiled(self) -> CompiledModel | None:
        """The compiled model when shapes are static (None until first run otherwise)."""
        return self._static

    # -- running --------------------------------------------------------------
    def _model_for(self, feeds: Mapping[str, Any]) -> CompiledModel:
        if self._static is not None:
            return self._static
        shapes: dict[str, tuple[int, ...]] = {}
        for arg in self._inputs:
            if arg.name not in feeds:
                raise FeedError(f"missing feed '{arg.name}' ({arg.type}, shape {arg.shape})")
            shape = tuple(int(d) for d in np.shape(feeds[arg.name]))
            if len(shape) != len(arg.shape) or any(isinstance(d, int) and d != s for d, s in zip(arg.shape, shape)):
                raise FeedError(wrong_shape(arg.name, shape, None, arg.shape))
            shapes[arg.name] = shape
        key = tuple(sorted(shapes.items()))
        model = self._variants.get(key)
        if model is None:
            model = compile_model(self._proto, backend=self._backend, input_shapes=shapes, **self._options)
            self._variants[key] = model
            if len(self._variants) > MAX_SHAPE_VARIANTS:
                self._variants.popitem(last=False)
        else:
            self._variants.move_to_end(key)
        return model

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """The outputs named by ``output_names`` (all when None), in that order."""
        del run_options
        if not isinstance(input_feed, Mapping):
            raise FeedError("input_feed must be a dict mapping input names to arrays "
                            f"(got {type(input_feed).__name__})")
        input_feed = self._arrays_from_lists(input_feed)
        model = self._model_for(input_feed)
        if self._sess_options.enable_profiling:
            self._profiles.append(model.profile(input_feed, warmup=0 if self._profiles else 1))
        results = model.run(input_feed)
        return self._pick(results, output_names)

    def _arrays_from_lists(self, feeds: Mapping[str, Any]) -> Mapping[str, Any]:
        """``feeds`` with Python lists, tuples and scalars made arrays of their input's declared
        element type, as onnxruntime converts lists (numpy arrays are left as they are: a wrong
        dtype there is reported, not cast, as onnxruntime reports it)."""
        if all(not isinstance(v, _PYTHON_VALUES) for v in feeds.values()):
            return feeds  # (the common case: every feed already an array)
        converted = dict(feeds)
        for name, value in feeds.items():
            if isinstance(value, _PYTHON_VALUES) and name in self._input_dtypes:
                converted[name] = _array_from_python(name, value, self._input_dtypes[name])
        return converted

    def end_profiling(self) -> str:
        """Write the traces of the runs since profiling began to ``<prefix>_<time>.json``
        (one Chrome trace; runs follow each other) and return its path, as onnxruntime does."""
        if not self._sess_options.enable_profiling:
            return ""
        slices = [s for p in self._profiles for s in p.slices]
        path = f"{self._sess_options.profile_file_prefix}_{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
        write_chrome_trace(slices, path, f"rammer {self._proto.graph.name} on {self._backend}")
        self._profiles.clear()
        return path

    def _pick(self, results: Mapping[str, np.ndarray], output_names: Sequence[str] | None) -> list[np.ndarray]:
        names = [o.name for o in self._outputs] if output_names is None else list(output_names)
        unknown = [n for n in names if n not in results]
        if unknown:
            raise FeedError(f"unknown output(s) {unknown} (outputs: {[o.name for o in self._outputs]})")
        return [results[n] for n in names]

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, binding: IOBinding, run_options: Any = None) -> None:
        """Run with the binding's feeds; bound output arrays receive the results in place
        (written there directly by backends that support it, with no extra copy)."""
        del run_options
        binding._feeds = dict(self._arrays_from_lists(binding._feeds))
        model = self._model_for(binding._feeds)
        bound = {k: v for k, v in binding._outputs.items() if v is not None}
        results = model.run(binding._feeds, outputs=bound or None)
        names = list(binding._outputs) or [o.name for o in self._outputs]
        binding._results = self._pick(results, names)

    def __repr__(self) -> str:
        return f"<rammer.InferenceSession {self._proto.graph.name!r} on {self._backend!r}>"
