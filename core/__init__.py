"""rammer: a DL compiler that schedules fine-grained rTasks holistically.

Public API::

    import rammer
    graph = rammer.load("model.onnx")                # verified static IR
    model = rammer.compile("model.onnx", backend="cpu")
    outputs = model({"x": x})
"""

from __future__ import annotations

from .api import CompiledModel, compile, load_compiled, random_feeds
from .errors import RammerError
from .frontend import load
from .session import InferenceSession, SessionOptions

__version__ = "0.1.0"

__all__ = ["CompiledModel", "InferenceSession", "RammerError", "SessionOptions", "compile", "load", "load_compiled",
           "random_feeds", "__version__"]
