"""rammer as an ``onnx.backend.base.Backend``, for ONNX's backend test runner.

``RammerBackend`` runs on the ``reference`` backend; ``RammerBackend.for_backend
("cpu")`` gives a subclass that runs on another rammer backend::

    import onnx.backend.test
    from rammer.onnx_backend import RammerBackend
    suite = onnx.backend.test.BackendTest(RammerBackend.for_backend("cpu"), __name__)
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend as OnnxBackend
from onnx.backend.base import BackendRep

from .api import CompiledModel, compile


class RammerBackendRep(BackendRep):
    def __init__(self, compiled: CompiledModel):
        self.compiled = compiled

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        names = [t.name for t in self.compiled.inputs]
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(names, inputs))
        outs = self.compiled.run(feeds)
        return tuple(outs[t.name] for t in self.compiled.outputs)


class RammerBackend(OnnxBackend):
    #: Which rammer backend compiles the models.
    backend_name = "reference"

    @classmethod
    def for_backend(cls, name: str) -> type[RammerBackend]:
        return type(f"RammerBackend_{name.replace('-', '_')}", (cls,), {"backend_name": name})

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> RammerBackendRep:
        return RammerBackendRep(compile(model, backend=cls.backend_name))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device).run(inputs)
