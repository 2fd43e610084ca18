"""Outside runtimes as columns of the matrix: onnxruntime and torch.

They run the very ONNX model rammer compiles (inputs fixed to the same
shapes) on the very same feeds, and their outputs are checked against
rammer's reference before they are timed, like any rammer backend.

torch cannot read ONNX by itself.  The ``torch`` column uses the third-party
``onnx2torch`` converter when it imports; otherwise the column says so
("n/a: no ONNX importer for torch ...") rather than timing something else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..backend import Availability
from .runner import BenchRunner, ModelCase, Prepared


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


class _OrtSession:
    def __init__(self, session: Any):
        self.session = session
        self.output_names = [o.name for o in session.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = self.session.run(self.output_names, dict(feeds))
        return dict(zip(self.output_names, outs))


class OnnxRuntimeRunner(BenchRunner):
    """onnxruntime with one execution provider, all graph optimisations on."""

    kind = "baseline"

    def __init__(self, name: str = "onnxruntime", provider: str = "CPUExecutionProvider"):
        self.name = name
        self.provider = provider
        self.description = f"onnxruntime ({provider}), ORT_ENABLE_ALL"
        self.threads: int | None = None
        if provider != "CPUExecutionProvider":
            # GPU kernels (TF32, fused attention...) are looser than CPU ones.
            self.rtol, self.atol = 1e-2, 1e-3

    def availability(self) -> Availability:
        try:
            import onnxruntime as ort  # deferred: an optional baseline, slow to import
        except Exception as exc:
            return Availability(False, f"onnxruntime does not import ({_first_line(exc)}); "
                                       'pip install -e ".[bench]" in the rammer checkout')
        if self.provider not in ort.get_available_providers():
            return Availability(False, f"onnxruntime {ort.__version__} has no {self.provider} here "
                                       f"(providers: {', '.join(ort.get_available_providers())})")
        return Availability(True)

    def set_threads(self, threads: int) -> None:
        self.threads = threads

    def prepare(self, case: ModelCase) -> Prepared:
        import onnxruntime as ort  # deferred: an optional baseline, slow to import

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors only: warnings would break the progress line
        if self.threads:
            opts.intra_op_num_threads = self.threads
            opts.inter_op_num_threads = 1
        session = ort.InferenceSession(case.proto.SerializeToString(), opts, providers=[self.provider])
        return _OrtSession(session)


def _import_onnx2torch() -> Callable[[Any], Any]:
    import onnx2torch  # deferred: an optional baseline, slow to import

    return onnx2torch.convert


class _TorchModule:
    def __init__(self, module: Any, input_names: list[str], output_names: list[str], device: str):
        self.module = module
        self.input_names = input_names
        self.output_names = output_names
        self.device = device

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch  # deferred: an optional baseline, slow to import

        args = [torch.from_numpy(np.ascontiguousarray(feeds[n])).to(self.device) for n in self.input_names]
        with torch.inference_mode():
            out = self.module(*args)
        if self.device != "cpu":
            torch.cuda.synchronize()
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(self.output_names):
            raise RuntimeError(f"the converted module returned {len(outs)} outputs, the model has "
                               f"{len(self.output_names)}")
        return {n: t.detach().cpu().numpy() for n, t in zip(self.output_names, outs)}


class TorchRunner(BenchRunner):
    """torch eager mode on a module converted from the ONNX model by onnx2torch."""

    kind = "baseline"
    #: Finds the ONNX -> torch converter; tests replace it.
    importer: Callable[[], Callable[[Any], Any]] = staticmethod(_import_onnx2torch)

    def __init__(self, name: str = "torch", device: str = "cpu"):
        self.name = name
        self.device = device
        self.description = f"torch eager ({device}) via onnx2torch"
        self.threads: int | None = None

    def availability(self) -> Availability:
        try:
            import torch  # deferred: an optional baseline, slow to import
        except Exception as exc:
            return Availability(False, f"torch does not import ({_first_line(exc)})")
        if self.device != "cpu" and not torch.cuda.is_available():
            return Availability(False, "torch sees no CUDA device here")
        try:
            self.importer()
        except Exception as exc:
            return Availability(False, "no ONNX importer for torch: onnx2torch is not usable here "
                                       f"({_first_line(exc)}); torch cannot read ONNX models by itself")
        return Availability(True)

    def set_threads(self, threads: int) -> None:
        self.threads = threads

    def prepare(self, case: ModelCase) -> Prepared:
        import torch  # deferred: an optional baseline, slow to import

        if self.threads:
            torch.set_num_threads(self.threads)
        convert = self.importer()
        module = convert(case.proto).eval().to(self.device)
        inputs = [i.name for i in case.proto.graph.input
                  if i.name not in {init.name for init in case.proto.graph.initializer}]
        return _TorchModule(module, inputs, list(case.output_names), self.device)


#: Baseline columns by name.  Each factory returns a fresh runner.
BASELINES: dict[str, Callable[[], BenchRunner]] = {
    "onnxruntime": lambda: OnnxRuntimeRunner("onnxruntime", "CPUExecutionProvider"),
    "onnxruntime-cuda": lambda: OnnxRuntimeRunner("onnxruntime-cuda", "CUDAExecutionProvider"),
    "torch": lambda: TorchRunner("torch", "cpu"),
    "torch-cuda": lambda: TorchRunner("torch-cuda", "cuda"),
}
