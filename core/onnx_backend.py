"""rammer as an ``onnx.backend.base.Backend``, for ONNX's backend test runner.

``RammerBackend`` runs on the ``reference`` backend; ``RammerBackend.for_backend
("cpu")`` gives a subclass that runs on another rammer backend::

    import onnx.backend.test
    from rammer.onnx_backend import RammerBackend
    suite = onnx.backend.test.BackendTest(RammerBackend.for_backend("cpu"), __name__)

rammer compiles static graphs, but ONNX's interface hands over a model whose
shape-deciding inputs (a Reshape's ``shape``, a TopK's ``k``, a Reduce's
``axes``...) may be graph inputs known only at ``run``.  For those, and only
those, the adapter specialises: it compiles at the first ``run`` with the
inputs that an op needs as constants bound to their values, and keeps one
compiled model per distinct set of such values.  All other inputs stay
run-time inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend as OnnxBackend
from onnx.backend.base import BackendRep

from . import plugins
from .api import CompiledModel, compile
from .errors import BackendUnavailableError, FeedError, RammerError, ShapeError
from .frontend.source import ModelSource, read_model

#: At most this many inputs are bound as constants for one model.
MAX_BOUND_INPUTS = 8


def _bind_inputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` with the given graph inputs turned into initializers."""
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    keep = [vi for vi in bound.graph.input if vi.name not in values]
    del bound.graph.input[:]
    bound.graph.input.extend(keep)
    for name, value in values.items():
        bound.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return bound


def _upstream_inputs(model: onnx.ModelProto, tensor: str, inputs: list[str]) -> list[str]:
    """Integer graph inputs that ``tensor`` is computed from (shape inputs of
    "expanded" models reach an op through intermediate nodes)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    int_types = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
    is_int = {vi.name for vi in model.graph.input if vi.type.tensor_type.elem_type in int_types}
    seen, stack, found = set(), [tensor], []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            if name in is_int:
                found.append(name)
        elif name in producer:
            stack.extend(i for i in producer[name].input if i)
    return sorted(found)


class RammerBackendRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, backend_name: str, options: dict[str, Any] | None = None):
        self.model = model
        self.backend_name = backend_name
        #: Backend options passed to every compile (``prepare(model, **options)``).
        self.options = dict(options or {})
        initialized = {t.name for t in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in initialized]
        #: Inputs that must be bound to values before compiling.
        self.bound_names: list[str] = []
        self.compiled: CompiledModel | None = None
        self._specialised: dict[tuple, CompiledModel] = {}
        try:
            self.compiled = compile(model, backend=backend_name, **self.options)
        except ShapeError as exc:
            needed = self._inputs_behind(exc)
            if not needed:
                raise
            self.bound_names.extend(needed)

    def _inputs_behind(self, exc: ShapeError) -> list[str]:
        """The graph inputs to bind so that ``exc.needs_constant`` becomes constant."""
        name = exc.needs_constant
        if name is None:
            return []
        if name in self.input_names:
            return [name]
        return [n for n in _upstream_inputs(self.model, name, self.input_names) if n not in self.bound_names]

    def _specialise(self, feeds: dict[str, np.ndarray]) -> CompiledModel:
        while True:
            key = tuple((n, feeds[n].dtype.str, feeds[n].shape, feeds[n].tobytes()) for n in self.bound_names)
            if key in self._specialised:
                return self._specialised[key]
            values = {n: feeds[n] for n in self.bound_names}
            try:
                compiled = compile(_bind_inputs(self.model, values), backend=self.backend_name, **self.options)
            except ShapeError as exc:
                needed = [n for n in self._inputs_behind(exc) if n not in self.bound_names]
                if not needed or len(self.bound_names) + len(needed) > MAX_BOUND_INPUTS:
                    raise
                self.bound_names.extend(needed)
                continue
            self._specialised[key] = compiled
            return compiled

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise FeedError(f"{len(inputs)} inputs given, but the model takes {len(self.input_names)}: "
                                f"{self.input_names}")
            feeds = dict(zip(self.input_names, inputs))
        feeds = {k: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)
                 for k, v in feeds.items()}
        compiled = self.compiled
        if compiled is None:
            missing = [n for n in self.bound_names if n not in feeds]
            if missing:
                raise FeedError(f"missing feed(s) {missing}: the model needs their values to know its shapes "
                                f"(inputs: {self.input_names})")
            compiled = self._specialise(feeds)
            feeds = {k: v for k, v in feeds.items() if k not in self.bound_names}
        outs = compiled.run(feeds)
        return tuple(outs[t.name] for t in compiled.outputs)


class RammerBackend(OnnxBackend):
    #: Which rammer backend compiles the models.
    backend_name = "reference"

    @classmethod
    def for_backend(cls, name: str) -> type[RammerBackend]:
        return type(f"RammerBackend_{name.replace('-', '_')}", (cls,), {"backend_name": name})

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Whether a rammer backend of ``device``'s kind is available here ("CPU", "CUDA", "GPU"...),
        answered from the backends' capabilities."""
        return _device_kind(device) in _available_kinds()

    @classmethod
    def prepare(cls, model: ModelSource, device: str = "CPU", **kwargs: Any) -> RammerBackendRep:
        """Compile ``model`` (a ModelProto, bytes or a path); ``kwargs`` are backend options,
        and ``backend=NAME`` picks a rammer backend other than the class's."""
        backend = kwargs.pop("backend", None) or cls.backend_name
        if not cls.supports_device(device):
            raise BackendUnavailableError(
                f"no rammer backend for device '{device}' is available here "
                f"(available device kinds: {', '.join(sorted(_available_kinds())) or 'none'})")
        if not isinstance(model, onnx.ModelProto):
            model, _ = read_model(model)
        return RammerBackendRep(model, backend, kwargs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info: Any = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node on ``inputs`` (arrays in the node's input order, or a name -> array dict):
        it is wrapped in a one-node model whose input types are the arrays' own."""
        del outputs_info
        names = [n for n in node.input if n]
        if isinstance(inputs, dict):
            arrays = [np.asarray(inputs[n]) for n in names]
        else:
            arrays = [np.asarray(a) for a in (inputs if isinstance(inputs, (list, tuple)) else [inputs])]
        if len(arrays) != len(names):
            raise FeedError(f"node '{node.name or node.op_type}' ({node.op_type}) has {len(names)} input(s) "
                            f"but {len(arrays)} array(s) were given")
        opset = kwargs.pop("opset", None) or onnx.defs.onnx_opset_version()
        graph = onnx.helper.make_graph(
            [node], f"run_node_{node.op_type}",
            [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in zip(names, arrays)], [])
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)])
        # The outputs' types come from ONNX's shape inference (the checker wants them typed).
        try:
            inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        except Exception:  # an op ONNX cannot infer: rammer's own import says what is wrong
            inferred = {}
        for o in (o for o in node.output if o):
            if o in inferred:
                model.graph.output.append(inferred[o])
            else:
                model.graph.output.append(onnx.helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None))
        rep = cls.prepare(model, device, **kwargs)
        return rep.run(dict(zip(names, arrays)))

    @classmethod
    def run_model(cls, model: ModelSource, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)


#: onnx device names -> rammer's device kinds (``Capabilities.device``).
_DEVICE_KINDS = {"CPU": "cpu", "CUDA": "gpu", "GPU": "gpu", "ROCM": "gpu", "IPU": "ipu", "MCU": "mcu"}


def _device_kind(device: str) -> str:
    name = str(device).split(":")[0].upper()
    return _DEVICE_KINDS.get(name, name.lower())


def _available_kinds() -> set[str]:
    return {b.capabilities.device for b in plugins.backends().values() if b.availability().ok}


# Module-level functions, as ``onnxruntime.backend`` has them.
def prepare(model: ModelSource, device: str = "CPU", **kwargs: Any) -> RammerBackendRep:
    """Compile ``model`` for ``device``; see :meth:`RammerBackend.prepare`."""
    return RammerBackend.prepare(model, device, **kwargs)


def run_model(model: ModelSource, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
    return RammerBackend.run_model(model, inputs, device, **kwargs)


run = run_model


def run_node(node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info: Any = None,
             **kwargs: Any) -> Any:
    return RammerBackend.run_node(node, inputs, device, outputs_info, **kwargs)


def supports_device(device: str) -> bool:
    return RammerBackend.supports_device(device)


def is_compatible(model: ModelSource, device: str = "CPU", **kwargs: Any) -> bool:
    """Whether ``model`` loads and every op has an implementation here."""
    try:
        prepare(model, device, **kwargs)
    except RammerError:
        return False
    return True
